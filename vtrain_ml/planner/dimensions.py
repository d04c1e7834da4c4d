"""Issue 25's dimensions of the search space: the GPU type and count, expert and context
parallelism, precision with its recipe, data-parallel sharding, CUDA graphs, tp comm overlap and
the MoE token dispatcher -- each a knob named as the job's field.

Three kinds of checks, all before any plan is scored:
- `dimension_problems`: the config alone (a precision string that names no recipe, `num_gpus`
  with `dp`, ...), reported with the config's other problems as one `ConfigError`;
- `model_problems`: a listed value that no plan of this model can use (`space.ep=3` with 256
  experts, `cp` that does not split the sequence, a ZeRO-3 plan of a MoE model), one
  `ConfigError` naming the field and the fix -- a user who lists a value meant it;
- per plan, `simulator.job.validation.job_problems` (`SearchSpace.build`) and its vectorized twin
  on the table (`planner.rules`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.errors import ConfigError
from simulator.job.enums import CpCommType, CudaGraphs, DataParallelSharding, Fp4Recipe, Fp8Recipe, Precision
from simulator.job.precision import LowPrecisionFormat, low_precision
from simulator.job.specs import Job, ModelSpec

if TYPE_CHECKING:
    from vtrain_ml.planner.config import SearchConfig

RECIPE_SEP = "/"  # "fp8/mxfp8": the precision and its recipe as one choice


@dataclass(frozen=True)
class PrecisionChoice:
    """One `space.precision` entry: the job's `training.precision` and its recipe fields."""

    precision: Precision
    fp8_recipe: Fp8Recipe | None = None
    fp4_recipe: Fp4Recipe | None = None


def parse_precision(text: str, fp8_default: Fp8Recipe | None = None,
                    fp4_default: Fp4Recipe | None = None) -> PrecisionChoice:
    """"bf16", "fp8" (the top-level `fp8_recipe`, else the GPU generation's default, as a job file
    reads it), "fp8/mxfp8", "fp4/nvfp4", ...; `ConfigError` naming the entry and the choices."""
    name, _, recipe = str(text).strip().lower().partition(RECIPE_SEP)
    recipes = {Precision.FP8: Fp8Recipe, Precision.FP4: Fp4Recipe}
    known = ", ".join([p.value for p in Precision] + [f"fp8/{r.value}" for r in Fp8Recipe]
                      + [f"fp4/{r.value}" for r in Fp4Recipe])
    try:
        precision = Precision(name)
    except ValueError:
        raise ConfigError(f"space.precision={text!r} is not a precision; use one of {known}") from None
    if not recipe:
        return PrecisionChoice(precision, fp8_default if precision is Precision.FP8 else None,
                               fp4_default if precision is Precision.FP4 else None)
    kind = recipes.get(precision)
    if kind is None:
        raise ConfigError(f"space.precision={text!r}: {precision.value} has no recipe; write "
                          f"{precision.value}")
    try:
        value = kind(recipe)
    except ValueError:
        raise ConfigError(f"space.precision={text!r}: unknown {precision.value} recipe {recipe!r}; use "
                          f"one of {', '.join(f'{precision.value}/{r.value}' for r in kind)}") from None
    if isinstance(value, Fp8Recipe):
        return PrecisionChoice(precision, fp8_recipe=value)
    return PrecisionChoice(precision, fp4_recipe=Fp4Recipe(value))


def top_precision(config: SearchConfig) -> PrecisionChoice:
    """The precision of every plan when `space.precision` is not a knob."""
    p = config.precision
    return PrecisionChoice(p, config.fp8_recipe if p is Precision.FP8 else None,
                           config.fp4_recipe if p is Precision.FP4 else None)


def precision_choice(config: SearchConfig, value: object | None) -> PrecisionChoice:
    if value is None:
        return top_precision(config)
    return parse_precision(str(value), config.fp8_recipe, config.fp4_recipe)


def precision_twin(config: SearchConfig, choice: object | None, job: Job) -> str | None:
    """The earlier `space.precision` entry that runs on `job`'s GPU exactly as `choice` does, or
    None. Two entries run alike when they give the same `training.precision` and low-precision
    format there: Transformer Engine emulates blockwise FP8 with MXFP8 on Blackwell
    (`simulator.job.precision.FORMATS`), and a bare "fp8" is the GPU's default recipe. Their
    plans are the same plans with the same numbers, so a space holds them once, under the first
    entry listed: scoring and simulating them twice bought nothing and listed each answer twice."""
    entries = [str(e).strip().lower() for e in config.space.precision or ()]
    mine = str(choice).strip().lower() if choice is not None else None
    if mine not in entries:
        return None
    runs_as = _runs_as(config, mine, job)
    if runs_as[1] is None:  # 16 bits (one entry each), or a recipe this GPU refuses anyway
        return None
    for entry in entries[:entries.index(mine)]:
        if _runs_as(config, entry, job) == runs_as:
            return entry
    return None


def _runs_as(config: SearchConfig, entry: str, job: Job) -> tuple[Precision, LowPrecisionFormat | None]:
    low = precision_choice(config, entry)
    training = job.training.model_copy(update={"precision": low.precision, "fp8_recipe": low.fp8_recipe,
                                               "fp4_recipe": low.fp4_recipe})
    return low.precision, low_precision(job.model_copy(update={"training": training}))


def uneven_split(model: ModelSpec, pp: int, virtual_stages: int) -> tuple[int, int] | None:
    """(first, last) stage layers of Megatron's split that counts the embedding, the loss and
    each MTP module as a layer (`--account-for-embedding-in-pipeline-split`,
    `--account-for-loss-in-pipeline-split`; Megatron-Bridge's DeepSeek-V3 layout
    'Et*4|(t*4|)*14tmL' counts them the same way): None when the layers split evenly, or when
    layers + 2 + MTP do not split over pp x virtual stages either."""
    layers, chunks = model.num_layers, pp * virtual_stages
    if pp < 2 or layers % chunks == 0:
        return None
    total = layers + 2 + model.mtp_num_layers
    if total % chunks:
        return None
    per_stage = total // pp
    first, last = per_stage - 1, per_stage - 1 - model.mtp_num_layers
    return (first, last) if last >= max(1, virtual_stages - 1) else None


def dimension_problems(config: SearchConfig) -> list[str]:
    """Problems of issue 25's settings that the config alone shows (see the module docstring)."""
    s, problems = config.space, []
    names = [e.name for e in config.hardware_entries()]
    if not names:
        problems.append("hardware is an empty list; give at least one GPU type")
    if len(set(names)) < len(names):
        problems.append(f"hardware lists a GPU type twice ({', '.join(names)}); give each once")
    plain = set()
    for text in s.precision or ():
        try:
            choice = parse_precision(text)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        if RECIPE_SEP not in text:
            plain.add(choice.precision)
    for field, precision in (("fp8_recipe", Precision.FP8), ("fp4_recipe", Precision.FP4)):
        if getattr(config, field) is not None and precision not in {config.precision, *plain}:
            problems.append(f"{field}={getattr(config, field).value} needs precision={precision.value} "
                            f"(or a plain '{precision.value}' in space.precision); remove it or set the "
                            f"precision")
    if s.num_gpus is not None:
        if s.use_all_gpus or s.dp is not None:
            problems.append("space.num_gpus derives dp = num_gpus / (tp*cp*pp): remove "
                            f"{'space.use_all_gpus' if s.use_all_gpus else 'space.dp'}")
        over = [n for n in s.num_gpus if n > config.max_gpus]
        if over:
            problems.append(f"space.num_gpus={over[0]} exceeds max_gpus={config.max_gpus}; raise "
                            f"max_gpus or drop it")
    if s.data_parallel_sharding is not None and "distributed_optimizer" in s.model_fields_set:
        problems.append("space.data_parallel_sharding replaces space.distributed_optimizer (optim is "
                        "the distributed optimizer); give one of them")
    if CpCommType.A2A_P2P in (s.cp_comm_type or ()):
        problems.append("space.cp_comm_type=a2a+p2p needs hierarchical_context_parallel_sizes, which "
                        "the search does not choose; use p2p, a2a or all_gather")
    return problems


def model_problems(config: SearchConfig, model: ModelSpec | None) -> list[str]:
    """Listed values that no plan of `model` (None: an architecture search) can use."""
    s, problems = config.space, []
    moe_only: dict[str, list[object]] = {
                "ep": [x for x in s.ep or () if x > 1], "expert_tp": list(s.expert_tp or ()),
                "moe_token_dispatcher": [d.value for d in s.moe_token_dispatcher or ()
                                         if d.value != "alltoall"],
                "moe_overlap_ep_comm": [x for x in s.moe_overlap_ep_comm or () if x]}
    if model is None or not model.is_moe:
        problems += [f"space.{k}={v[0]} applies to a mixture-of-experts model; "
                     f"{'the architectures searched are' if model is None else f'model {model.name} is'} "
                     f"dense: remove it" for k, v in moe_only.items() if v]
    else:
        e, ffn = model.num_experts or 1, model.moe_ffn
        problems += [f"space.ep={x} does not divide num_experts={e}; use a divisor of {e}"
                     for x in s.ep or () if e % x]
        problems += [f"space.expert_tp={x} does not divide moe_ffn_hidden_size={ffn}"
                     for x in s.expert_tp or () if ffn % x]
        problems += [f"space.cuda_graphs={g.value} with the dropless MoE model {model.name} is not "
                     f"modelled (Megatron captures MoE layers only with drop-and-pad); use none"
                     for g in s.cuda_graphs or () if g is not CudaGraphs.NONE]
    deep = [x for x in s.data_parallel_sharding or () if x.level > DataParallelSharding.OPTIM.level]
    if deep and model is not None and (model.is_moe or model.mtp_num_layers):
        problems.append(f"space.data_parallel_sharding={deep[0].value} with model {model.name} (mixture "
                        f"of experts or MTP) is not modelled; use optim or no_shard")
    problems += recompute_module_problems(config, model)
    seq = model.seq_length if model is not None else config.seq or 2048
    problems += [f"space.cp={x}: seq_length={seq} is not divisible by 2*cp = {2 * x} (every cp rank "
                 f"holds two chunks of the sequence); use a cp that does"
                 for x in s.cp or () if seq % (2 * x)]
    return problems


# a small dense GPT: the model of the per-axis rule checks when a search builds its models
PROBE_MODEL = ModelSpec(num_layers=1, hidden_size=128, num_attention_heads=1, vocab_size=128, seq_length=128)


def recompute_module_problems(config: SearchConfig, model: ModelSpec | None) -> list[str]:
    """`space.recompute_modules` lists a module the model lacks (simulator.job.recompute_rules;
    an architecture search builds dense GPT models), or without selective recompute to use it."""
    from simulator.job.enums import Recompute
    from simulator.job.recompute_rules import missing_modules
    from simulator.job.specs import TrainingSpec

    s = config.space
    if not s.recompute_modules:
        return []
    if any(not group for group in s.recompute_modules):
        return ["space.recompute_modules has an empty list; give each choice its modules "
                "([core_attn] is Megatron's default)"]
    if Recompute.SELECTIVE not in s.recompute:
        return ["space.recompute_modules needs selective in space.recompute (Megatron's "
                "--recompute-modules apply to selective recompute); add it or remove recompute_modules"]
    missing = missing_modules(model or PROBE_MODEL, TrainingSpec(global_batch_size=1))
    name = "the architectures searched (dense GPT)" if model is None else f"model {model.name}"
    return [f"space.recompute_modules: {module.value} needs {missing[module]}, which {name} "
            f"lacks; remove it" for module in dict.fromkeys(m for group in s.recompute_modules
                                                            for m in group) if module in missing]


def check_model(config: SearchConfig, model: ModelSpec | None) -> None:
    problems = model_problems(config, model)
    if problems:
        raise ConfigError("; ".join(problems))


__all__ = ["PrecisionChoice", "check_model", "dimension_problems", "model_problems", "parse_precision",
           "precision_choice", "top_precision", "uneven_split"]
