"""The search, described once: a frozen `SearchConfig` validated at the edge (CLI or YAML recipe).

Unknown keys are rejected with the closest known key. The choice lists of `LayoutSpace` and
`ArchitectureSpace` are the Optuna distributions of every trial (the same list in every trial);
combinations that break a rule of the simulator are pruned per trial with their reason.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field, PositiveFloat, PositiveInt, ValidationInfo, field_validator

from simulator.errors import ConfigError
from simulator.job.catalog import read_yaml
from simulator.job.enums import (
    CpCommType,
    CudaGraphs,
    DataParallelSharding,
    Fp4Recipe,
    Fp8Recipe,
    Precision,
    Recompute,
    RecomputeModule,
    Schedule,
    StateDtype,
    TokenDispatcher,
)
from simulator.job.specs import Frozen, parse

HARDWARE_SUFFIXES = (".yaml", ".yml", ".json")
JOURNAL = "journal:///"  # storage URL schemes (vtrain_ml.planner.storage opens them)
SQLITE = "sqlite:///"
MEMORY = "memory"
STUDIES_DIR = Path("runs") / "studies"


def default_storage(study: str) -> str:
    """The default storage URL of a study: a journal file of its own, runs/studies/<study>.journal
    of the working directory, by absolute path so that a printed resume command works anywhere
    (why a journal: vtrain_ml.planner.storage)."""
    return f"{JOURNAL}{(STUDIES_DIR / f'{study}.journal').resolve()}"


class Objective(StrEnum):
    """What the search optimizes (closed choice, dispatched in `planner.objective`)."""

    TIME = "time"  # minimize iteration time (equivalently time to train a token budget)
    COST = "cost"  # minimize dollars (to train the token budget, else per iteration)
    PARETO = "pareto"  # time versus cost, NSGA-II
    LARGEST_MODEL = "largest_model"  # maximize parameters trained within a wall-clock budget


class Strategy(StrEnum):
    """How the search explores the space (closed choice; `planner.strategy` picks one for AUTO)."""

    AUTO = "auto"  # the cheapest of the three for this space and simulator (planner.strategy)
    ENUMERATE = "enumerate"  # simulate every plan that passes the static memory bound
    SCREEN = "screen"  # score every plan (or a large sample) with the surrogate, verify the best
    OPTUNA = "optuna"  # TPE / NSGA-II trials scored by the surrogate, verified periodically


def one_choice(value: Any) -> Any:
    """A single value where a choice list is expected: the list of that one value, so that
    `num_gpus: 256` fixes the GPU count as `num_gpus: [256]` does (the issue's "a list, or one
    value"). Lists, tuples and None pass unchanged, for the field's own validation."""
    return value if value is None or isinstance(value, list | tuple) else (value,)


class LayoutSpace(Frozen):
    """Choice lists of the layout knobs. `None` derives the list from the model and batch:
    pp = divisors of the layer count, dp = divisors of the global batch up to `max_dp`. A
    single value is a list of one (`one_choice`), except for `recompute_modules`, whose
    choices are lists themselves."""

    tp: tuple[PositiveInt, ...] = (1, 2, 4, 8)
    pp: tuple[PositiveInt, ...] | None = None
    dp: tuple[PositiveInt, ...] | None = None
    max_dp: PositiveInt | None = None
    use_all_gpus: bool = False  # dp = max_gpus / (tp * pp): not a knob
    micro_batch_size: tuple[PositiveInt, ...] = (1, 2, 4)
    recompute: tuple[Recompute, ...] = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
    schedule: tuple[Schedule, ...] = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED_1F1B)
    virtual_stages: tuple[PositiveInt, ...] = (2,)  # used by interleaved_1f1b only
    sequence_parallel: tuple[bool, ...] = (False, True)
    distributed_optimizer: tuple[bool, ...] = (False, True)
    overlap_grad_reduce: tuple[bool, ...] = (False, True)
    flash_attention: tuple[bool, ...] = (True,)
    # Issue 25's dimensions, named as the job's fields. None: not a knob (the job's default, or
    # the top-level setting); a list, even of one value, makes it a knob of the plans.
    num_gpus: tuple[PositiveInt, ...] | None = None  # dp = num_gpus / (tp*cp*pp): not a knob
    ep: tuple[PositiveInt, ...] | None = None
    expert_tp: tuple[PositiveInt, ...] | None = None  # None: the experts' tp is tp
    cp: tuple[PositiveInt, ...] | None = None
    cp_comm_type: tuple[CpCommType, ...] | None = None
    precision: tuple[str, ...] | None = None  # "bf16", "fp8", "fp8/mxfp8", "fp4/nvfp4", ...
    data_parallel_sharding: tuple[DataParallelSharding, ...] | None = None  # replaces distributed_optimizer
    cuda_graphs: tuple[CudaGraphs, ...] | None = None
    tp_comm_overlap: tuple[bool, ...] | None = None
    moe_token_dispatcher: tuple[TokenDispatcher, ...] | None = None
    # Megatron's --overlap-moe-expert-parallel-comm (combined 1F1B: one micro-batch's dispatch
    # and combine under the other's compute); a plan can use it with ep > 1, the alltoall or
    # flex dispatcher, no full recompute and, with pp > 1, the interleaved schedule
    moe_overlap_ep_comm: tuple[bool, ...] | None = None
    # Megatron-Core's --overlap-param-gather (the parameter all-gather under the next forward);
    # a plan can use it with a sharded optimizer and overlapped gradient reduction
    overlap_param_gather: tuple[bool, ...] | None = None
    # The memory settings of today's recipes (simulator.job.param_bytes): Megatron's DDP
    # grad_reduce_in_fp32 (false: a 16-bit gradient buffer, as every Megatron-Bridge performance
    # script of Llama 3, DeepSeek-V3, Qwen3 and GPT-OSS sets) and the precision-aware optimizer's
    # Adam moments (below fp32 only with the distributed optimizer)
    grad_reduce_in_fp32: tuple[bool, ...] | None = None
    exp_avg_dtype: tuple[StateDtype, ...] | None = None
    exp_avg_sq_dtype: tuple[StateDtype, ...] | None = None
    # Megatron-Core's --recompute-modules under selective recompute: each list is one choice
    # (["core_attn"] is Megatron's default, plain `selective`); the `recompute` knob then offers
    # `selective:<module>+<module>` for each (planner.space.recompute_choices)
    recompute_modules: tuple[tuple[RecomputeModule, ...], ...] | None = None
    # Megatron's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split:
    # a pp (x virtual stages) that does not divide the layers but divides layers + 2 (+ the MTP
    # layers) puts one layer fewer on the first stage and on the last (Llama 3.1 405B's 126
    # layers on 16 stages; DeepSeek-V3's 61 on 4 or 8), as `planner.split` computes
    account_for_embedding_and_loss: bool = False

    @field_validator("*", mode="before")
    @classmethod
    def _one_choice(cls, value: Any, info: ValidationInfo) -> Any:
        return value if info.field_name in _NOT_CHOICE_LISTS else one_choice(value)


# the LayoutSpace fields that are not lists of choices (every other field is one)
_NOT_CHOICE_LISTS = frozenset({"max_dp", "use_all_gpus", "account_for_embedding_and_loss",
                               "recompute_modules"})


# LayoutSpace fields added by issue 25: left out of a study's content hash while they hold their
# defaults, so that an older search keeps its study name and stored trials.
NEW_SPACE_FIELDS = ("num_gpus", "ep", "expert_tp", "cp", "cp_comm_type", "precision",
                    "data_parallel_sharding", "cuda_graphs", "tp_comm_overlap",
                    "moe_token_dispatcher", "account_for_embedding_and_loss", "moe_overlap_ep_comm",
                    "grad_reduce_in_fp32", "exp_avg_dtype", "exp_avg_sq_dtype", "recompute_modules",
                    "overlap_param_gather")
# the space fields that change the bytes per parameter of the model states (planner.rules'
# static memory bound reads them from simulator.job.param_bytes)
MEMORY_KNOBS = ("grad_reduce_in_fp32", "exp_avg_dtype", "exp_avg_sq_dtype")
NEW_TOP_FIELDS = ("fp8_recipe", "fp4_recipe")


class HardwareEntry(Frozen):
    """One GPU type of a `hardware:` list: which GPU to rent, at which price."""

    name: str  # catalog name or hardware file
    price_per_gpu_hour_usd: float | None = Field(default=None, ge=0)  # None: the top-level, else the file's
    nvlink_domain: PositiveInt | None = None  # GPUs on one NVLink fabric; None: the hardware file's


class ArchitectureSpace(Frozen):
    """Dense GPT architectures searched together with the layout (case study 3).

    Heads are derived as hidden_size / head_dim so that every (hidden, head_dim) pair is a valid
    attention shape by construction; the FFN is 4 * hidden (GPT convention).
    """

    num_layers: tuple[PositiveInt, ...]
    hidden_size: tuple[PositiveInt, ...]
    head_dim: tuple[PositiveInt, ...] = (128,)
    vocab_size: PositiveInt = 50257

    _one_choice = field_validator("num_layers", "hidden_size", "head_dim", mode="before")(one_choice)


class SearchConfig(Frozen):
    """Everything a search needs; CLI flags and `--config` files both land here."""

    model: str | dict[str, Any] | None = None  # preset name, {preset: .., overrides} or a spec
    architecture: ArchitectureSpace | None = None
    hardware: str | tuple[str | HardwareEntry, ...] = "a100-80gb"  # a list: the GPU type is a knob
    max_gpus: PositiveInt  # config_from_dict fills it from space.num_gpus when that is given
    gpus_per_node: PositiveInt | None = None
    inter_node_bandwidth_Gbps: PositiveFloat | None = None
    price_per_gpu_hour_usd: float | None = Field(default=None, ge=0)
    global_batch: PositiveInt
    seq: PositiveInt | None = None
    precision: Precision = Precision.FP16
    fp8_recipe: Fp8Recipe | None = None  # of plain "fp8" (None: the GPU generation's default)
    fp4_recipe: Fp4Recipe | None = None
    train_tokens: PositiveFloat | None = None
    tokens_per_parameter: PositiveFloat | None = None  # Chinchilla: 20
    time_budget_days: PositiveFloat | None = None
    objective: Objective = Objective.TIME
    strategy: Strategy = Strategy.AUTO
    screen_limit: PositiveInt = 5_000_000  # most plans scored at once; a larger space: a sample
    space: LayoutSpace = LayoutSpace()
    trials: PositiveInt = 3000
    verify_every: PositiveInt = 100
    verify_top: PositiveInt = 5
    initial_samples: PositiveInt = 24  # exact samples for a focused surrogate
    surrogate: str | None = None
    storage: str | None = None  # default: default_storage(study name)
    study: str | None = None  # default: derived from the config's content hash
    seed: int = 0
    n_jobs: PositiveInt = 1
    max_exhaustive: PositiveInt = 200_000
    patience: PositiveInt | None = None  # stop after N verification rounds without a better exact answer
    # screening's optimality gap: stop when no plan the surrogate has not ruled out could beat the
    # best exact one by more than this fraction (time / cost / largest model; 0: the exact optimum
    # of the screened plans). A baseline is simulated first, so the answer never loses to it.
    tolerance: float = Field(default=0.0, ge=0.0, lt=0.5)
    enumerate_below: int = Field(default=1000, ge=0)  # Pareto: simulate every plan of a space this small
    baseline: dict[str, Any] | None = None  # a hand-picked plan (knob values) to compare against
    top: PositiveInt = 10  # rows of the report table

    @property
    def time_budget_s(self) -> float | None:
        return self.time_budget_days * 86400.0 if self.time_budget_days else None

    def space_hash(self) -> str:
        """Content hash of what defines the study's trials (not run-length or output options);
        issue 25's fields count only when set (an older search hashes as before)."""
        keep = self.model_dump(mode="json", exclude={"trials", "verify_every", "verify_top", "storage",
                                                     "study", "n_jobs", "max_exhaustive", "surrogate",
                                                     "baseline", "top", "seed", "patience", "tolerance",
                                                     "enumerate_below", "strategy", "screen_limit"})
        for name in NEW_TOP_FIELDS:
            if keep.get(name) is None:
                keep.pop(name, None)
        defaults = LayoutSpace()
        for name in NEW_SPACE_FIELDS:
            if getattr(self.space, name) == getattr(defaults, name):
                keep["space"].pop(name, None)
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:10]

    def hardware_entries(self) -> tuple[HardwareEntry, ...]:
        """The GPU types searched, each with its price (an entry's own, else the top-level
        `price_per_gpu_hour_usd`, else None: the hardware file's)."""
        given = (self.hardware,) if isinstance(self.hardware, str) else self.hardware
        entries = [HardwareEntry(name=e) if isinstance(e, str) else e for e in given]
        price = self.price_per_gpu_hour_usd
        return tuple(e if e.price_per_gpu_hour_usd is not None or price is None
                     else e.model_copy(update={"price_per_gpu_hour_usd": price}) for e in entries)

    def study_name(self) -> str:
        if self.study:
            return self.study
        model = self.model if isinstance(self.model, str) else "arch" if self.architecture else "custom"
        # a hardware file by its stem: a study name is typed on command lines, a path is not a name
        # (the content hash still tells two paths of one stem apart)
        hardware = "+".join(_short(e.name) for e in self.hardware_entries())
        return f"{model}-{hardware}-{self.max_gpus}-{self.objective.value}-{self.space_hash()}"

    def storage_url(self) -> str:
        """The storage URL, a file in it by absolute path (a resume command works anywhere)."""
        return absolute_url(self.storage) if self.storage else default_storage(self.study_name())


def _short(name: str) -> str:
    path = Path(name)
    return path.stem if path.suffix in HARDWARE_SUFFIXES else name


def absolute_url(url: str) -> str:
    """A journal or SQLite URL with its file made absolute (relative to the working directory)."""
    for prefix in (JOURNAL, SQLITE):
        if url.startswith(prefix):
            return f"{prefix}{Path(url.removeprefix(prefix)).resolve()}"
    return url


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> SearchConfig:
    """A recipe file, with command-line values (not None) taking precedence."""
    data = read_yaml(Path(path)) if Path(path).exists() else None
    if data is None and not Path(path).exists():
        raise ConfigError(f"search config {path} does not exist")
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of search settings")
    return config_from_dict({**data, **(overrides or {})}, where=str(path))


def config_from_dict(data: dict[str, Any], where: str = "search") -> SearchConfig:
    """Validate field types (pydantic), then the cross-field rules (`config_problems`). With
    `space.num_gpus` and no `max_gpus`, the budget is the largest GPU count."""
    space = data.get("space")
    counts = one_choice(space.get("num_gpus")) if isinstance(space, dict) else None
    if ("max_gpus" not in data and isinstance(counts, list | tuple) and counts
            and all(isinstance(x, int) for x in counts)):  # else pydantic names the bad count
        data = {**data, "max_gpus": max(counts)}
    config = parse(SearchConfig, data, where)
    problems = config_problems(config)
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
    return config


def config_problems(config: SearchConfig) -> list[str]:
    """Every cross-field problem of a search config, as user-facing sentences."""
    problems: list[str] = []
    if (config.model is None) == (config.architecture is None):
        problems.append("give exactly one of 'model' (a preset or spec) and 'architecture' "
                        "(choice lists of layers and hidden sizes)")
    if config.objective is Objective.LARGEST_MODEL and not config.time_budget_days:
        problems.append("objective=largest_model needs time_budget_days (the wall-clock budget)")
    if config.objective is Objective.LARGEST_MODEL and not config.tokens_per_parameter:
        problems.append("objective=largest_model needs tokens_per_parameter (e.g. 20, Chinchilla)")
    if config.train_tokens and config.tokens_per_parameter:
        problems.append("give train_tokens or tokens_per_parameter, not both")
    for name in LayoutSpace.model_fields:
        value = getattr(config.space, name)
        if isinstance(value, tuple) and not value:
            problems.append(f"space.{name} is an empty choice list; give at least one value")
    from vtrain_ml.planner.dimensions import dimension_problems

    return problems + dimension_problems(config)
