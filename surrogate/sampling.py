"""Unit-cube points -> valid job records, constructively: GPUs first, then valid divisors.

Each point of a quasi-random design (scipy.stats.qmc) picks, in order: hardware, the model
(a preset, or a generated dense model from a parameter count and an aspect ratio), the sequence
length and GPU count, then a tensor-parallel size among the divisors of heads/groups/FFN, a
schedule, a pipeline size among the powers of two that divide the remaining GPUs (generated
models round their layer count to a multiple of pp x virtual stages), the micro-batch and the
number of micro-batches within the global-batch token range. What is left to reject is counted
with its reason. Drawing continues in fixed-size batches until `n` jobs are accepted, so the first
`n` records of a larger draw equal a smaller draw (resume and prefix stability).
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import qmc

from simulator.errors import ConfigError
from simulator.job.catalog import load_model
from simulator.job.enums import DataParallelSharding, Schedule, StateDtype
from simulator.job.specs import HardwareSpec
from surrogate.features import record_to_job
from surrogate.records import NEW_DEFAULTS, NONE, model_columns
from surrogate.space import Family, Method, Space

AXES = ("hardware", "preset", "family", "parameters", "aspect", "head_dim", "gqa", "vocab", "seq",
        "num_gpus", "tp", "schedule", "virtual", "pp", "micro_batch", "microbatches", "precision",
        "recompute", "flash", "sp", "dist_opt", "overlap", "inter_bw")
# Drawn from a second design (seed + 1), so that a space without these dimensions draws the
# same jobs as before they existed.
NEW_AXES = ("cp", "cp_comm", "ep", "expert_tp", "fp8_recipe", "sharding", "cuda_graphs",
            "tp_overlap", "dispatcher")
# Added later still, from a third design (seed + 2): the draws above stay as they were.
LATER_AXES = ("ep_overlap", "grad_reduce", "exp_avg", "exp_avg_sq")
# And from a fourth (seed + 3), for the same reason.
LATEST_AXES = ("param_gather",)
BATCH = 4096


class Rejected(Exception):
    """A point that maps to no valid job; the message is the reason (counted, never raised out)."""


@dataclass(frozen=True)
class Draw:
    records: list[dict[str, Any]]
    drawn: int
    rejections: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {"accepted": len(self.records), "drawn": self.drawn,
                "rejected": self.drawn - len(self.records), "reasons": dict(self.rejections)}


def _pick(u: float, options: Sequence[Any]) -> Any:
    return options[min(int(u * len(options)), len(options) - 1)]


def _log_uniform(u: float, lo: float, hi: float) -> float:
    return math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))


def _powers_of_two(lo: float, hi: float) -> list[int]:
    return [2**k for k in range(0, 31) if lo <= 2**k <= hi]


def _model(u: dict[str, float], space: Space) -> tuple[dict[str, Any], bool]:
    """Model dims and whether the layer count is fixed (a preset) or may be rounded."""
    axes = space.models
    if axes.presets and u["preset"] < axes.preset_fraction:
        m = load_model(_pick(u["family"], axes.presets))
        return {"num_layers": m.num_layers, "hidden_size": m.hidden_size,
                "num_attention_heads": m.num_attention_heads, "num_query_groups": m.query_groups,
                "ffn_hidden_size": m.ffn, "gated_mlp": m.gated_mlp, "vocab_size": m.vocab_size,
                **model_columns(m)}, True
    family = _pick(u["family"], axes.families)
    params = _log_uniform(u["parameters"], axes.parameters.min, axes.parameters.max)
    ratio = _log_uniform(u["aspect"], axes.aspect_ratio.min, axes.aspect_ratio.max)
    head_dim = _pick(u["head_dim"], axes.head_dim)
    unit = head_dim * 8  # heads a multiple of 8 so that every tp up to 8 divides them
    layers = (params / (12 * ratio**2)) ** (1 / 3)  # 12 L h^2 parameters with h = ratio * L
    hidden = max(unit, round(ratio * layers / unit) * unit)
    layers = max(1, round(params / (12 * hidden**2)))
    heads = hidden // head_dim
    llama = family is Family.LLAMA
    groups = heads
    if llama and u["gqa"] < axes.gqa_fraction:
        fits = [g for g in axes.gqa_groups if heads % g == 0]
        groups = _pick(u["gqa"] / max(axes.gqa_fraction, 1e-12), fits) if fits else heads
    ffn = round(8 * hidden / 3 / 256) * 256 if llama else 4 * hidden
    vocab = _pick(u["vocab"], axes.vocab_size.get(family, (51200,)))
    return {"num_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "num_query_groups": groups, "ffn_hidden_size": ffn, "gated_mlp": llama,
            "vocab_size": vocab}, False


def _layout(u: dict[str, float], space: Space, model: dict[str, Any], fixed_layers: bool,
            seq: int, gpus: int, gpn: int) -> dict[str, Any]:
    """tp, schedule, virtual stages, pp, micro-batch and global batch; raises `Rejected`."""
    tps = [t for t in space.tp if t <= min(gpn, gpus) and gpus % t == 0
           and model["num_attention_heads"] % t == 0 and model["num_query_groups"] % t == 0
           and model["ffn_hidden_size"] % t == 0]
    if not tps:
        raise Rejected("no tensor-parallel size in the space divides heads, groups and ffn")
    tp = _pick(u["tp"], tps)
    cps = [c for c in space.cp if (gpus // tp) % c == 0 and seq % (2 * c) == 0]
    if not cps:
        raise Rejected("no context-parallel size in the space divides the GPUs and the sequence")
    cp = _pick(u["cp"], cps)
    gpus //= cp  # the rest of the layout is that of the cp-fold smaller job
    schedule = _pick(u["schedule"], space.schedule)
    interleaved = schedule is Schedule.INTERLEAVED_1F1B
    v = _pick(u["virtual"], space.virtual_stages) if interleaved else 1
    max_seqs = math.floor(space.global_batch_tokens.max / seq)
    min_seqs = math.ceil(space.global_batch_tokens.min / seq)
    layers = model["num_layers"]
    pps = [p for p in _powers_of_two(2 if interleaved else 1, space.pp_max)
           if (gpus // tp) % p == 0 and p * v <= layers
           and (not fixed_layers or layers % (p * v) == 0
                or (space.uneven_pipeline and v == 1 and layers // p >= 1))
           and gpus // (tp * p) * min(space.micro_batch_size) * (p if interleaved else 1) <= max_seqs]
    if not pps:
        raise Rejected(f"no pipeline size fits {schedule.value} (layers, GPUs, global batch range)")
    pp = _pick(u["pp"], pps)
    # a preset whose layers do not split evenly: Megatron's --decoder-first-pipeline-num-layers
    # takes the remainder (DeepSeek-V3's 61 layers on pp 4: 16, 15, 15, 15)
    first = layers - (pp - 1) * (layers // pp) if fixed_layers and layers % (pp * v) else 0
    if not fixed_layers:
        model["num_layers"] = max(1, round(layers / (pp * v))) * pp * v
    dp = gpus // (tp * pp)
    step = pp if interleaved else 1
    mbs_options = [b for b in space.micro_batch_size if dp * b * step <= max_seqs]
    mbs = _pick(u["micro_batch"], mbs_options)
    lo = max(space.num_microbatches.min, math.ceil(min_seqs / (dp * mbs)))
    hi = min(space.num_microbatches.max, math.floor(max_seqs / (dp * mbs)))
    lo, hi = math.ceil(lo / step) * step, math.floor(hi / step) * step
    if lo > hi:
        raise Rejected("num_microbatches range cannot meet the global batch range at this dp")
    m = min(hi, max(lo, round(_log_uniform(u["microbatches"], lo, hi) / step) * step))
    return {"global_batch_size": dp * mbs * m, "micro_batch_size": mbs, "tp": tp, "pp": pp, "dp": dp,
            "virtual_stages": v, "schedule": schedule.value, "cp": cp, "first_stage_layers": first}


def point_to_record(u: dict[str, float], space: Space,
                    hardware: Mapping[str, HardwareSpec]) -> dict[str, Any]:
    """One record from one unit-cube point; raises `Rejected` with a reason."""
    spec = hardware[_pick(u["hardware"], list(hardware))]
    model, fixed = _model(u, space)
    seq = _pick(u["seq"], space.seq_length)
    gpus = _pick(u["num_gpus"], _powers_of_two(space.num_gpus.min, space.num_gpus.max) or [0])
    if not gpus:
        raise Rejected("num_gpus range holds no power of two")
    layout = _layout(u, space, model, fixed, seq, gpus, spec.gpus_per_node)
    precisions = [p for p in space.precision if p in spec.peak_tflops] or list(space.precision)
    flash = _pick(u["flash"], space.flash_attention) and spec.supports_flash_attention
    inter = (_pick(u["inter_bw"], space.inter_node_bandwidth_Gbps) if space.inter_node_bandwidth_Gbps
             else spec.inter_node_bandwidth_Gbps)
    precision = _pick(u["precision"], precisions).value
    record = {**model, "seq_length": seq,
            "global_batch_size": layout.pop("global_batch_size"),
            "micro_batch_size": layout.pop("micro_batch_size"),
            "precision": precision,
            "recompute": _pick(u["recompute"], space.recompute).value,
            "flash_attention": bool(flash), "num_gpus": gpus, **layout,
            "sequence_parallel": bool(_pick(u["sp"], space.sequence_parallel)) and layout["tp"] > 1,
            "distributed_optimizer": bool(_pick(u["dist_opt"], space.distributed_optimizer)),
            "overlap_grad_reduce": bool(_pick(u["overlap"], space.overlap_grad_reduce)),
            "gpu": spec.name, "gpus_per_node": spec.gpus_per_node,
            "intra_node_bandwidth_GBps": float(spec.nvlink_bandwidth_GBps),
            "inter_node_bandwidth_Gbps": float(inter),
            **_new_dimensions(u, space, model, layout, spec)}
    return _finish(record, u, space, spec)


def _new_dimensions(u: dict[str, float], space: Space, model: dict[str, Any],
                    layout: dict[str, Any], spec: HardwareSpec) -> dict[str, Any]:
    """The `surrogate.records` columns of a point (`layout` holds tp, cp, dp): MoE models get
    an ep and expert tp that divide the experts and the stage's ranks and a dispatcher (flex
    needs expert tp 1), dense ones CUDA graphs (Megatron refuses them with dropless MoE) and the
    FSDP strategies (not modelled with MoE; with cp they shard over dp x cp); cp gets an
    exchange its heads allow."""
    tp, cp, dp = layout["tp"], layout["cp"], layout["dp"]
    experts = int(model.get("num_experts", 0))
    out = {**{k: v for k, v in NEW_DEFAULTS.items() if k not in model and k not in layout},
           "expert_tp": tp}
    if experts:
        ffn = int(model["moe_ffn_hidden_size"])
        etp = _pick(u["expert_tp"], [e for e in space.expert_tp if ffn % e == 0] or [tp])
        eps = [e for e in space.ep if experts % e == 0 and (tp * cp * dp) % (etp * e) == 0]
        if not eps:
            raise Rejected("no expert-parallel size in the space divides the experts and the ranks")
        dispatchers = [d.value for d in space.moe_token_dispatcher if etp == 1 or d.value != "flex"]
        out.update(ep=_pick(u["ep"], eps), expert_tp=etp,
                   moe_token_dispatcher=_pick(u["dispatcher"], dispatchers or ["alltoall"]))
    else:
        out.update(ep=1, cuda_graphs=_pick(u["cuda_graphs"], space.cuda_graphs).value)
    if cp > 1:
        heads, groups = model["num_attention_heads"] // tp, model["num_query_groups"] // tp
        exchanges = [c.value for c in space.cp_comm_type
                     if c.value != "a2a" or (heads % cp == 0 and groups % cp == 0)]
        out["cp_comm_type"] = _pick(u["cp_comm"], exchanges or ["p2p"])
    shardings = [s.value for s in space.data_parallel_sharding
                 if s.level <= 1 or not experts]
    if shardings:
        out["data_parallel_sharding"] = _pick(u["sharding"], shardings)
    out["tp_comm_overlap"] = bool(_pick(u["tp_overlap"], space.tp_comm_overlap))
    return out


def _reason(message: str) -> str:
    """Group rejection messages that differ only in numbers."""
    return re.sub(r"(?<![\w.])\d+(\.\d+)?(?![\w.])", "#", message)[:160]


def _design(method: Method, seed: int, d: int = len(AXES)) -> Any:
    if method is Method.SOBOL:
        return qmc.Sobol(d, scramble=True, seed=seed)
    if method is Method.LHS:
        return qmc.LatinHypercube(d, seed=seed)
    return np.random.default_rng(seed)


def _points(engine: Any, d: int = len(AXES)) -> np.ndarray:
    if isinstance(engine, np.random.Generator):
        return engine.random((BATCH, d))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Sobol balance warning for non-power-of-two batches
        return np.asarray(engine.random(BATCH))


def draw(space: Space, hardware: Mapping[str, HardwareSpec], n: int, seed: int = 0,
         method: Method = Method.SOBOL, max_draws: int | None = None) -> Draw:
    """The first `n` valid records of the design, with rejection counts by reason."""
    engine = _design(method, seed)
    engine_new = _design(method, seed + 1, len(NEW_AXES))
    engine_later = _design(method, seed + 2, len(LATER_AXES))
    engine_latest = _design(method, seed + 3, len(LATEST_AXES))
    records: list[dict[str, Any]] = []
    reasons: Counter[str] = Counter()
    drawn = 0
    limit = max_draws or max(20 * n, BATCH)
    while len(records) < n:
        if drawn >= limit:
            raise ConfigError(f"space rejects almost every sample ({drawn} drawn, {len(records)} "
                              f"valid; top reasons: {dict(reasons.most_common(3))}); widen its ranges")
        for row, row_new, row_later, row_latest in zip(
                _points(engine), _points(engine_new, len(NEW_AXES)),
                _points(engine_later, len(LATER_AXES)), _points(engine_latest, len(LATEST_AXES)),
                strict=True):
            drawn += 1
            u = {**dict(zip(AXES, row.tolist(), strict=True)),
                 **dict(zip(NEW_AXES, row_new.tolist(), strict=True)),
                 **dict(zip(LATER_AXES, row_later.tolist(), strict=True)),
                 **dict(zip(LATEST_AXES, row_latest.tolist(), strict=True))}
            try:
                record = point_to_record(u, space, hardware)
                record_to_job(record, hardware)
            except (Rejected, ConfigError) as exc:
                reasons[_reason(str(exc))] += 1
                continue
            records.append(record)
            if len(records) == n:
                break
    return Draw(records, drawn, dict(reasons.most_common()))


def _recipes(space: Space, spec: HardwareSpec) -> list[str]:
    """The space's fp8 recipes that the GPU runs (a format for its architecture and a measured
    GEMM efficiency, simulator.job.precision), else the GPU's default recipe."""
    from simulator.job.precision import DEFAULT_FP8, FORMATS

    arch = spec.architecture
    if arch is None:
        return ["delayed"]  # validation names the missing architecture
    measured = spec.efficiency.low_precision_gemm_efficiency
    ok = [r.value for r in space.fp8_recipe
          if (r.value, arch) in FORMATS and FORMATS[(r.value, arch)].gemm_kernel in measured]
    return ok or [DEFAULT_FP8[arch].value if arch in DEFAULT_FP8 else "delayed"]


def _finish(record: dict[str, Any], u: dict[str, float], space: Space,
            spec: HardwareSpec) -> dict[str, Any]:
    """The columns that depend on others: the recipe of a low precision, tp comm overlap only
    with sequence parallelism, the resolved NVLink domain (`Job.nvlink_domain`)."""
    precision = record["precision"]
    record["fp8_recipe"] = _pick(u["fp8_recipe"], _recipes(space, spec)) if precision == "fp8" else NONE
    record["fp4_recipe"] = "nvfp4" if precision == "fp4" else NONE
    if record["num_experts"] and record["tp"] > 1 and record["ep"] > 1:
        record["sequence_parallel"] = True  # Megatron-Core asserts it for MoE with tp and ep
    record["tp_comm_overlap"] = bool(record["tp_comm_overlap"] and record["sequence_parallel"])
    # the combined-1F1B overlap where Megatron allows it (simulator.job.moe_cp_rules)
    overlap = bool(_pick(u.get("ep_overlap", 0.0), space.moe_overlap_ep_comm))
    record["moe_overlap_ep_comm"] = bool(
        overlap and record["ep"] > 1 and record["moe_token_dispatcher"] != "allgather"
        and record["recompute"] != "full" and (record["pp"] == 1 or record["schedule"] == "interleaved_1f1b"))
    grad = _pick(u.get("grad_reduce", 0.0), space.grad_reduce_in_fp32)
    record["grad_reduce_in_fp32"] = NONE if grad is None else str(grad).lower()
    sharding = record["data_parallel_sharding"]
    sharded = (record["distributed_optimizer"] if sharding == NONE
               else DataParallelSharding(sharding).level >= DataParallelSharding.OPTIM.level)
    for column, axis in (("exp_avg_dtype", "exp_avg"), ("exp_avg_sq_dtype", "exp_avg_sq")):
        record[column] = (_pick(u.get(axis, 0.0), getattr(space, column)).value if sharded
                          else StateDtype.FP32.value)
    if record["data_parallel_sharding"] != NONE:
        record["distributed_optimizer"] = False  # the sharding says it (optim is ZeRO-1)
    # the parameter gather under the next forward needs what Megatron asserts for it
    # (simulator.job.validation): a sharded optimizer (ZeRO-1 and above) and overlapped reduction
    gather = bool(_pick(u.get("param_gather", 0.0), space.overlap_param_gather))
    record["overlap_param_gather"] = bool(gather and sharded and record["overlap_grad_reduce"])
    domain = spec.nvlink_domain or spec.gpus_per_node
    record["nvlink_domain"] = min(domain, record["num_gpus"])
    return record
