"""Closed-form physics of a table of jobs, vectorized over rows (numpy, no Python loop per row).

The same formulas as the exact simulator, collapsed to what a row's fields determine without
building a graph: parameter counts (simulator.params), FLOPs (Narayanan et al. 2021, as in
simulator.metrics), per-stage memory with saved activations per micro-batch from Korthikanti et al.
2022 (as simulator.graph) times the micro-batches a schedule keeps in flight, and a roofline
estimate of the iteration (simulator.costs / network / tail, see `surrogate.timing`). The model
learns only the residual log(simulated / estimated), which is why it generalizes to model
shapes it never saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from simulator.memory import WORKSPACE_BYTES
from simulator.specs import GiB, HardwareSpec
from surrogate.columns import factorize

# simulator.framework, megatron-lm (the records' framework): fp32 master weights and Adam
# moments sharded by the distributed optimizer, plus fp32 main-gradient copies with fp16
OPTIMIZER_BYTES_PER_PARAM = 12.0
SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")
RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("fp16", "bf16")


def _f(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


Vec = Any  # an np.ndarray of rows, or one float on the single-job path (surrogate.scalar)


@dataclass(frozen=True)
class Rows:
    """The job fields of n rows as float arrays (booleans as 0/1), plus each row's hardware."""

    L: Vec
    h: Vec
    a: Vec
    g: Vec
    f: Vec
    gated: Vec
    V: Vec
    s: Vec
    B: Vec
    b: Vec
    bf16: Vec
    recompute: Vec  # index into RECOMPUTE
    flash: Vec
    N: Vec
    t: Vec
    p: Vec
    d: Vec
    v: Vec
    schedule: Vec  # index into SCHEDULES
    sp: Vec  # effective: sequence parallel with tp > 1
    dopt: Vec
    overlap: Vec
    gpn: Vec  # GPUs of a node that a group can use: min(gpus_per_node, num_gpus)
    intra_Bps: Vec
    inter_Bps: Vec
    hw: dict[str, Vec]
    xp: Any = np  # numpy for tables, surrogate.scalar.SCALAR for one job of Python floats

    @property
    def m(self) -> np.ndarray:
        return self.B / (self.d * self.b)

    @cached_property
    def peak(self) -> Vec:
        """Peak FLOP/s of each row's precision (computed once: every kernel's roofline uses it)."""
        return self.xp.where(self.bf16 > 0, self.hw["peak_bf16"], self.hw["peak_fp16"])


def _codes(values: Any, choices: tuple[str, ...]) -> np.ndarray:
    """Index of each row's value in `choices` (0 for a value not among them)."""
    return factorize(values).lookup(lambda u: float(choices.index(u)) if u in choices else 0.0)


HW_FIELDS = ("peak_fp16", "peak_bf16", "hbm_Bps", "memory_bytes", "num_sms", "gemm_max", "k_half",
             "launch_s", "host_s", "intra_eff", "inter_eff", "intra_lat_s", "inter_lat_s",
             "p2p_eff", "reserved_bytes", "coll_s", "mb_s")


def hardware_vector(spec: HardwareSpec) -> dict[str, float]:
    e = spec.efficiency
    peak = {p.value: v * 1e12 for p, v in spec.peak_tflops.items()}
    return {"peak_fp16": peak.get("fp16", peak.get("bf16", 0.0)),
            "peak_bf16": peak.get("bf16", peak.get("fp16", 0.0)),
            "hbm_Bps": spec.hbm_bandwidth_GBps * 1e9 * e.memory_efficiency,
            "memory_bytes": spec.memory_bytes, "num_sms": float(spec.num_sms),
            "gemm_max": e.gemm_max_efficiency, "k_half": e.gemm_k_half,
            "launch_s": e.kernel_launch_s, "host_s": e.host_overhead_s,
            "intra_eff": e.intra_bus_efficiency, "inter_eff": e.inter_bus_efficiency,
            "intra_lat_s": e.intra_latency_s, "inter_lat_s": e.inter_latency_s,
            "p2p_eff": e.p2p_efficiency, "reserved_bytes": spec.reserved_memory_GiB * GiB,
            # framework overheads (newer simulator versions; zero where a spec lacks them)
            "coll_s": getattr(e, "collective_overhead_s", 0.0),
            "mb_s": getattr(e, "microbatch_overhead_s", 0.0)}


def _hardware_arrays(gpu: Any, hardware: Mapping[str, HardwareSpec] | None) -> dict[str, np.ndarray]:
    from surrogate.features import catalog_hardware

    names = factorize(gpu)
    vectors = {str(n): hardware_vector(hardware[str(n)] if hardware and str(n) in hardware
                                       else catalog_hardware(str(n))) for n in names.uniques}
    if len(vectors) == 1:
        vec = next(iter(vectors.values()))
        return {k: np.full(len(names), vec[k]) for k in HW_FIELDS}
    per_row = {k: np.array([vectors[str(n)][k] for n in names.uniques]) for k in HW_FIELDS}
    return {k: values[names.codes] for k, values in per_row.items()}


def rows_from_columns(c: Mapping[str, Any], hardware: Mapping[str, HardwareSpec] | None) -> Rows:
    t = _f(c["tp"])
    return Rows(
        L=_f(c["num_layers"]), h=_f(c["hidden_size"]), a=_f(c["num_attention_heads"]),
        g=_f(c["num_query_groups"]), f=_f(c["ffn_hidden_size"]), gated=_f(c["gated_mlp"]),
        V=_f(c["vocab_size"]), s=_f(c["seq_length"]), B=_f(c["global_batch_size"]),
        b=_f(c["micro_batch_size"]), bf16=_codes(c["precision"], ("fp16", "bf16")),
        recompute=_codes(c["recompute"], RECOMPUTE), flash=_f(c["flash_attention"]),
        N=_f(c["num_gpus"]), t=t, p=_f(c["pp"]), d=_f(c["dp"]), v=_f(c["virtual_stages"]),
        schedule=_codes(c["schedule"], SCHEDULES),
        sp=_f(c["sequence_parallel"]) * (t > 1), dopt=_f(c["distributed_optimizer"]),
        overlap=_f(c["overlap_grad_reduce"]),
        gpn=np.minimum(_f(c["gpus_per_node"]), _f(c["num_gpus"])),
        intra_Bps=_f(c["intra_node_bandwidth_GBps"]) * 1e9,
        inter_Bps=_f(c["inter_node_bandwidth_Gbps"]) * 1e9 / 8,
        hw=_hardware_arrays(c["gpu"], hardware),
    )


def stage_params(r: Rows) -> dict[str, np.ndarray]:
    """Parameters per GPU of the first and last pipeline stage, and of the whole model."""
    hd = r.h / r.a
    bias, untied = 1 - r.gated, r.gated
    norm = r.h * (2 - r.gated)  # LayerNorm has a bias, RMSNorm not
    qkv_out = r.h + 2 * r.g * hd
    up_out = r.f * (1 + r.gated)
    weights = r.h * qkv_out + r.h * r.h + r.h * up_out + r.f * r.h
    sharded = weights + bias * (qkv_out + up_out)
    replicated = bias * 2 * r.h + 2 * norm
    vocab_p = r.xp.ceil(r.V / (128 * r.t)) * 128 * r.t
    pos = bias * r.s * r.h  # learned positions (GPT family)
    layers = r.L / r.p * (sharded / r.t + replicated)
    one = r.p == 1  # the single stage holds both the embedding and the head
    embedding = vocab_p * r.h / r.t + pos  # positions and the final norm are replicated over tp
    head = norm + untied * vocab_p * r.h / r.t
    first = layers + embedding + one * head
    last = layers + head + one * embedding + (r.p > 1) * (1 - untied) * vocab_p * r.h / r.t
    total = r.L * (sharded + replicated) + r.V * r.h * (1 + untied) + pos + norm
    return {"first": first, "last": last, "total": total, "vocab_p": vocab_p}


def layer_flops_per_token(r: Rows) -> np.ndarray:
    hd = r.h / r.a
    return 2.0 * (r.h * (r.h + 2 * r.g * hd) + r.h * r.h + r.h * r.f * (1 + r.gated) + r.f * r.h
                  + 2 * r.s * r.h)


def flops(r: Rows) -> dict[str, np.ndarray]:
    """Model and hardware FLOPs per iteration (simulator.metrics, vectorized)."""
    lf = layer_flops_per_token(r)
    tokens = r.B * r.s
    model = 3.0 * tokens * (r.L * lf + 2.0 * r.h * r.V)
    selective = 4.0 * r.s * r.h  # flash attention is checkpointed and re-run too
    extra = r.xp.select([r.recompute == 1, r.recompute == 2], [selective, lf], 0.0)
    return {"model": model, "hardware": model + tokens * r.L * extra}


def fused_softmax(r: Rows) -> np.ndarray:
    """1 where Megatron's fused softmax kernel runs (simulator.graph.fused_softmax_available)."""
    heads = r.a / r.t
    shape_ok = (r.s > 16) & (r.s <= 4096) & (r.s % 4 == 0)
    per_block = r.xp.where(r.s > 128, 4.0, 8.0)
    return r.xp.where(shape_ok & ((r.b * heads) % per_block == 0), 1.0, 0.0)


def layer_activations(r: Rows) -> dict[str, np.ndarray]:
    """Saved and transient bytes of one layer for one micro-batch (Korthikanti et al. 2022, as
    simulator.graph): dropout only in the GPT family (Llama trains without), K and V expanded to
    every head before the unfused attention's bmms (GQA), selective recompute keeping the core
    attention's Q, K, V inputs, flash attention included."""
    T, hd = r.b * r.s, r.h / r.a
    heads, groups = r.a / r.t, r.g / r.t
    drop = 1 - r.gated  # the family convention of surrogate.features
    sp_tokens = r.xp.where(r.sp > 0, T / r.t, T)
    shard = r.xp.where(r.sp > 0, 1 / r.t, 1.0)
    scores = r.b * heads * r.s * r.s
    fused = fused_softmax(r) > 0
    qkv = 2 * T * hd * (heads + 2 * groups)  # the core's inputs
    kv = 2 * T * heads * hd  # K or V after the GQA expand
    probs = r.xp.where(fused, 2.0, 4.0) * scores  # the unfused softmax keeps fp32
    probs16 = r.xp.where(fused & (drop == 0), 0.0, 2.0 * scores)  # what the second bmm saves
    core = 2 * T * heads * hd + kv + probs + drop * scores + probs16 + kv
    flash = qkv + 4 * r.b * heads * r.s
    up = r.f / r.t * (1 + r.gated)
    rest = (4 * sp_tokens * r.h + 2 * 2 * T * r.h * shard + 2 * T * heads * hd
            + drop * 2 * sp_tokens * r.h + 2 * T * up + 2 * T * r.f / r.t)
    internals = r.xp.where(r.flash > 0, flash, core)
    full = rest + internals
    saved = r.xp.select([r.recompute == 2, r.recompute == 1],
                        [2 * sp_tokens * r.h, full - internals + qkv], full)
    working = r.xp.select([r.recompute == 2, r.recompute == 1], [full, internals], 0.0)
    return {"saved": saved, "working": working, "full": full, "sp_tokens": sp_tokens}


def in_flight(r: Rows) -> dict[str, np.ndarray]:
    """Chunk-micro-batches whose activations the first and last stage hold at their peak."""
    m = r.m
    k = r.xp.minimum((r.p - 1) * 2 + (r.v - 1) * r.p + 1, m * r.v)
    first = r.xp.select([r.schedule == 0, r.schedule == 1], [m, r.xp.minimum(r.p, m)], k)
    last = r.xp.select([r.schedule == 0, r.schedule == 1], [m, 1.0],
                     r.xp.minimum((r.v - 1) * r.p + 1, m * r.v))
    emb_first = r.xp.select([r.schedule == 2], [r.xp.minimum(k, r.p) + r.xp.maximum(0, k - r.v * r.p)], first)
    head_last = r.xp.where(r.schedule == 0, m, 1.0)  # GPipe keeps every micro-batch's logits
    return {"first": first, "last": last, "emb_first": emb_first, "head_last": head_last}


def memory(r: Rows, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Peak bytes per GPU of the first and last stage (simulator.memory, in closed form)."""
    act = layer_activations(r)
    flight = in_flight(r)
    lpc = r.L / (r.p * r.v)
    T = r.b * r.s
    emb_saved = (1 - r.gated) * act["sp_tokens"] * r.h  # the embedding dropout's mask
    head_saved = (2 * act["sp_tokens"] * r.h + 2 * T * r.h * r.xp.where(r.sp > 0, 1 / r.t, 1.0)
                  + 4 * T * params["vocab_p"] / r.t)
    grad = r.xp.where(r.bf16 > 0, 4.0, 2.0)
    main_grad_copy = r.xp.where(r.bf16 > 0, 0.0, 4.0)  # only at the optimizer step
    shard = r.xp.where(r.dopt > 0, r.d, 1.0)
    per_param = 2.0 + grad + OPTIMIZER_BYTES_PER_PARAM / shard
    one = r.p == 1
    first_act = flight["first"] * lpc * act["saved"] + flight["emb_first"] * emb_saved + one * head_saved
    last_act = (flight["last"] * lpc * act["saved"] + flight["head_last"] * head_saved
                + one * emb_saved * flight["emb_first"])
    first_act = first_act + one * (flight["head_last"] - 1) * head_saved
    logits16 = 2 * T * params["vocab_p"] / r.t  # the loss's 16-bit logits / gradient

    def peak_moment(n: Vec, acts: Vec, head: Vec) -> Vec:
        """simulator.memory: the largest of the forward, backward and optimizer moments, plus
        the workspaces and the context."""
        static = per_param * n
        moments = r.xp.maximum(r.xp.maximum(acts + head, acts + r.xp.maximum(act["working"], head)),
                               main_grad_copy / shard * n)
        return static + moments + WORKSPACE_BYTES + r.hw["reserved_bytes"]

    first = peak_moment(params["first"], first_act, one * logits16)
    last = peak_moment(params["last"], last_act, logits16)
    peak = r.xp.maximum(first, last)
    return {"peak": peak, "first": first, "last": last, "activations": r.xp.maximum(first_act, last_act),
            "weights_states": per_param * r.xp.maximum(params["first"], params["last"]),
            "layer_saved": act["saved"], "layer_working": act["working"]}


def rows_from_record(record: Mapping[str, Any], hw: Mapping[str, float]) -> Rows:
    """One job as `Rows` of Python floats (the single-prediction path; see surrogate.scalar)."""
    from surrogate.scalar import SCALAR

    t = float(record["tp"])
    return Rows(
        L=float(record["num_layers"]), h=float(record["hidden_size"]),
        a=float(record["num_attention_heads"]), g=float(record["num_query_groups"]),
        f=float(record["ffn_hidden_size"]), gated=float(bool(record["gated_mlp"])),
        V=float(record["vocab_size"]), s=float(record["seq_length"]),
        B=float(record["global_batch_size"]), b=float(record["micro_batch_size"]),
        bf16=float(record["precision"] == "bf16"), recompute=float(RECOMPUTE.index(str(record["recompute"]))),
        flash=float(bool(record["flash_attention"])), N=float(record["num_gpus"]), t=t,
        p=float(record["pp"]), d=float(record["dp"]), v=float(record["virtual_stages"]),
        schedule=float(SCHEDULES.index(str(record["schedule"]))),
        sp=float(bool(record["sequence_parallel"]) and t > 1),
        dopt=float(bool(record["distributed_optimizer"])), overlap=float(bool(record["overlap_grad_reduce"])),
        gpn=min(float(record["gpus_per_node"]), float(record["num_gpus"])),
        intra_Bps=float(record["intra_node_bandwidth_GBps"]) * 1e9,
        inter_Bps=float(record["inter_node_bandwidth_Gbps"]) * 1e9 / 8,
        hw=dict(hw), xp=SCALAR)


def physics_columns(columns: Mapping[str, Any],
                    hardware: Mapping[str, HardwareSpec] | None = None) -> dict[str, np.ndarray]:
    """Physics features of n rows (arrays of `JOB_COLUMNS` values), as name -> array.

    ``est_log_time_s`` and ``est_log_memory_bytes`` are the closed-form baselines the model's
    residual targets are taken against (see surrogate.model).
    """
    return physics_of_rows(rows_from_columns(columns, hardware))


def physics_of_rows(r: Rows) -> dict[str, Any]:
    """`physics_columns` of prepared rows (numpy arrays, or one job's floats)."""
    from surrogate.timing import gemm_efficiency, iteration

    def _log(x: Any) -> Any:
        return r.xp.log(r.xp.maximum(x, 1e-30))

    params = stage_params(r)
    fl = flops(r)
    mem = memory(r, params)
    stage = r.xp.maximum(params["first"], params["last"])
    it = iteration(r, stage, params["vocab_p"])
    T = r.b * r.s
    main_k = r.h
    intensity = 2 * T * r.f / r.t * main_k / ((T * main_k + main_k * r.f / r.t + T * r.f / r.t) * 2)
    peak = r.xp.where(r.bf16 > 0, r.hw["peak_bf16"], r.hw["peak_fp16"])
    out = {
        "est_log_time_s": _log(it["total"]), "est_log_memory_bytes": _log(mem["peak"]),
        "log_params": _log(params["total"]), "log_stage_params": _log(stage),
        "log_model_flops": _log(fl["model"]), "log_flops_per_gpu": _log(fl["hardware"] / r.N),
        "log_compute_bound_s": _log(fl["hardware"] / r.N / peak),
        "microbatches": r.m, "log_microbatches": _log(r.m), "layers_per_stage": r.L / r.p,
        "layers_per_chunk": r.L / (r.p * r.v), "tokens_per_microbatch": T,
        "bubble_fraction": it["bubble"], "arithmetic_intensity": intensity,
        "gemm_efficiency": gemm_efficiency(r, r.xp.ones_like(T), T, r.f / r.t, r.h),
        "head_dim": r.h / r.a, "schedule_code": r.schedule, "recompute_code": r.recompute,
        "memory_ratio": mem["peak"] / r.hw["memory_bytes"],
        "memory_capacity_bytes": r.hw["memory_bytes"],
        "log_activation_bytes": _log(mem["activations"]),
        "log_weight_state_bytes": _log(mem["weights_states"]),
        "log_layer_saved_bytes": _log(mem["layer_saved"]),
        "log_layer_working_bytes": _log(mem["layer_working"] + 1),
        "log_mem_first": _log(mem["first"]), "log_mem_last": _log(mem["last"]),
        "log_tp_bytes": _log(T * r.h * 2.0 * (r.t > 1) + 1),
        "log_dp_bytes": _log(stage * r.xp.where(r.bf16 > 0, 4.0, 2.0) * (r.d > 1) + 1),
        "log_p2p_bytes": _log(T * r.h * 2.0 / r.xp.where(r.sp > 0, r.t, 1.0) * (r.p > 1) + 1),
    }
    for name in ("pipeline", "stage_mb", "layer", "layer_compute", "tp_comm", "recompute", "host_excess",
                 "attention", "p2p", "pp_comm", "dp_comm", "dp_exposed", "embedding_sync",
                 "optimizer"):
        out[f"log_{name}_s"] = _log(it[name] + 1e-9)
        out[f"share_{name}"] = it[name] / it["total"]
    for key in ("peak_bf16", "hbm_Bps", "num_sms", "host_s", "coll_s", "mb_s"):
        out[f"hw_{key}"] = r.hw[key]
    return out
