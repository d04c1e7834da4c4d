"""Closed-form physics of jobs: one set of formulas for a table (numpy), one job, and compiled.

The same formulas as the exact simulator, collapsed to what a row's fields determine without
building a graph: parameter counts (simulator.graph.params), FLOPs (Narayanan et al. 2021, as in
simulator.report.metrics), per-stage memory with saved activations per micro-batch from Korthikanti et al.
2022 (as simulator.graph.blocks) times the micro-batches a schedule keeps in flight, and a roofline
estimate of the iteration (simulator.costs.analytic / network / tail, see `surrogate.timing`). The model
learns only the residual log(simulated / estimated), which is why it generalizes to model
shapes it never saw.

Every formula is written once, with numpy ufuncs (`np.where`, `np.maximum`, ...) over the
fields of a `Rows` named tuple, and runs three ways: on arrays of n rows (numpy, vectorized),
on one row's floats, and compiled per row (`simulator.jit.njit`, numba: `surrogate.kernel`
loops over a table's rows without the temporary arrays numpy allocates per operation). The
operations are IEEE ones in one fixed order, so the paths give the same numbers
(tests/surrogate_tests/test_kernel.py). Parts are returned as named tuples, which numba compiles
without allocating.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from simulator.jit import njit
from simulator.job.enums import GpuArchitecture
from simulator.job.specs import GiB, HardwareSpec
from simulator.memory.stages import WORKSPACE_BYTES
from simulator.network.algorithms import (
    LL_MAX_ONE_DOMAIN,
    LL_MAX_ONE_DOMAIN_BLACKWELL,
    NVLS_EFFICIENCY,
    NVLS_EFFICIENCY_BLACKWELL,
)
from simulator.timeline.contention import compute_slowdown
from surrogate.columns import factorize
from surrogate.compiled_ops import Vec, maximum, minimum, where
from surrogate.gemm_shapes import GemmEffs, effs_of_fields, padded_vocab

# simulator.job.framework, megatron-lm (the records' framework): fp32 master weights and Adam
# moments sharded by the distributed optimizer, plus fp32 main-gradient copies with fp16
OPTIMIZER_BYTES_PER_PARAM = 12.0
SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")
RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("fp16", "bf16", "fp8", "fp4")  # fp8/fp4: bf16 weights, grads and peak here;
# the recipe's GEMM peak is surrogate.extended's

class Hardware(NamedTuple):
    """The hardware numbers the physics reads (`hardware_vector`), per row or for one row."""

    peak_fp16: Vec
    peak_bf16: Vec
    hbm_Bps: Vec
    memory_bytes: Vec
    num_sms: Vec
    gemm_max: Vec
    k_half: Vec
    launch_s: Vec
    host_s: Vec
    intra_eff: Vec
    inter_eff: Vec
    intra_lat_s: Vec
    inter_lat_s: Vec
    p2p_eff: Vec
    reserved_bytes: Vec
    coll_s: Vec
    mb_s: Vec
    comm_slowdown: Vec  # compute seconds per second beside a collective (simulator.timeline.contention)
    attention_max: Vec  # fused attention's ceiling (simulator.costs.analytic: the GEMMs' where unset)
    attention_k_half: Vec  # ... and its depth half-point (the GEMMs' where unset)
    ll_max_Bps: Vec  # NCCL's LL ceiling inside a domain; 0 where measured tables replace NCCL's model
    nvls_eff: Vec  # NCCL's NVLink SHARP efficiency; 0 without NVLink SHARP


HW_FIELDS: tuple[str, ...] = Hardware._fields


class Rows(NamedTuple):
    """The job fields of n rows as floats (booleans 0/1, choices as codes), plus derived ones."""

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
    m: Vec  # micro-batches per iteration
    peak: Vec  # peak FLOP/s of the row's precision (every kernel's roofline uses it)
    hw: Hardware
    eff: GemmEffs  # its GEMMs' efficiencies (surrogate.gemm_shapes)


# The inputs of `make_rows`, in order: the job columns a record holds (JOB_COLUMNS without gpu),
# categoricals as codes into PRECISIONS, RECOMPUTE and SCHEDULES.
ROW_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups",
              "ffn_hidden_size", "gated_mlp", "vocab_size", "seq_length", "global_batch_size",
              "micro_batch_size", "precision", "recompute", "flash_attention", "num_gpus", "tp",
              "pp", "dp", "virtual_stages", "schedule", "sequence_parallel", "distributed_optimizer",
              "overlap_grad_reduce", "gpus_per_node", "intra_node_bandwidth_GBps",
              "inter_node_bandwidth_Gbps")
CODES: dict[str, tuple[str, ...]] = {"precision": PRECISIONS, "recompute": RECOMPUTE,
                                     "schedule": SCHEDULES}


@njit(inline=True)
def make_rows(L: Vec, h: Vec, a: Vec, g: Vec, f: Vec, gated: Vec, V: Vec, s: Vec, B: Vec, b: Vec,
              bf16: Vec, recompute: Vec, flash: Vec, N: Vec, t: Vec, p: Vec, d: Vec, v: Vec,
              schedule: Vec, sequence_parallel: Vec, dopt: Vec, overlap: Vec, gpus_per_node: Vec,
              intra_GBps: Vec, inter_Gbps: Vec, hw: Hardware, eff: GemmEffs) -> Rows:
    """`Rows` of the `ROW_FIELDS` values (arrays or one row's floats), the hardware and the
    GEMM efficiencies of their shapes (`surrogate.gemm_shapes`)."""
    return Rows(L, h, a, g, f, gated, V, s, B, b, bf16, recompute, flash, N, t, p, d, v, schedule,
                sequence_parallel * (t > 1), dopt, overlap, minimum(gpus_per_node, N),
                intra_GBps * 1e9, inter_Gbps * 1e9 / 8, B / (d * b),
                where(bf16 > 0, hw.peak_bf16, hw.peak_fp16), hw, eff)


def rows_of_fields(fields: Sequence[Vec], hw: Hardware, eff: GemmEffs | None = None) -> Rows:
    """`make_rows` of the `ROW_FIELDS` values in order (arrays, or one row's floats); `eff`:
    their GEMM efficiencies where the caller has them, else computed here."""
    eff = effs_of_fields(fields, hw) if eff is None else eff
    return make_rows(*fields, hw, eff)  # type: ignore[arg-type, call-arg]  # 25 fields, hw, eff


def _codes(values: Any, choices: tuple[str, ...]) -> np.ndarray:
    """Index of each row's value in `choices` (0 for a value not among them)."""
    return factorize(values).lookup(lambda u: float(choices.index(u)) if u in choices else 0.0)


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
            "mb_s": getattr(e, "microbatch_overhead_s", 0.0),
            "comm_slowdown": compute_slowdown(spec),
            "attention_max": e.attention_max_efficiency or e.gemm_max_efficiency,
            "attention_k_half": e.attention_k_half or e.gemm_k_half,
            **_nccl_numbers(spec)}


def _nccl_numbers(spec: HardwareSpec) -> dict[str, float]:
    """The constants NCCL's tuner reads for a collective inside one NVLink domain
    (simulator.network.algorithms.Links): the LL protocol's bandwidth ceiling and NVLink SHARP's
    efficiency by GPU generation. A GPU with measured nccl-tests tables (`nccl_tables`) costs its
    collectives inside a node from them instead (simulator.network.collectives), which the
    calibrated ring stands for: ``ll_max_Bps`` 0 says so."""
    blackwell = spec.architecture is GpuArchitecture.BLACKWELL
    ll_max = LL_MAX_ONE_DOMAIN_BLACKWELL if blackwell else LL_MAX_ONE_DOMAIN[bool(spec.nvlink_sharp)]
    nvls = NVLS_EFFICIENCY_BLACKWELL if blackwell else NVLS_EFFICIENCY
    return {"ll_max_Bps": 0.0 if spec.nccl_tables else ll_max,
            "nvls_eff": nvls if spec.nvlink_sharp else 0.0}


def hardware_table(gpu: Any, hardware: Mapping[str, HardwareSpec] | None) -> tuple[np.ndarray, np.ndarray]:
    """(float64 matrix of `HW_FIELDS`, one row per distinct GPU; each row's index into it)."""
    from surrogate.hardware import catalog_hardware

    names = factorize(gpu)
    vectors = [hardware_vector(hardware[str(n)] if hardware and str(n) in hardware
                               else catalog_hardware(str(n))) for n in names.uniques]
    table = np.array([[vec[k] for k in HW_FIELDS] for vec in vectors], dtype=np.float64)
    return table.reshape(len(vectors), len(HW_FIELDS)), names.codes


def hardware_arrays(gpu: Any, hardware: Mapping[str, HardwareSpec] | None) -> Hardware:
    return hardware_of_table(*hardware_table(gpu, hardware))


def hardware_of_table(table: np.ndarray, codes: np.ndarray) -> Hardware:
    """`Hardware` per row of a `hardware_table` (the GPUs' numbers, each row's index)."""
    if len(table) == 1:
        return Hardware(*(np.full(len(codes), value) for value in table[0]))
    return Hardware(*(column[codes] for column in table.T))


def row_field_matrix(c: Mapping[str, Any],
                     code: Callable[[Any, str], np.ndarray] | None = None) -> np.ndarray:
    """The `ROW_FIELDS` of a table of `JOB_COLUMNS` as one float64 (fields, rows) matrix, choices
    as codes (`code(values, column)`, by default 0 for a value not among the choices); the
    columns are cast into it as they are copied (the compiled kernel reads this matrix)."""
    code = code or (lambda values, name: _codes(values, CODES[name]))
    out = np.empty((len(ROW_FIELDS), len(c["num_layers"])))
    for j, name in enumerate(ROW_FIELDS):
        out[j] = code(c[name], name) if name in CODES else c[name]
    return out


def rows_from_columns(c: Mapping[str, Any], hardware: Mapping[str, HardwareSpec] | None,
                      eff: GemmEffs | None = None) -> Rows:
    """`Rows` of a table of `JOB_COLUMNS` (`eff`: as in `rows_of_fields`)."""
    return rows_of_fields(list(row_field_matrix(c)), hardware_arrays(c["gpu"], hardware), eff)


def row_field_values(record: Mapping[str, Any]) -> list[float]:
    """The `ROW_FIELDS` of one record as floats (choices as codes)."""
    return [float(CODES[name].index(str(record[name]))) if name in CODES else float(record[name])
            for name in ROW_FIELDS]


def rows_from_record(record: Mapping[str, Any], hw: Mapping[str, float]) -> Rows:
    """One job as `Rows` of floats (`hw`: `hardware_vector` of its GPU)."""
    return rows_of_fields(row_field_values(record), Hardware(*(float(hw[k]) for k in HW_FIELDS)))


class StageParams(NamedTuple):
    first: Vec  # parameters per GPU of the first pipeline stage
    last: Vec  # ... of the last
    total: Vec  # of the whole model
    vocab_p: Vec  # padded vocabulary


@njit(inline=True)
def layer_linear_weights(r: Rows) -> Vec:
    """Elements of one layer's four linear weights (QKV, projection, fc1, fc2), before tp."""
    hd = r.h / r.a
    return r.h * (r.h + 2 * r.g * hd) + r.h * r.h + r.h * r.f * (1 + r.gated) + r.f * r.h


@njit(inline=True)
def te_dummy_elements(r: Rows) -> Vec:
    """Elements of TE's cached placeholder weight gradients on one GPU: one per distinct shape
    of the layer's four linear weights after tp (simulator.memory.te_dummy; fc1 and fc2 of a
    4h MLP at tp 4 share one)."""
    hd = r.h / r.a
    rows = ((r.h + 2 * r.g * hd) / r.t, r.h, r.f * (1 + r.gated) / r.t, r.h)
    cols = (r.h, r.h / r.t, r.h, r.f / r.t)
    total = rows[0] * cols[0]
    for i in range(1, 4):
        seen = (rows[i] == rows[0]) & (cols[i] == cols[0])
        for j in range(1, i):
            seen = seen | ((rows[i] == rows[j]) & (cols[i] == cols[j]))
        total = total + where(seen, 0.0, rows[i] * cols[i])
    return total


@njit(inline=True)
def stage_params(r: Rows) -> StageParams:
    """Parameters per GPU of the first and last pipeline stage, and of the whole model."""
    hd = r.h / r.a
    bias, untied = 1 - r.gated, r.gated
    norm = r.h * (2 - r.gated)  # LayerNorm has a bias, RMSNorm not
    qkv_out = r.h + 2 * r.g * hd
    up_out = r.f * (1 + r.gated)
    weights = layer_linear_weights(r)
    sharded = weights + bias * (qkv_out + up_out)
    replicated = bias * 2 * r.h + 2 * norm
    vocab_p = padded_vocab(r.V, r.t)
    pos = bias * r.s * r.h  # learned positions (GPT family)
    layers = r.L / r.p * (sharded / r.t + replicated)
    one = r.p == 1  # the single stage holds both the embedding and the head
    embedding = vocab_p * r.h / r.t + pos  # positions and the final norm are replicated over tp
    head = norm + untied * vocab_p * r.h / r.t
    first = layers + embedding + one * head
    last = layers + head + one * embedding + (r.p > 1) * (1 - untied) * vocab_p * r.h / r.t
    total = r.L * (sharded + replicated) + r.V * r.h * (1 + untied) + pos + norm
    return StageParams(first, last, total, vocab_p)


@njit(inline=True)
def layer_flops_per_token(r: Rows) -> Vec:
    hd = r.h / r.a
    return 2.0 * (r.h * (r.h + 2 * r.g * hd) + r.h * r.h + r.h * r.f * (1 + r.gated) + r.f * r.h
                  + 2 * r.s * r.h)


class Flops(NamedTuple):
    model: Vec  # model FLOPs per iteration
    hardware: Vec  # plus recomputation


@njit(inline=True)
def flops(r: Rows) -> Flops:
    """Model and hardware FLOPs per iteration (simulator.report.metrics, vectorized)."""
    lf = layer_flops_per_token(r)
    tokens = r.B * r.s
    model = 3.0 * tokens * (r.L * lf + 2.0 * r.h * r.V)
    selective = 4.0 * r.s * r.h  # flash attention is checkpointed and re-run too
    extra = where(r.recompute == 1, selective, where(r.recompute == 2, lf, 0.0))
    return Flops(model, model + tokens * r.L * extra)


@njit(inline=True)
def fused_softmax(r: Rows) -> Vec:
    """1 where Megatron's fused softmax kernel runs (simulator.graph.blocks.fused_softmax_available)."""
    heads = r.a / r.t
    shape_ok = (r.s > 16) & (r.s <= 4096) & (r.s % 4 == 0)
    per_block = where(r.s > 128, 4.0, 8.0)
    return where(shape_ok & ((r.b * heads) % per_block == 0), 1.0, 0.0)


class Activations(NamedTuple):
    saved: Vec  # bytes one layer keeps for one micro-batch until its backward
    working: Vec  # transient bytes of its backward (recomputed internals)
    full: Vec  # everything, without recomputation
    sp_tokens: Vec  # tokens per GPU of the sequence-parallel regions


@njit(inline=True)
def layer_activations(r: Rows) -> Activations:
    """Saved and transient bytes of one layer for one micro-batch (Korthikanti et al. 2022, as
    simulator.graph.blocks): dropout only in the GPT family (Llama trains without), K and V expanded to
    every head before the unfused attention's bmms (GQA), selective recompute keeping the core
    attention's Q, K, V inputs, flash attention included."""
    T, hd = r.b * r.s, r.h / r.a
    heads, groups = r.a / r.t, r.g / r.t
    drop = 1 - r.gated  # the family convention of surrogate.features
    sp_tokens = where(r.sp > 0, T / r.t, T)
    shard = where(r.sp > 0, 1 / r.t, 1.0)
    scores = r.b * heads * r.s * r.s
    fused = fused_softmax(r) > 0
    qkv = 2 * T * hd * (heads + 2 * groups)  # the core's inputs
    kv = 2 * T * heads * hd  # K or V after the GQA expand
    probs = where(fused, 2.0, 4.0) * scores  # the unfused softmax keeps fp32
    probs16 = where(fused & (drop == 0), 0.0, 2.0 * scores)  # what the second bmm saves
    core = 2 * T * heads * hd + kv + probs + drop * scores + probs16 + kv
    flash = qkv + 4 * r.b * heads * r.s
    up = r.f / r.t * (1 + r.gated)
    rest = (4 * sp_tokens * r.h + 2 * 2 * T * r.h * shard + 2 * T * heads * hd
            + drop * 2 * sp_tokens * r.h + 2 * T * up + 2 * T * r.f / r.t)
    internals = where(r.flash > 0, flash, core)
    full = rest + internals
    saved = where(r.recompute == 2, 2 * sp_tokens * r.h,
                     where(r.recompute == 1, full - internals + qkv, full))
    working = where(r.recompute == 2, full, where(r.recompute == 1, internals, 0.0))
    return Activations(saved, working, full, sp_tokens)


class InFlight(NamedTuple):
    first: Vec  # chunk-micro-batches of layers the first stage holds at its peak
    last: Vec  # ... the last stage
    emb_first: Vec  # micro-batches of embedding activations on the first stage
    head_last: Vec  # micro-batches of head activations on the last stage


@njit(inline=True)
def in_flight(r: Rows) -> InFlight:
    """Chunk-micro-batches whose activations the first and last stage hold at their peak."""
    m = r.m
    k = minimum((r.p - 1) * 2 + (r.v - 1) * r.p + 1, m * r.v)
    first = where(r.schedule == 0, m, where(r.schedule == 1, minimum(r.p, m), k))
    last = where(r.schedule == 0, m,
                    where(r.schedule == 1, 1.0, minimum((r.v - 1) * r.p + 1, m * r.v)))
    emb_first = where(r.schedule == 2, minimum(k, r.p) + maximum(0, k - r.v * r.p), first)
    head_last = where(r.schedule == 0, m, 1.0)  # GPipe keeps every micro-batch's logits
    return InFlight(first, last, emb_first, head_last)


class Memory(NamedTuple):
    peak: Vec  # bytes per GPU, the larger of the first and last stage
    first: Vec
    last: Vec
    activations: Vec
    weights_states: Vec
    layer_saved: Vec
    layer_working: Vec


@njit(inline=True)
def _peak_moment(r: Rows, per_param: Vec, main_grad_copy: Vec, shard: Vec, working: Vec, n: Vec,
                 acts: Vec, head: Vec, dummy: Vec) -> Vec:
    """simulator.memory.stages: the largest of the forward, backward and optimizer moments, plus the
    workspaces, TE's cached dummy weight gradients and the context."""
    static = per_param * n + dummy
    moments = maximum(maximum(acts + head, acts + maximum(working, head)),
                         main_grad_copy / shard * n)
    return static + moments + WORKSPACE_BYTES + r.hw.reserved_bytes


@njit(inline=True)
def memory(r: Rows, params: StageParams) -> Memory:
    """Peak bytes per GPU of the first and last stage (simulator.memory.stages, in closed form)."""
    act = layer_activations(r)
    flight = in_flight(r)
    lpc = r.L / (r.p * r.v)
    T = r.b * r.s
    emb_saved = (1 - r.gated) * act.sp_tokens * r.h  # the embedding dropout's mask
    head_saved = (2 * act.sp_tokens * r.h + 2 * T * r.h * where(r.sp > 0, 1 / r.t, 1.0)
                  + 4 * T * params.vocab_p / r.t)
    grad = where(r.bf16 > 0, 4.0, 2.0)
    main_grad_copy = where(r.bf16 > 0, 0.0, 4.0)  # only at the optimizer step
    shard = where(r.dopt > 0, r.d, 1.0)
    per_param = 2.0 + grad + OPTIMIZER_BYTES_PER_PARAM / shard
    one = r.p == 1
    first_act = flight.first * lpc * act.saved + flight.emb_first * emb_saved + one * head_saved
    last_act = (flight.last * lpc * act.saved + flight.head_last * head_saved
                + one * emb_saved * flight.emb_first)
    first_act = first_act + one * (flight.head_last - 1) * head_saved
    logits16 = 2 * T * params.vocab_p / r.t  # the loss's 16-bit logits / gradient
    dummy = te_dummy_elements(r) * 2.0
    # the output layer's placeholder (simulator.memory.te_dummy) and, under sequence parallelism,
    # its gathered input's buffer (simulator.memory.global_buffer), on the last stage
    output_dummy = 2.0 * params.vocab_p / r.t * r.h + where(r.sp > 0, 2.0 * T * r.h, 0.0)
    first = _peak_moment(r, per_param, main_grad_copy, shard, act.working, params.first, first_act,
                         one * logits16, dummy + one * output_dummy)
    last = _peak_moment(r, per_param, main_grad_copy, shard, act.working, params.last, last_act,
                        logits16, dummy + output_dummy)
    return Memory(maximum(first, last), first, last, maximum(first_act, last_act),
                  per_param * maximum(params.first, params.last), act.saved, act.working)




