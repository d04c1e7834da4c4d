"""The search space: fixed choice lists per knob, and params -> a checked candidate job.

Two kinds of pruning, both with reasons a user can read:
- *constructive*, once: knob values that can never be valid (a tp that does not divide the head
  count, a dp that does not divide the global batch) are left out of the choice lists
  (`SearchSpace.pruned_values`);
- *per candidate*: combinations that break a cross-field rule of the simulator
  (`simulator.job.validation.job_problems`), exceed the GPU budget, or whose model states alone
  cannot fit in GPU memory (`static_memory_bytes`, an exact lower bound of the simulator's peak
  memory) are infeasible with their reasons, reported to Optuna through constraints.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from simulator.errors import InfeasibleConfigError
from simulator.graph.fsdp import sharding_ranks
from simulator.graph.params import optimizer_shards, total_params
from simulator.job.catalog import load_model, resolve_hardware
from simulator.job.enums import (
    CpCommType,
    CudaGraphs,
    DataParallelSharding,
    StateDtype,
    TokenDispatcher,
)
from simulator.job.param_bytes import param_bytes
from simulator.job.specs import (
    ClusterSpec,
    GiB,
    HardwareSpec,
    Job,
    ModelSpec,
    ParallelPlan,
    TrainingSpec,
    parse,
)
from simulator.job.validation import job_problems
from simulator.memory.states import OPTIMIZER_BYTES_PER_PARAM, grad_bytes_per_param, stage_param_counts
from vtrain_ml.planner.choices import parse_pipeline, parse_recompute, pipeline_choices, recompute_choices
from vtrain_ml.planner.config import MEMORY_KNOBS, SearchConfig
from vtrain_ml.planner.dimensions import check_model, precision_choice, precision_twin, uneven_split

Choice = bool | int | float | str


@dataclass(frozen=True)
class Knob:
    """One Optuna parameter with the same `choices` in every trial.

    Integer choices in arithmetic progression (layers 16, 24, ..., 128) become an ordered
    `IntDistribution(low, high, step)`, so that TPE can model "larger is better up to a point";
    anything else (tp 1, 2, 4, 8; booleans; schedules) is categorical.
    """

    name: str
    choices: tuple[Choice, ...]

    @property
    def step(self) -> int | None:
        c = self.choices
        if len(c) < 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in c):
            return None
        steps = {int(b) - int(a) for a, b in itertools.pairwise(c)}
        return steps.pop() if len(steps) == 1 and min(steps) > 0 else None

    def distribution(self) -> BaseDistribution:
        step = self.step
        if step is None:
            return CategoricalDistribution(self.choices)
        return IntDistribution(int(self.choices[0]), int(self.choices[-1]), step=step)

    def suggest(self, trial: optuna.Trial) -> Choice:
        step = self.step
        if step is None:
            value = trial.suggest_categorical(self.name, self.choices)
            assert value is not None
            return value
        return trial.suggest_int(self.name, int(self.choices[0]), int(self.choices[-1]), step=step)


@dataclass(frozen=True)
class Candidate:
    """A point of the space: its params, the job (when buildable) and why it is infeasible."""

    params: dict[str, Choice]
    job: Job | None
    problems: tuple[str, ...] = ()  # breaks a rule: never simulated
    memory_problems: tuple[str, ...] = ()  # valid, but the model states alone overflow memory

    @property
    def valid(self) -> bool:
        return self.job is not None and not self.problems

    @property
    def feasible(self) -> bool:
        return self.valid and not self.memory_problems

    @property
    def reasons(self) -> tuple[str, ...]:
        return self.problems + self.memory_problems

    @property
    def key(self) -> str:
        return params_key(self.params)


def params_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def static_memory_bytes(job: Job) -> float:
    """Weights, gradients and optimizer states of the fullest stage, plus the reserved memory.

    The simulator's peak memory adds activations to exactly these terms (simulator.memory.stages), so
    this is a lower bound: a job above capacity here can never fit, and needs no simulation.
    """
    n = float(stage_param_counts(job).max())
    shard = max(optimizer_shards(job))  # dense over dp x cp, experts over expert_dp: the wider
    # shard divides both, which keeps this a lower bound
    # ZeRO-2/3 (data_parallel_sharding) shard gradients / weights too: sharding all of them keeps
    # this a lower bound (the embedding and the FSDP units in flight stay whole)
    level, ranks = job.sharding.level, sharding_ranks(job)  # FSDP's units over dp x cp
    grads = grad_bytes_per_param(job.training.precision) / (
        ranks if level >= DataParallelSharding.OPTIM_GRADS.level else 1)
    weights = 2.0 / (ranks if level >= DataParallelSharding.OPTIM_GRADS_PARAMS.level else 1)
    per_param = weights + grads + OPTIMIZER_BYTES_PER_PARAM / shard
    if memory_settings(job.training):  # a 16-bit gradient buffer, 16-bit Adam moments: the
        # framework's exact bytes (simulator.job.param_bytes) where they are fewer
        pb = param_bytes(job)
        exact = (pb.weights / (ranks if level >= DataParallelSharding.OPTIM_GRADS_PARAMS.level else 1)
                 + pb.gradients / (ranks if level >= DataParallelSharding.OPTIM_GRADS.level else 1)
                 + pb.sharded / shard)
        per_param = min(per_param, exact)
    return n * per_param + job.hardware.reserved_memory_GiB * GiB


def memory_settings(t: TrainingSpec) -> bool:
    """Whether a job sets the model-state knobs a search can list (`config.MEMORY_KNOBS`)."""
    return (t.grad_reduce_in_fp32 is not None or t.exp_avg_dtype is not StateDtype.FP32
            or t.exp_avg_sq_dtype is not StateDtype.FP32)


SP_TWIN = ("sequence_parallel=true at tp=1 runs exactly as sequence_parallel=false (Megatron turns "
           "it off without tensor parallelism): the space holds these plans once, as false")


def divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


class SearchSpace:
    """Knobs and candidate construction for one `SearchConfig` (pure; no simulation)."""

    def __init__(self, config: SearchConfig, hardware: HardwareSpec | None = None) -> None:
        self.config = config
        self.entries = {e.name: e for e in config.hardware_entries()}
        # specs by entry name; `hardware`: one already resolved for a single GPU type
        self.hardware_specs = {name: hardware if hardware is not None and len(self.entries) == 1
                               else resolve_hardware(name) for name in self.entries}
        self.hardware = next(iter(self.hardware_specs.values()))  # the first (the only one, usually)
        self.base_model = _fixed_model(config)
        check_model(config, self.base_model)
        self.pruned_values: dict[str, dict[str, str]] = {}
        self._twins: dict[tuple[str, str], str | None] = {}
        self.knobs = self._knobs()
        # sequence parallelism offered on and off: at tp 1 the two are one plan (Megatron turns it
        # off there), held once, as off (`SP_TWIN`; planner.rules' layout grid asks too)
        self.sequence_parallel_both = any(k.name == "sequence_parallel" and set(k.choices) == {False, True}
                                          for k in self.knobs)
        self._models: dict[tuple[int, int, int], ModelSpec] = {}

    # -- choice lists -------------------------------------------------------------------------
    def _knobs(self) -> tuple[Knob, ...]:
        c, s = self.config, self.config.space
        gbs = c.global_batch
        knobs: list[tuple[str, list[Choice]]] = []
        if c.architecture:
            a = c.architecture
            knobs += [("num_layers", list(a.num_layers)), ("hidden_size", list(a.hidden_size)),
                      ("head_dim", list(a.head_dim))]
        if len(self.entries) > 1:
            knobs.append(("hardware", list(self.entries)))
        if s.num_gpus is not None:
            knobs.append(("num_gpus", list(s.num_gpus)))
        m = self.base_model
        tp = self._keep("tp", s.tp, lambda t: None if m is None or (m.num_attention_heads % t == 0 and
                        m.query_groups % t == 0) else f"does not divide the {m.num_attention_heads} heads")
        knobs.append(("tp", tp))
        if s.cp is not None:
            knobs.append(("cp", list(s.cp)))
        knobs.append(("pp", self._pp(m)))
        if not s.use_all_gpus and s.num_gpus is None:
            dp_default = divisors(gbs, s.max_dp or c.max_gpus)
            dp = self._keep("dp", s.dp or dp_default, lambda d: None if gbs % d == 0
                            else f"does not divide global_batch={gbs}")
            knobs.append(("dp", dp))
        knobs += [(name, list(getattr(s, name))) for name in ("ep", "expert_tp")
                  if getattr(s, name) is not None]
        mb = self._keep("micro_batch_size", s.micro_batch_size,
                        lambda b: None if gbs % b == 0 else f"does not divide global_batch={gbs}")
        flash = self._keep("flash_attention", s.flash_attention, lambda f: None if not f or any(
            h.supports_flash_attention for h in self.hardware_specs.values())
            else f"unsupported on {self.hardware.name}")
        knobs += [("micro_batch_size", mb),
                  ("recompute", list[Choice](recompute_choices(s.recompute, s.recompute_modules))),
                  ("pipeline", list[Choice](pipeline_choices(s.schedule, s.virtual_stages)))]
        if s.precision is not None:
            knobs.append(("precision", [str(x).strip().lower() for x in s.precision]))
        knobs.append(("sequence_parallel", list(s.sequence_parallel)))
        if s.data_parallel_sharding is None:
            knobs.append(("distributed_optimizer", list(s.distributed_optimizer)))
        else:
            knobs.append(("data_parallel_sharding", [x.value for x in s.data_parallel_sharding]))
        knobs += [("overlap_grad_reduce", list(s.overlap_grad_reduce)), ("flash_attention", flash)]
        for name in ("cp_comm_type", "moe_token_dispatcher", "cuda_graphs", "tp_comm_overlap",
                     "moe_overlap_ep_comm", "overlap_param_gather", *MEMORY_KNOBS):
            values = getattr(s, name)
            if values is not None:
                knobs.append((name, [getattr(v, "value", v) for v in values]))
        for name, values in knobs:
            if not values:
                why = "; ".join(f"{v}: {r}" for v, r in self.pruned_values.get(name, {}).items())
                raise InfeasibleConfigError(f"no valid value for {name} ({why or 'empty choice list'})")
        return tuple(Knob(name, tuple(sorted(dict.fromkeys(values), key=_order))) for name, values in knobs)

    def _pp(self, m: ModelSpec | None) -> list[Any]:
        """Pipeline sizes that split the layers (with `account_for_embedding_and_loss`, also those
        that split layers + 2 + MTP, `planner.dimensions.uneven_split`)."""
        c, s = self.config, self.config.space
        if m is None:
            return self._keep("pp", s.pp or [1, 2, 4, 8, 16], lambda p: None)
        counts = [m.num_layers]
        if s.account_for_embedding_and_loss:
            counts.append(m.num_layers + 2 + m.mtp_num_layers)
        default = sorted({d for n in counts for d in divisors(n, c.max_gpus)})
        return self._keep("pp", s.pp or default, lambda p: None if any(n % p == 0 for n in counts)
                          else f"does not divide the {m.num_layers} layers")

    def _keep(self, name: str, values: Any, why: Any) -> list[Any]:
        kept = []
        for value in values:
            reason = why(value)
            if reason:
                self.pruned_values.setdefault(name, {})[str(value)] = reason
            else:
                kept.append(value)
        return kept

    @property
    def searched(self) -> tuple[Knob, ...]:
        """Knobs with more than one choice: the Optuna parameters."""
        return tuple(k for k in self.knobs if len(k.choices) > 1)

    @property
    def fixed(self) -> dict[str, Choice]:
        return {k.name: k.choices[0] for k in self.knobs if len(k.choices) == 1}

    @cached_property
    def size(self) -> int:
        return math.prod(len(k.choices) for k in self.knobs)

    # -- candidates ---------------------------------------------------------------------------
    def complete(self, params: dict[str, Any]) -> dict[str, Choice]:
        """Searched params plus the fixed knobs, in knob order."""
        merged = {**self.fixed, **params}
        return {k.name: merged[k.name] for k in self.knobs}

    def build(self, params: dict[str, Any], distinct: bool = True) -> Candidate:
        """The candidate job of `params` (searched knobs; fixed ones are added), with its reasons.
        `distinct`: a plan whose precision entry runs as an earlier one does on its GPU
        (`precision_twin`) is not one of the space's plans (a baseline given that way is)."""
        p = self.complete(params)
        model, model_problem = self._model(p)
        if model is None:
            return Candidate(p, None, (model_problem,))
        job = self.job(p, model)
        c = self.config
        tp, cp, pp = job.parallel.tp, job.parallel.cp, job.parallel.pp
        ranks = tp * cp * pp
        names, sizes = ("tp*pp", f"{tp}*{pp}") if "cp" not in p else ("tp*cp*pp", f"{tp}*{cp}*{pp}")
        if "num_gpus" in p and int(p["num_gpus"]) % ranks:
            return Candidate(p, None, (f"{names} = {sizes} = {ranks} does not divide num_gpus="
                                       f"{p['num_gpus']}; no integer data-parallel size",))
        problems = job_problems(job)
        twin = self.precision_twin(p.get("precision"), job) if distinct else None
        if twin is not None:
            problems.append(f"precision={p['precision']} runs on {job.hardware.name} exactly as "
                            f"precision={twin} does (the same format): the space holds these plans "
                            f"once, as {twin}")
        if distinct and tp == 1 and bool(p.get("sequence_parallel", False)) and self.sequence_parallel_both:
            problems.append(SP_TWIN)
        gpus = job.cluster.num_gpus
        if gpus > c.max_gpus:
            problems.append(f"{names}*dp = {sizes}*{job.dp} = {gpus} GPUs exceeds max_gpus={c.max_gpus}")
        if c.space.use_all_gpus and gpus != c.max_gpus:
            problems.append(f"{names} = {ranks} does not divide the {c.max_gpus} GPUs")
        if problems:
            return Candidate(p, job, tuple(problems))
        static = static_memory_bytes(job)
        capacity = job.hardware.memory_bytes
        memory = () if static <= capacity else (
            f"weights, gradients and optimizer states alone need {static / GiB:.1f} GiB per GPU "
            f"> {capacity / GiB:.0f} GiB",)
        return Candidate(p, job, (), memory)

    def precision_twin(self, choice: Choice | None, job: Job) -> str | None:
        """`planner.dimensions.precision_twin` on `job`'s GPU, once per (GPU type, precision
        entry): it reads nothing else (`build`, the table's precision grid and the notes ask)."""
        key = (job.hardware.name, str(choice))
        if key not in self._twins:
            self._twins[key] = precision_twin(self.config, choice, job)
        return self._twins[key]

    def job(self, p: dict[str, Choice], model: ModelSpec) -> Job:
        """The job of complete params `p` (unchecked; with `num_gpus` not a multiple of
        tp*cp*pp, dp is rounded down: `build` refuses such a plan first)."""
        c = self.config
        tp, pp, cp = int(p["tp"]), int(p["pp"]), int(p.get("cp", 1))
        if "num_gpus" in p:
            dp = max(1, int(p["num_gpus"]) // (tp * cp * pp))
        else:
            dp = int(p["dp"]) if "dp" in p else max(1, c.max_gpus // (tp * cp * pp))
        schedule, virtual = parse_pipeline(str(p["pipeline"]))
        recompute, modules = parse_recompute(str(p["recompute"]))
        name = str(p.get("hardware", next(iter(self.entries))))
        entry, hardware = self.entries[name], self.hardware_specs[name]
        low = precision_choice(c, p.get("precision"))
        split = uneven_split(model, pp, virtual) if c.space.account_for_embedding_and_loss else None
        sharding = p.get("data_parallel_sharding")
        shard = DataParallelSharding(str(sharding)) if sharding is not None else None
        optimizer = (shard.level >= DataParallelSharding.OPTIM.level if shard is not None
                     else bool(p["distributed_optimizer"]))
        dispatcher = TrainingSpec.model_fields["moe_token_dispatcher"].default.value
        return Job(
            model=model,
            training=TrainingSpec(global_batch_size=c.global_batch,
                                  micro_batch_size=int(p["micro_batch_size"]),
                                  precision=low.precision, recompute=recompute,
                                  recompute_modules=modules,
                                  flash_attention=bool(p["flash_attention"]),
                                  train_tokens=self.train_tokens(model), fp8_recipe=low.fp8_recipe,
                                  fp4_recipe=low.fp4_recipe,
                                  cuda_graphs=CudaGraphs(str(p.get("cuda_graphs", CudaGraphs.NONE.value))),
                                  moe_token_dispatcher=TokenDispatcher(str(p.get(
                                      "moe_token_dispatcher", dispatcher))),
                                  moe_overlap_ep_comm=bool(p.get("moe_overlap_ep_comm", False)),
                                  grad_reduce_in_fp32=(bool(p["grad_reduce_in_fp32"])
                                                       if "grad_reduce_in_fp32" in p else None),
                                  exp_avg_dtype=StateDtype(str(p.get("exp_avg_dtype", "fp32"))),
                                  exp_avg_sq_dtype=StateDtype(str(p.get("exp_avg_sq_dtype", "fp32")))),
            parallel=ParallelPlan(tp=tp, pp=pp, dp=dp, cp=cp, virtual_stages=virtual, schedule=schedule,
                                  cp_comm_type=CpCommType(str(p.get("cp_comm_type", CpCommType.P2P.value))),
                                  ep=int(p.get("ep", 1)),
                                  expert_tp=int(p["expert_tp"]) if "expert_tp" in p else None,
                                  sequence_parallel=bool(p["sequence_parallel"]),
                                  distributed_optimizer=optimizer, data_parallel_sharding=shard,
                                  overlap_grad_reduce=bool(p["overlap_grad_reduce"]),
                                  tp_comm_overlap=bool(p.get("tp_comm_overlap", False)),
                                  overlap_param_gather=bool(p.get("overlap_param_gather", False)),
                                  first_stage_layers=split[0] if split else None,
                                  last_stage_layers=split[1] if split else None),
            cluster=ClusterSpec(gpu=entry.name, num_gpus=tp * cp * pp * dp, gpus_per_node=c.gpus_per_node,
                                inter_node_bandwidth_Gbps=c.inter_node_bandwidth_Gbps,
                                price_per_gpu_hour_usd=entry.price_per_gpu_hour_usd,
                                nvlink_domain=entry.nvlink_domain),
            hardware=hardware,
        )

    def train_tokens(self, model: ModelSpec) -> float | None:
        c = self.config
        if c.tokens_per_parameter:
            return c.tokens_per_parameter * total_params(model)
        return c.train_tokens

    def _model(self, p: dict[str, Choice]) -> tuple[ModelSpec | None, str]:
        if self.base_model is not None:
            return self.base_model, ""
        layers, hidden, head_dim = int(p["num_layers"]), int(p["hidden_size"]), int(p["head_dim"])
        if hidden % head_dim:
            return None, f"hidden_size={hidden} is not a multiple of head_dim={head_dim}"
        key = (layers, hidden, head_dim)
        if key not in self._models:
            arch = self.config.architecture
            assert arch is not None
            self._models[key] = ModelSpec(
                name=f"gpt-{layers}l-{hidden}h", num_layers=layers, hidden_size=hidden,
                num_attention_heads=hidden // head_dim, vocab_size=arch.vocab_size,
                seq_length=self.config.seq or 2048)
        return self._models[key], ""

    def neighbours(self, candidate: Candidate, reach: int = 2) -> list[Candidate]:
        """Candidates one move away: any other value of one searched knob, or up to `reach`
        steps along two ordered knobs at once (e.g. fewer layers and a wider hidden size, a move
        along a curve of equal parameters that one-knob moves cannot make without a detour)."""
        p = candidate.params
        out = []
        for knob in self.searched:
            for value in knob.choices:
                if value != p[knob.name]:
                    out.append(self.build({**p, knob.name: value}))
        ordered = [k for k in self.searched if k.step is not None]
        steps = [d for d in range(-reach, reach + 1) if d]
        for a, b in itertools.combinations(ordered, 2):
            ia, ib = a.choices.index(p[a.name]), b.choices.index(p[b.name])
            for da, db in itertools.product(steps, steps):
                if 0 <= ia + da < len(a.choices) and 0 <= ib + db < len(b.choices):
                    out.append(self.build({**p, a.name: a.choices[ia + da], b.name: b.choices[ib + db]}))
        return out

    def enumerate(self) -> Iterator[dict[str, Choice]]:
        """Every combination of choices, in a fixed order."""
        names = [k.name for k in self.knobs]
        for values in itertools.product(*(k.choices for k in self.knobs)):
            yield dict(zip(names, values, strict=True))

    def sample(self, n: int, seed: int, feasible_only: bool = True,
               exclude: set[str] | None = None, max_draws: int = 200_000) -> list[Candidate]:
        """Up to `n` distinct random candidates (uniform over the choice lists, rejection of
        infeasible ones). Deterministic for a seed."""
        rng = np.random.default_rng(seed)
        seen = set(exclude or ())
        out: list[Candidate] = []
        for _ in range(max_draws):
            if len(out) >= n:
                break
            params = {k.name: k.choices[int(rng.integers(len(k.choices)))] for k in self.knobs}
            key = params_key(params)
            if key in seen:
                continue
            seen.add(key)
            candidate = self.build(params)
            if candidate.feasible or (not feasible_only and candidate.valid):
                out.append(candidate)
        return out


def _order(value: Choice) -> tuple[int, float, str]:
    """Numbers ascending (so progressions are recognized), then everything else as given."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, "")


def _fixed_model(config: SearchConfig) -> ModelSpec | None:
    spec = config.model
    seq = {"seq_length": config.seq} if config.seq else {}
    if spec is None:
        return None
    if isinstance(spec, str):
        return load_model(spec, seq or None)
    if "preset" in spec:
        rest = {k: v for k, v in spec.items() if k != "preset"}
        return load_model(str(spec["preset"]), {**rest, **seq})
    return parse(ModelSpec, {**spec, **seq}, "model")


__all__ = ["Candidate", "Knob", "SearchSpace", "field", "params_key", "static_memory_bytes"]
