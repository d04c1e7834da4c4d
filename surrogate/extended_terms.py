"""The extended physics of a row (`surrogate.extended`'s formulas), written once over vectors.

Every function here takes its rows as vectors indexed by `surrogate.slots` (`f[TP]`,
`new[CP]`, `dense[D_LAYER]`, ...) and uses the scalar-or-array helpers of `surrogate.physics`
(`where`, `maximum`, ...): numpy runs them on a table's matrices (`surrogate.extended
.extended_values`, no numba or VTRAIN_NO_JIT=1), the compiled loop of
`surrogate.extended_kernel` on one row's columns. IEEE operations in one order give both paths
the same numbers (tests/surrogate_tests/test_extended_kernel.py). What a row takes from tables
keyed by a few columns comes in as `aux` (`surrogate.extended.lookups`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from simulator.jit import njit
from simulator.job.enums import DataParallelSharding
from simulator.network.alltoall import DEEPEP_NVLINK_EFFICIENCY, DEEPEP_RDMA_EFFICIENCY
from surrogate.attention_terms import (
    Heads,
    attention_extra_s,
    attention_saved_bytes,
    heads,
    kv_bytes,
    qkv_out_bytes,
    ring_exposed_s,
    ring_steps_extra,
)
from surrogate.compiled_ops import Vec, floor, maximum, minimum, skips, where
from surrogate.dp_terms import dp_correction, expert_tail_s, fsdp_layer_s, grad_dtype_s
from surrogate.memory_terms import quantized_activations_delta
from surrogate.moe_terms import moe_layer_terms, ring_gather_s, saved_activations_bytes
from surrogate.param_gather_terms import param_gather_shift_s
from surrogate.physics import OPTIMIZER_BYTES_PER_PARAM, PRECISIONS, RECOMPUTE, Hardware, Rows, in_flight
from surrogate.pipeline_terms import (
    layer_params_per_gpu,
    stage_split,
    stage_times,
    uneven_memory_bytes,
    uneven_tail_s,
    uneven_time_s,
    vocab_per_rank,
)
from surrogate.quantize_terms import expert_quantize_s, quantize_s
from surrogate.records import CHOICES
from surrogate.slots import (
    A_ELEMENT,
    A_EST_MEMORY,
    A_EST_TIME,
    A_HELD,
    A_HELD_SHARDED,
    A_LEVEL,
    A_LP_COPIES,
    A_LP_EFF,
    A_MAIN,
    A_MOE_HOST,
    A_PEAK_LP,
    A_TOKEN_COPIES,
    CP,
    CP_COMM_TYPE,
    CUDA_GRAPHS,
    D_ACTIVATIONS,
    D_ATTENTION,
    D_DP_EXPOSED,
    D_EST_LOG_MEMORY,
    D_EST_LOG_TIME,
    D_HOST_EXCESS,
    D_LAYER,
    D_LAYER_COMPUTE,
    D_LAYER_HOST,
    D_LAYER_SAVED,
    D_MEM_FIRST,
    D_MEM_LAST,
    D_OPTIMIZER,
    D_STAGE_MB,
    D_STAGE_PARAMS,
    D_TP_OVERLAP_SAVING,
    D_WEIGHT_STATES,
    DP,
    EP,
    EXPERT_TP,
    FFN_HIDDEN_SIZE,
    GLOBAL_BATCH_SIZE,
    GPUS_PER_NODE,
    HIDDEN_SIZE,
    INTER_NODE_BANDWIDTH_GBPS,
    INTRA_NODE_BANDWIDTH_GBPS,
    M_ACTIVE_FFN,
    M_ATTENTION,
    M_FORWARD,
    M_MOE_LAYERS,
    M_PARAMS_ACTIVE,
    M_PARAMS_ALL,
    M_ROUTED,
    MICRO_BATCH_SIZE,
    MOE_TOKEN_DISPATCHER,
    MTP_NUM_LAYERS,
    NUM_GPUS,
    NUM_LAYERS,
    NVLINK_DOMAIN,
    OVERLAP_PARAM_GATHER,
    PP,
    PRECISION,
    RECOMPUTE_CODE,
    SEQ_LENGTH,
    SEQUENCE_PARALLEL,
    TP,
    TP_COMM_OVERLAP,
    VIRTUAL_STAGES,
)
from surrogate.timing import (
    DT,
    _tp_comm,
    projection_gemms,
    tp_comm_s,
)

# codes the compiled formulas compare with (numba reads module constants, not dict lookups)
_FLEX = float(CHOICES["moe_token_dispatcher"].index("flex"))
_P2P = float(CHOICES["cp_comm_type"].index("p2p"))
_A2A = float(CHOICES["cp_comm_type"].index("a2a"))
_ALL_GATHER = float(CHOICES["cp_comm_type"].index("all_gather"))
_OPTIM_LEVEL = float(DataParallelSharding.OPTIM.level)
_FULL = float(RECOMPUTE.index("full"))
_FP16 = float(PRECISIONS.index("fp16"))

@njit
def _alltoall_s(nbytes: Vec, n: Vec, stride: Vec, domain: Vec, intra_Bps: Vec, inter_Bps: Vec,
                gpn: Vec, hw: Hardware, deepep: Any) -> Vec:
    """`simulator.network.alltoall.all_to_all_s` over rows: the group of `n` ranks `stride`
    apart (simulator.network.topology.strided_group), its share to its own domain on NVLink,
    the rest on the node's links shared by the node's GPUs (non-blocking fabric)."""
    if skips((n > 1) & (nbytes > 0)):  # a compiled row without the exchange: 0.0 either way
        return 0.0
    g = where(stride >= domain, 1.0, maximum(1.0, minimum(n, domain // maximum(stride, 1.0))))
    intra_eff = where(deepep, DEEPEP_NVLINK_EFFICIENCY, hw.intra_eff)
    inter_eff = where(deepep, DEEPEP_RDMA_EFFICIENCY, hw.inter_eff)
    intra = (g - 1) / n * nbytes / (intra_Bps * intra_eff)
    inter = (n - g) / n * nbytes / (inter_Bps / gpn * inter_eff)
    crosses = n > g
    t = where(crosses, maximum(intra, inter) + hw.intra_lat_s + hw.inter_lat_s,
              intra + hw.intra_lat_s)
    return where((n > 1) & (nbytes > 0), t, 0.0)


class Comm(NamedTuple):
    """Per layer and micro-batch (`_comm_terms`): a rank's MoE tokens, the expert data-parallel
    size, the routed-expert parameters per GPU, the dispatch all-to-all (bytes a rank sends,
    seconds), the cp exchange (one chunk's K/V seconds on its link; bytes, seconds) and whether
    it is the ring (p2p, hidden under attention)."""

    tokens: Vec
    expert_dp: Vec
    per_gpu_experts: Vec
    a2a_bytes: Vec
    a2a_s: Vec
    kv_s: Vec
    cp_bytes: Vec
    cp_s: Vec
    ring: Any


@njit(inline=True)
def _comm_terms(f: Any, new: Any, models: Any, copies: Vec, hw: Hardware, dims: Heads) -> Comm:
    """`Comm` of the rows (`f`, `new`, `models`: `surrogate.slots`; `copies`: the copies of a
    token the dispatch sends, `surrogate.moe_terms.token_copies`)."""
    n_moe, routed = models[M_MOE_LAYERS], models[M_ROUTED]
    t, p, d, b, s, h = f[TP], f[PP], f[DP], f[MICRO_BATCH_SIZE], f[SEQ_LENGTH], f[HIDDEN_SIZE]
    cp, ep, etp = new[CP], new[EP], new[EXPERT_TP]
    domain = maximum(new[NVLINK_DOMAIN], 1.0)
    gpn = maximum(minimum(f[GPUS_PER_NODE], f[NUM_GPUS]), 1.0)
    intra, inter = f[INTRA_NODE_BANDWIDTH_GBPS] * 1e9, f[INTER_NODE_BANDWIDTH_GBPS] * 1e9 / 8
    tokens = b * s / cp / where(f[SEQUENCE_PARALLEL] > 0, t, 1.0)  # a rank's MoE tokens
    expert_dp = maximum(1.0, t * cp * d / (etp * ep))
    per_gpu_experts = routed / p / (ep * etp)
    a2a_bytes = tokens * copies * h * 2.0 * (n_moe > 0)
    flex = new[MOE_TOKEN_DISPATCHER] == _FLEX
    a2a_s = _alltoall_s(a2a_bytes, ep, etp, domain, intra, inter, gpn, hw, flex)
    kv = kv_bytes(dims, b * s / cp)  # K and V of a rank's chunk (`dims`: the true head sizes)
    exchange = new[CP_COMM_TYPE]
    ring = exchange == _P2P
    a2a_cp = exchange == _A2A
    cp_bytes = where(a2a_cp, qkv_out_bytes(dims, b * s / cp), kv * (cp - 1)) * (cp > 1)
    link_Bps = where(t * cp <= domain, intra * hw.intra_eff, inter / gpn * hw.inter_eff)
    # all_gather: one ring all-gather of the cp group's K/V (its ranks t apart: g of them in a
    # domain, whose share of the node's NICs carries what crosses; surrogate.moe_terms.ring_gather_s)
    # (a compiled row computes only its own exchange's: `skips`)
    gather = exchange == _ALL_GATHER
    gather_s = 0.0
    if not skips(gather):
        in_domain = minimum(cp, maximum(1.0, floor(domain / t)))
        gather_s = ring_gather_s(cp * kv, cp, in_domain, intra * hw.intra_eff,
                                 inter * hw.inter_eff * in_domain / gpn, hw)
    ulysses_s = 0.0 if skips(a2a_cp) else _alltoall_s(cp_bytes, cp, t, domain, intra, inter, gpn, hw, False)
    cp_s = where(a2a_cp, ulysses_s, where(gather, gather_s, cp_bytes / link_Bps))
    return Comm(tokens, expert_dp, per_gpu_experts, a2a_bytes, a2a_s, kv / link_Bps, cp_bytes,
                cp_s, ring)


@njit(inline=True)
def lowp_saving_s(re: Rows, low: Any, rate: Vec, overlap: Any) -> tuple[Vec, Vec]:
    """Seconds per layer and micro-batch a low-precision recipe saves on the GPU: the layer's four
    projections (forward, data and weight gradients, and the forward again under full recompute)
    at the recipe's GEMM rate `rate` (its peak times its measured GEMM efficiency) instead of the
    16-bit one, each GEMM at its own shape's tile / wave / depth efficiency and memory bound
    (surrogate.timing.projection_gemms). Attention's core and the elementwise kernels stay 16-bit
    (simulator.graph.quantize). A share of the layer's time (0.75 of it at the recipe's speed-up,
    until 2026-11-27) left small GEMMs, which gain less, 12% too fast in log terms on average.
    Also, where `overlap` (tp_comm_overlap), what the faster GEMMs hide less of the tp
    collectives beside them (TE's userbuffers, `surrogate.timing._tp_comm`): the dense form's
    saving is priced beside 16-bit GEMMs."""
    if skips(low):
        return 0.0, 0.0
    bf16, lp = projection_gemms(re, re.peak), projection_gemms(re, rate)
    forward_16 = bf16.qkv_f + bf16.proj_f + bf16.up_f + bf16.down_f
    forward_lp = lp.qkv_f + lp.proj_f + lp.up_f + lp.down_f
    saving = (forward_16 + bf16.backward) - (forward_lp + lp.backward)
    full = re.recompute == 2
    lost = 0.0 * saving
    if not skips(overlap):
        one = tp_comm_s(re, re.b * re.s * re.h * DT)
        at16 = _tp_comm(re, one, bf16.qkv_f, bf16.proj_f, bf16.up_f, bf16.down_f)
        atlp = _tp_comm(re, one, lp.qkv_f, lp.proj_f, lp.up_f, lp.down_f)
        lost = ((at16.overlap_saving - atlp.overlap_saving) * (1 + full)
                + at16.overlap_saving_b - atlp.overlap_saving_b)
    return (where(low, saving + where(full, forward_16 - forward_lp, 0.0), 0.0),
            where(low & overlap, lost, 0.0))


@njit(inline=True)
def mtp_saved_bytes(f: Any, new: Any, layer_saved: Vec) -> Vec:
    """What the multi-token prediction depths save per micro-batch on the last stage
    (simulator.graph.mtp): each a layer of the model's last kind (`layer_saved`, what a layer
    keeps under the row's recompute), the concatenated norms' 2h input of its projection, and its
    own output layer's loss, never recomputed: the fp32 logits of the rank's padded vocabulary
    share and the final norm's and output layer's inputs."""
    t, h = f[TP], f[HIDDEN_SIZE]
    tokens = f[MICRO_BATCH_SIZE] * f[SEQ_LENGTH] / new[CP]
    shard = where((f[SEQUENCE_PARALLEL] > 0) & (t > 1), 1 / t, 1.0)
    head = 4.0 * tokens * vocab_per_rank(f) + 2.0 * 2.0 * tokens * h * shard
    return new[MTP_NUM_LAYERS] * (layer_saved + head + 2.0 * 2.0 * tokens * h * shard)


@njit
def extended_row(f: Any, new: Any, models: Any, aux: Any, dense: Any, hw: Hardware,
                 r: Rows, re: Rows) -> tuple[Vec, ...]:
    """`EXTENDED_PHYSICS` of rows, then the corrected time (s) and memory (bytes) estimates.

    One definition for numpy over a table (each argument a matrix whose rows are the fields,
    `surrogate.slots`) and for the compiled loop (`surrogate.extended_kernel`: each a row's
    vector). `aux`: the rows' `lookups`; `dense`: the dense physics features of the effective
    rows (`DENSE_READ`); `hw`: the dense physics' hardware numbers per row; `r`: the rows'
    own fields as the dense form reads them; `re`: the effective rows the dense physics ran
    on (`surrogate.extended.effective_fields`)."""
    n_moe, active_ffn = models[M_MOE_LAYERS], models[M_ACTIVE_FFN]
    t, p, d, b, s, h = f[TP], f[PP], f[DP], f[MICRO_BATCH_SIZE], f[SEQ_LENGTH], f[HIDDEN_SIZE]
    L = f[NUM_LAYERS]
    dims = heads(f, new)  # the true head sizes (surrogate.attention_terms)
    copies_sent = aux[A_TOKEN_COPIES]
    comm = _comm_terms(f, new, models, copies_sent, hw, dims)
    tokens, expert_dp, per_gpu_experts = comm.tokens, comm.expert_dp, comm.per_gpu_experts
    peak_lp, lp_eff, element, copies = aux[A_PEAK_LP], aux[A_LP_EFF], aux[A_ELEMENT], aux[A_LP_COPIES]
    speedup = peak_lp * lp_eff / maximum(hw.peak_bf16, 1.0)
    low = f[PRECISION] >= 2
    level = aux[A_LEVEL]
    stage = dense[D_STAGE_PARAMS]
    slots = f[GLOBAL_BATCH_SIZE] / (d * b) + (p - 1) / f[VIRTUAL_STAGES]
    layers = L / p * slots  # layer-micro-batch steps on the critical path
    lowp, overlap_lost = lowp_saving_s(re, low, peak_lp * lp_eff, new[TP_COMM_OVERLAP] > 0)
    graphs = where(new[CUDA_GRAPHS] > 0, dense[D_HOST_EXCESS], 0.0)
    overlap = where(new[TP_COMM_OVERLAP] > 0, dense[D_TP_OVERLAP_SAVING] - overlap_lost, 0.0)
    # a MoE layer's dispatch and combine (their combined-1F1B overlap), its experts' extra GPU
    # time and its extra host launches (surrogate.moe_terms)
    grad_element, buffer_s = grad_dtype_s(f, new, re, stage)
    moe_layer_comm, moe_layer_gpu = moe_layer_terms(f, new, tokens, comm.a2a_s, copies_sent, hw,
                                                    dense[D_LAYER_COMPUTE],
                                                    where(low, peak_lp * lp_eff, hw.peak_bf16),
                                                    grad_element,
                                                    where(low & (element > 0), element, 2.0))
    moe_layer_gpu = moe_layer_gpu + expert_quantize_s(re, new, tokens, aux, level, low)
    moe_layer_host = aux[A_MOE_HOST]
    moe_comm = moe_layer_comm * n_moe / L
    attention_s = attention_extra_s(f, new, dims, models[M_ATTENTION], dense, hw)
    # the exchanges of a layer and micro-batch: ring attention's what its steps do not hide;
    # all_gather's K/V gathered forward and backward and their gradients reduce-scattered
    # (simulator.graph.context_parallel.all_gather_core); Ulysses' all-to-alls each way
    # (and the forward's again where recompute re-runs the core attention: full, or selective's
    # core_attn)
    again = where(f[RECOMPUTE_CODE] > 0, 1.0, 0.0)
    cp_comm = where(comm.ring, ring_exposed_s(new[CP], comm.kv_s, dense[D_ATTENTION]),
                    where(new[CP_COMM_TYPE] == _ALL_GATHER, 3 + again, 2 + again) * comm.cp_s)
    est = aux[A_EST_TIME]
    # the stage's parameters outside the routed experts (reduced and gathered over dp; the
    # experts' over expert_dp: `expert_tail_s`): the dense form counted the MLP a token meets per
    # layer (kernel_mlp) where its MoE layers hold only their dense layers' MLPs (dense_mlp)
    kernel_mlp = 3 * h * active_ffn / t
    dense_mlp = (L - n_moe) * 3 * h * f[FFN_HIDDEN_SIZE] / t / L
    non_expert = where(n_moe > 0, stage - L / p * (kernel_mlp - dense_mlp), stage)
    tree, dense_comm = dp_correction(f, new, dense, hw, re, grad_element, non_expert)
    tree = tree + buffer_s
    # a layer's windows take max(GPU + blocking comm, host dispatch) (surrogate.timing._window):
    # what the recipe, the tp overlap and CUDA graphs save on the GPU stops at the host's floor
    # (cp's exchange and a MoE layer's dispatch and experts are GPU time and blocking comm in
    # the same windows; a MoE layer's host launches more: surrogate.moe_terms)
    steps = ring_steps_extra(re, new[CP], comm.ring, dense[D_ATTENTION])
    quantize = quantize_s(re, low, aux, level)
    busy = (dense[D_LAYER] - dense[D_HOST_EXCESS] - lowp - overlap + cp_comm + attention_s + steps.gpu
            + quantize.gpu + fsdp_layer_s(f, re, dense, hw, level, grad_element, new[CP],
                                        attention_s + steps.gpu, lowp))
    host_floor = where(new[CUDA_GRAPHS] > 0, 0.0, dense[D_LAYER_HOST] + steps.host + quantize.host)
    experts_s = moe_layer_gpu * n_moe / L
    moe_layer = maximum(busy + moe_layer_comm + moe_layer_gpu, host_floor + moe_layer_host)
    mean_layer = (n_moe * moe_layer + (L - n_moe) * maximum(busy, host_floor)) / L
    per_layer = mean_layer - dense[D_LAYER]
    split = stage_split(f, new)
    head_s = maximum(dense[D_STAGE_MB] - L / p * dense[D_LAYER], 0.0)
    # multi-token prediction's depths run on the last stage after the model's layers
    mtp_s = new[MTP_NUM_LAYERS] * (dense[D_LAYER] + per_layer + head_s)
    dense_layer = maximum(busy, host_floor)
    times = stage_times(new, split, mean_layer, moe_layer, dense_layer, n_moe)
    uneven_s = uneven_time_s(f, new, split, times, mean_layer, head_s, mtp_s)
    experts_tail, experts_one, experts_bucket = expert_tail_s(f, new, per_gpu_experts, expert_dp, level,
                                                             dense, hw, dense_comm)
    # overlap_param_gather's waits in the next forwards (surrogate.param_gather_terms), on the
    # effective rows the dense form's tail gather ran on: the non-expert parameters over dp, the
    # experts' over expert_dp (experts_one); the dense-equivalent MLP gathered over dp, as until
    # schema 25, made MoE rows' gathers 5x the simulator's (a Mixtral on 2,048 GB200s: 43 ms vs
    # 8.5 ms)
    gather_shift = param_gather_shift_s(re, new[OVERLAP_PARAM_GATHER] > 0, non_expert,
                                        non_expert + per_gpu_experts, dense[D_STAGE_MB],
                                        experts_one, experts_bucket)
    # an uneven split's largest stage reduces and steps more parameters after its last backward
    layer_params = layer_params_per_gpu(f, where(n_moe > 0, active_ffn, f[FFN_HIDDEN_SIZE]))
    tail_s = uneven_tail_s(f, new, split, times, dense[D_DP_EXPOSED] + dense[D_OPTIMIZER] + tree,
                           experts_tail, stage, layer_params, n_moe)
    time = maximum(est + tree + layers * per_layer + uneven_s + experts_tail + tail_s
                   + gather_shift, 0.2 * est)
    # Megatron shards the optimizer over the data-parallel group with context parallelism (dp x
    # cp, simulator.graph.params.optimizer_shards) and the routed experts' over expert_dp; the
    # dense form's rows shard it over dp where their effective rows have the distributed
    # optimizer (surrogate.extended.effective_fields) and nothing else
    ranks = d * new[CP]
    sharded = level >= _OPTIM_LEVEL
    dense_shard = where(re.dopt > 0, d, 1.0)
    optimizer_shard = where(sharded, ranks, 1.0)
    # a MoE row's states: the dense-equivalent MLP out (kernel_mlp), the dense layers' MLPs
    # (dense_mlp) and the GPU's routed experts in, each at its group's bytes per parameter
    experts_layer = per_gpu_experts * p / L
    moe_delta = where(n_moe > 0, L / p * (
        dense_mlp * (6 + 12 / optimizer_shard) + experts_layer * (6 + 12 / where(sharded, expert_dp, 1.0))
        - kernel_mlp * (6 + 12 / dense_shard)), 0.0)
    # what a layer saves per micro-batch beyond the dense form's (the MoE layers' extra, on
    # average over the layers, and the attention at its true head sizes), on the dense form's
    # first and last stage (their layer-micro-batches in flight: physics.in_flight), against
    # the larger of the two
    flight = in_flight(re)
    per_chunk = re.L / (re.p * re.v)
    saved_element = where(low & (element > 0), element, 2.0)
    moe_extra = where(f[RECOMPUTE_CODE] != _FULL,
                      saved_activations_bytes(f, new, tokens, saved_element), 0.0)
    attention_extra = attention_saved_bytes(f, new, dims)
    extra_saved = moe_extra * n_moe / L + attention_extra
    mem_first, mem_last = dense[D_MEM_FIRST], dense[D_MEM_LAST]
    saved_delta = (maximum(mem_first + flight.first * per_chunk * extra_saved,
                           mem_last + flight.last * per_chunk * extra_saved
                           + flight.head_last * mtp_saved_bytes(f, new, dense[D_LAYER_SAVED]
                                                                + moe_extra + attention_extra))
                   - maximum(mem_first, mem_last))
    # ZeRO-2 / 3 shard the layers' gradients / weights (Megatron-FSDP's units), not the
    # embedding's and output layer's (simulator.memory.states)
    outside_moe = stage - where(n_moe > 0, L / p * kernel_mlp, 0.0)
    layered = minimum(outside_moe, L / p * layer_params)
    shard_delta = (outside_moe * OPTIMIZER_BYTES_PER_PARAM * (1 / optimizer_shard - 1 / dense_shard)
                   - layered * where(level >= 3, 6.0, where(level >= 2, 4.0, 0.0)) * (1 - 1 / ranks))
    # 16-bit gradients / Adam moments; the main-gradient copy only where the optimizer moment
    # (the dense form's copy: fp16 only) outgrows the activations (physics.memory's moments)
    held, main = aux[A_HELD], aux[A_MAIN]
    # the routed experts hold the settings' bytes too, their sharded roles over expert_dp
    # (simulator.memory.parallel_terms), and keep the recipe's weight copies (q.experts)
    experts_stage = where(n_moe > 0, L / p * experts_layer, 0.0)
    held_experts = held - aux[A_HELD_SHARDED] * (1 / optimizer_shard
                                                 - 1 / where(sharded, expert_dp, 1.0))
    dense_copy = where(f[PRECISION] == _FP16, 4.0, 0.0) * stage / dense_shard
    act = dense[D_ACTIVATIONS]
    # the gradient dtype's bytes stay whole outside the layers under ZeRO-2 / 3 (`held` shards them)
    whole_grads = where(level >= 2, (held - aux[A_HELD_SHARDED] / optimizer_shard) * (ranks - 1)
                        * (outside_moe - layered), 0.0)
    states = (held * non_expert + held_experts * experts_stage + whole_grads
              + (maximum(act, dense_copy + main * stage) - maximum(act, dense_copy)))
    quantized = low & (element > 0)
    copy_bytes = where(quantized, element * copies, where(low, 1.0, 0.0))
    # ZeRO-3 caches the copies of its units in flight only (simulator.memory.states: two layers)
    units = layer_params * minimum(L / p, 2.0)  # Megatron-FSDP's two units (layers) in flight
    weight_copies = copy_bytes * where(level >= 3, units, non_expert + experts_stage)
    # the units in flight, whole: their gradients (ZeRO-2, 3) and weights (ZeRO-3)
    fsdp_whole = units * (where(level >= 2, grad_element, 0.0) + where(level >= 3, 2.0, 0.0))
    memory_delta = (moe_delta + saved_delta + shard_delta + weight_copies + states + fsdp_whole
                    + quantized_activations_delta(f, new, dense, element, quantized, active_ffn))
    # the uneven split's largest stage: its layers' states (per parameter as the stage's) and
    # their saved activations (surrogate.pipeline_terms)
    # what the routed experts' own bytes per parameter change against the dense form's MLP
    moe_held = (held + copy_bytes) * (non_expert - stage) + (held_experts + copy_bytes) * experts_stage
    per_param = (dense[D_WEIGHT_STATES] + shard_delta + (copy_bytes + held) * stage) / stage
    edge = per_param * maximum(stage - split.mean * layer_params, 0.0)  # the embedding's
    layer_act = flight.first / re.v * (dense[D_LAYER_SAVED] + extra_saved)  # a first-stage layer's
    memory_delta = memory_delta + uneven_memory_bytes(
        f, split, layer_params * per_param + (moe_delta + moe_held) / split.mean, layer_act, edge,
        new[CP])
    mem = aux[A_EST_MEMORY]
    memory = maximum(mem + memory_delta, 0.02 * mem)  # a guard: FSDP at dp 2,048 keeps ~5%
    forward = models[M_FORWARD]
    # in `EXTENDED_PHYSICS` order (tests/surrogate_tests/test_extended_kernel.py checks the names)
    return (n_moe, active_ffn, per_gpu_experts, models[M_PARAMS_ALL], models[M_PARAMS_ACTIVE],
            forward, 3 * forward * f[GLOBAL_BATCH_SIZE] * s / f[NUM_GPUS], expert_dp,
            comm.a2a_bytes, comm.a2a_s, comm.cp_bytes, comm.cp_s, speedup,
            low * tokens * (2 * h + active_ffn / t) * 3.0,
            where(level >= 3, 2 * 2.0 * stage, 0.0), level, moe_comm, cp_comm, lowp, graphs,
            overlap, dense[D_EST_LOG_TIME], dense[D_EST_LOG_MEMORY], memory_delta, peak_lp,
            lp_eff, tree, states, experts_s, gather_shift, time, memory)
