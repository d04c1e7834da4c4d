"""The closed form's data-parallel corrections beyond the dense form (`surrogate.timing`): the
gradient reduction's dtype, context parallelism's dp x cp gradient group and optimizer shards,
NCCL's tree where it beats the ring, and the routed experts' reduction over expert_dp. Written
once over vectors indexed by `surrogate.slots`
like `surrogate.extended_terms`, which reads them (and `surrogate.extended`'s plain rows)."""

from __future__ import annotations

from typing import Any

from simulator.jit import njit
from simulator.job.enums import DataParallelSharding
from surrogate.compiled_ops import Vec, ceil, floor, log2, maximum, minimum, skips, where
from surrogate.nccl_terms import crossing_ring_s, crossing_tree_s, domain_all_reduce_s, domain_ring_s
from surrogate.physics import Hardware, Rows
from surrogate.pipeline_terms import layer_params_per_gpu
from surrogate.records import CHOICES
from surrogate.slots import (
    CP,
    D_DP_COMM,
    D_LAYER_COMPUTE,
    D_RECOMPUTE,
    D_STAGE_MB,
    D_STAGE_PARAMS,
    DISTRIBUTED_OPTIMIZER,
    DP,
    EP,
    EXPERT_TP,
    FFN_HIDDEN_SIZE,
    GLOBAL_BATCH_SIZE,
    GPUS_PER_NODE,
    GRAD_REDUCE_IN_FP32,
    INTER_NODE_BANDWIDTH_GBPS,
    INTRA_NODE_BANDWIDTH_GBPS,
    MICRO_BATCH_SIZE,
    NUM_EXPERTS,
    NUM_GPUS,
    NVLINK_DOMAIN,
    OVERLAP_GRAD_REDUCE,
    OVERLAP_PARAM_GATHER,
    PRECISION,
    TP,
    VIRTUAL_STAGES,
)
from surrogate.timing import (
    ADAM_BYTES_PER_PARAM,
    GRAD_BUFFER_PASSES,
    collective_s,
    grad_buckets,
    kernel_s,
    ranks_per_node,
)

# codes the compiled formulas compare with (numba reads module constants, not dict lookups)
_GRAD_16 = float(CHOICES["grad_reduce_in_fp32"].index("false"))
_GRAD_32 = float(CHOICES["grad_reduce_in_fp32"].index("true"))
_OPTIM_LEVEL = float(DataParallelSharding.OPTIM.level)
_OPTIM_GRADS_LEVEL = float(DataParallelSharding.OPTIM_GRADS.level)
_OPTIM_GRADS_PARAMS_LEVEL = float(DataParallelSharding.OPTIM_GRADS_PARAMS.level)


@njit(inline=True)
def _dense_grad_bytes(f: Any) -> Vec:
    """Bytes per gradient the dense form reduces: fp32 for 16-bit training but fp16's
    (surrogate.timing.iteration)."""
    return where(f[PRECISION] > 0, 4.0, 2.0)


@njit(inline=True)
def grad_dtype_s(f: Any, new: Any, re: Rows, stage: Vec) -> tuple[Vec, Vec]:
    """(bytes per reduced gradient, seconds the gradient buffer's passes take beyond the dense
    form's) of the `grad_reduce_in_fp32` column: the dense form keeps 16-bit training's
    gradients in fp32 (Megatron's default), `false` keeps them 16-bit (the simulator reduces
    and accumulates in the buffer's dtype), `true` fp32 also under fp16. The passes: the
    optimizer's zeroing and NaN check over the buffer, and each micro-batch's accumulation of
    the word embedding's gradient into it (not fused into a GEMM: 3 passes in the gradient's
    dtype, surrogate.timing.iteration's `emb_grad`); `stage`: the stage's parameters."""
    default = _dense_grad_bytes(f)
    code = new[GRAD_REDUCE_IN_FP32]
    element = where(code == _GRAD_32, 4.0, where(code == _GRAD_16, 2.0, default))
    m = f[GLOBAL_BATCH_SIZE] / (f[DP] * f[MICRO_BATCH_SIZE])
    table = re.V * re.h / re.t
    buffer_s = (GRAD_BUFFER_PASSES * stage + 3 * m * table) * (element - default) / re.hw.hbm_Bps
    return element, buffer_s


@njit(inline=True)
def _dp_comm_s(re: Rows, stage: Vec, element: Vec, ranks: Vec, sharded: Vec, overlap: Vec,
                bucketed_gather: Any) -> Vec:
    """The dense form's data-parallel communication (surrogate.timing.iteration: the gradient
    reduction in buckets, the distributed optimizer's reduce-scatter and parameter gather) over
    `ranks` placed tp apart, of `element` bytes per gradient; `sharded`: the optimizer is;
    `bucketed_gather`: the parameters are gathered in the gradient buckets (overlap_param_gather:
    each its own collective, as the simulator's; one call otherwise)."""
    per_node = ranks_per_node(re, ranks)
    grad = stage * element
    buckets = grad_buckets(grad, re.d, re.v, element, overlap)  # sized by dp without cp
    reduce = collective_s(re, grad, ranks, per_node, re.gpn, buckets, sharded)
    gathers = where(bucketed_gather, buckets, 1.0)
    gather = collective_s(re, 2.0 * stage, ranks, per_node, re.gpn, gathers, True) * where(sharded, 1.0, 0.0)
    return reduce + gather


@njit(inline=True)
def dp_correction(f: Any, new: Any, dense: Any, hw: Hardware, re: Rows, element: Vec,
                  reduced: Vec) -> tuple[Vec, Vec]:
    """Seconds to add to the dense estimate's data-parallel exposure and optimizer step for what
    the dense form's ring over dp leaves out:

    - context parallelism: Megatron reduces the dense gradients over dp x cp ranks (every cp rank
      saw part of each sequence; simulator.timeline.grad_sync), which the effective rows' dense
      form (cp folded into the batch) did not; the distributed optimizer shards its step over
      them too;
    - a MoE row's routed experts: the dense form reduces and steps its dense-equivalent MLP over
      dp, where the simulator reduces the `reduced` parameters outside the routed experts over
      dp (the experts over expert_dp: `expert_tail_s`). A DeepSeek-V3 on 1,024 B200s (dp 512 x
      cp 2) reduced 37.5B parameters per GPU where 17B are the dense ones: 1.3 s of the closed
      form's 2.0 s of exposed reduction, against the simulator's 0.6 s;
    - the gradient dtype (`grad_dtype_s`: `element` bytes per gradient, not the dense form's);
    - NCCL's tree (`dp_tree_correction`).

    Also the dense gradients' reduction seconds (`dp_tree_correction`). `f`, `new`, `dense`:
    `surrogate.slots`; `re`: the effective rows the dense form ran on."""
    ranks = f[DP] * new[CP]
    overlap = f[OVERLAP_GRAD_REDUCE] > 0
    default = _dense_grad_bytes(f)
    dopt = re.dopt > 0
    stage = dense[D_STAGE_PARAMS]
    extra = (_dp_comm_s(re, reduced, element, ranks, dopt, overlap, new[OVERLAP_PARAM_GATHER] > 0)
             - _dp_comm_s(re, stage, default, re.d, dopt, overlap, False))
    # the optimizer's step on `reduced` / (dp x cp) parameters (the distributed optimizer's
    # shard), not the dense form's stage / dp; 0 to the bit where both are the same
    shard, dense_shard = where(dopt, ranks, 1.0), where(dopt, re.d, 1.0)
    step = (kernel_s(re, 10 * reduced / shard, ADAM_BYTES_PER_PARAM * reduced / shard)
            - kernel_s(re, 10 * stage / dense_shard, ADAM_BYTES_PER_PARAM * stage / dense_shard))
    correction, comm = dp_tree_correction(f, dense, hw, element, ranks, extra)
    return correction + step, comm


@njit
def plain_tree_correction(f: Any, dense: Any, hw: Hardware) -> Vec:
    """`dp_tree_correction` of plain rows (the dense form's gradient bytes, over dp, nothing
    beyond the dense form's ring), compiled as one call: the one-row path pays numba's dispatch
    per argument."""
    return dp_tree_correction(f, dense, hw, _dense_grad_bytes(f), f[DP], 0.0)[0]


@njit(inline=True)
def dp_tree_correction(f: Any, dense: Any, hw: Hardware, element: Vec, ranks: Vec,
                       extra: Vec) -> tuple[Vec, Vec]:
    """Seconds to add to the dense estimate because NCCL reduces a bucket over nodes with the
    double binary tree where that is faster than the ring (simulator.network.algorithms.tree:
    2 ((g - 1) NVLink + log2(k) network) hops instead of the ring's 2 (n - 1) steps, 2 (k - 1)
    of them over the network, at 0.92 of the ring's bandwidth), which the dense form's ring
    (`surrogate.timing._ring_s`) does not choose: per bucket min(ring,
    tree) - ring, on the reduction of `element` bytes per gradient over `ranks` placed tp apart
    (dp x cp), less what overlapping still hides; `extra`: seconds the reduction takes beyond
    the dense form's before the tree (`dp_correction`; 0 for a plain row). `f`, `dense`:
    `surrogate.slots`. Also the reduction's seconds with both (what the routed experts'
    reduction queues behind: `expert_tail_s`)."""
    t, d, v = f[TP], f[DP], f[VIRTUAL_STAGES]
    gpn = maximum(minimum(f[GPUS_PER_NODE], f[NUM_GPUS]), 1.0)
    per_node = where(t < gpn, maximum(1.0, minimum(ranks, floor(gpn / t))), 1.0)
    k = ceil(ranks / per_node)
    grad = dense[D_STAGE_PARAMS] * element
    overlap = f[OVERLAP_GRAD_REDUCE] > 0
    buckets = grad_buckets(grad, d, v, element, overlap)
    per_call = grad / buckets
    inter = 2 * (ranks - 1) / ranks * per_call * (gpn / per_node) / (
        f[INTER_NODE_BANDWIDTH_GBPS] * 1e9 / 8 * hw.inter_eff)  # the ring's (timing._ring_s)
    ring_hops = 2 * (ranks - k) * hw.intra_lat_s + 2 * (k - 1) * hw.inter_lat_s
    tree_hops = 2 * ((per_node - 1) * hw.intra_lat_s + floor(log2(maximum(k, 1.0))) * hw.inter_lat_s)
    saving = maximum(0.0, (inter + ring_hops) - (inter / 0.92 + tree_hops))
    # (where NCCL's own choice prices the reduction, surrogate.timing.collective_s, it has the tree)
    saving = where((k > 1) & (hw.ll_max_Bps == 0),
                   saving * buckets * where(f[DISTRIBUTED_OPTIMIZER] > 0, 0.5, 1.0), 0.0)
    old = dense[D_DP_COMM]
    new = maximum(old - saving + extra, 0.0)
    backward = dense[D_STAGE_MB] / v * (2 / 3)
    hidden_old = where(overlap, minimum(old * 0.9, backward), 0.0)
    hidden_new = where(overlap, minimum(new * 0.9, backward), 0.0)
    slow = hw.comm_slowdown  # the dense form's exposure (surrogate.timing.iteration)
    return (maximum(slow * hidden_new, new - hidden_new)
            - maximum(slow * hidden_old, old - hidden_old)), new


@njit(inline=True)
def expert_tail_s(f: Any, new: Any, experts_per_gpu: Vec, expert_dp: Vec, sharding_level: Vec,
                  dense: Any, hw: Hardware, dense_comm: Vec) -> tuple[Vec, Vec, Vec]:
    """Seconds per iteration that the routed experts' gradients and optimizer step add (the
    dense form reduces and steps the dense-equivalent MLP only): the experts' gradients reduced
    over expert_dp ranks (simulator.timeline.grad_sync: all-reduce, or with the distributed
    optimizer reduce-scatter and the parameters' all-gather), a ring on the ranks' own links
    (the expert grid expert_tp x ep x expert_dp: the group strided by expert_tp x ep), hidden
    under the last backward as the dense form hides its own; then Adam on the GPU's shard
    (36 bytes of traffic per parameter)."""
    if skips(new[NUM_EXPERTS] > 0):
        return 0.0, 0.0, 0.0
    n = expert_dp
    stride = new[EXPERT_TP] * new[EP]
    domain = maximum(new[NVLINK_DOMAIN], 1.0)
    gpn = maximum(minimum(f[GPUS_PER_NODE], f[NUM_GPUS]), 1.0)
    inside = stride * n <= domain
    # NCCL's rings cross each domain boundary through the NICs of the group's g ranks there
    g = minimum(maximum(floor(domain / stride), 1.0), maximum(n, 1.0))
    intra = f[INTRA_NODE_BANDWIDTH_GBPS] * 1e9 * hw.intra_eff
    nic = f[INTER_NODE_BANDWIDTH_GBPS] * 1e9 / 8 / gpn * hw.inter_eff
    link = where(inside, intra, minimum(intra, g * nic))
    latency = where(inside, hw.intra_lat_s, hw.inter_lat_s)
    sixteen = new[GRAD_REDUCE_IN_FP32] == _GRAD_16
    element = where(sixteen | (f[PRECISION] == 0), 2.0, 4.0)
    grad = experts_per_gpu * element
    sharded = sharding_level >= _OPTIM_LEVEL
    ring = (n - 1) / maximum(n, 1.0) / link
    calibrated = (where(sharded, grad * ring + experts_per_gpu * 2.0 * ring, 2 * grad * ring)
                  + 2 * (n - 1) * latency)
    # each gradient bucket's expert part is its own collective over expert_dp (simulator.
    # timeline.grad_sync.reduction_s), every one paying NCCL's ring latency: per-step latencies
    # over hundreds of ranks (nccl_terms.crossing_ring_s), where one call's was charged until
    # schema 24
    calls = grad_buckets((dense[D_STAGE_PARAMS] + experts_per_gpu) * element, f[DP],
                         f[VIRTUAL_STAGES], element, f[OVERLAP_GRAD_REDUCE])
    k = -floor(-n / g)
    steps = where(sharded, n - 1, 2 * (n - 1))
    net_steps = where(sharded, k - 1, 2 * (k - 1))
    gather = where(sharded, 2.0 * experts_per_gpu, 0.0)
    # an all-reduce where the tree (or NVLS) beats the ring, as NCCL chooses
    group = (n, k, steps, net_steps, inside, intra, link)
    ring = _group_ring_s(hw, grad, group, calls, where(sharded, 0.0, 1.0))
    all_reduce = where(inside, domain_all_reduce_s(hw, grad, n, intra, calls),
                       minimum(ring, crossing_tree_s(hw, grad, n, k, intra, g * nic, calls)))
    # the parameters' all-gather, one call; none under overlap_param_gather, which moves it to
    # the next forwards (simulator.timeline.param_gather: param_gather_terms.param_gather_shift_s
    # charges the waits; charged here in the buckets as well until schema 25, twice in all)
    gather_s = where(new[OVERLAP_PARAM_GATHER] > 0, 0.0, _group_ring_s(hw, gather, group, 1.0, 0.0))
    nccl = where(sharded, ring + gather_s, all_reduce)
    reduce = where(n > 1, where(hw.ll_max_Bps > 0, nccl, calibrated), 0.0)
    # hidden under the last backward what the dense gradients' reduction (`dense_comm`, the
    # same buckets on the same stream: simulator.timeline.tail._overlapped_parallel) leaves of
    # it; each hid under the whole backward until schema 26 (a Qwen3-235B on 16 H100s: 0.03 s of
    # its 0.19 s tail)
    backward = dense[D_STAGE_MB] / f[VIRTUAL_STAGES] * (2 / 3)
    overlap = f[OVERLAP_GRAD_REDUCE] > 0
    left = maximum(backward - where(overlap, minimum(0.9 * dense_comm, backward), 0.0), 0.0)
    hidden = where(overlap, minimum(0.9 * reduce, left), 0.0)
    exposed = maximum(hw.comm_slowdown * hidden, reduce - hidden)  # as the dense form's
    shard = where(sharded, n, 1.0)
    optimizer = experts_per_gpu / shard * 36.0 / hw.hbm_Bps
    # the DDP's zeroing and NaN-check passes over the experts' gradient buffer
    # (simulator.timeline.tail.grad_buffer_op; not under Megatron-FSDP's sharded buffers)
    optimizer = optimizer + where(sharding_level <= _OPTIM_LEVEL,
                                  GRAD_BUFFER_PASSES * grad / hw.hbm_Bps, 0.0)
    moe = (new[NUM_EXPERTS] > 0) & (n > 1) & (hw.ll_max_Bps > 0) & sharded
    gather_one = _group_ring_s(hw, gather, group, 1.0, 0.0)
    gather_bucket = _group_ring_s(hw, gather, group, calls, 0.0) / calls
    return (where(new[NUM_EXPERTS] > 0, exposed + optimizer, 0.0), where(moe, gather_one, 0.0),
            where(moe, gather_bucket, 0.0))


@njit(inline=True)
def _group_ring_s(hw: Hardware, nbytes: Vec, group: tuple[Vec, Vec, Vec, Vec, Any, Vec, Vec], calls: Vec,
                  all_reduce: Vec) -> Vec:
    """`calls` ring collectives of `nbytes` in all over the expert_dp group `group` = (ranks,
    domains, steps, network steps, inside one domain, NVLink bandwidth, slowest link)."""
    n, k, steps, net_steps, inside, intra, link = group
    return where(inside, domain_ring_s(hw, nbytes, n, steps, intra, calls),
                 crossing_ring_s(hw, nbytes, n, k, steps, net_steps, link, calls, all_reduce))


@njit(inline=True)
def _beyond(comm: Vec, busy: Vec, slowdown: Vec) -> Vec:
    """What collectives on their own stream add to a direction's compute `busy`: what outlasts
    it, or what they slow it (simulator.costs.blocks._exposed_s, FSDP's `OVERLAP_BLOCK`)."""
    return maximum(slowdown * minimum(comm, busy), comm - busy)


@njit(inline=True)
def fsdp_layer_s(f: Any, re: Rows, dense: Any, hw: Hardware, level: Vec, grad_element: Vec,
                 cp: Vec, extra_s: Vec, saving_s: Vec) -> Vec:
    """Seconds per layer and micro-batch that Megatron-FSDP's collectives of the layer (its FSDP
    unit: simulator.graph.fsdp) add: ZeRO-2 (`optim_grads`) reduce-scatters the layer's
    gradients after its backward, ZeRO-3 (`optim_grads_params`) also all-gathers its 16-bit
    parameters before its forward and again before its backward, each over dp x cp (the
    data-parallel group with context parallelism, `cp`: the rows' cp) at NCCL's
    algorithm (surrogate.timing.collective_s) on a stream of its own, exposed beyond the
    direction's compute (the backward's with its recompute), the layer's as it runs: the dense
    form's 16-bit compute, plus `extra_s` (what the true attention and ring attention's steps
    add), less `saving_s` (what a low-precision recipe's GEMMs save: an FP4 layer on a B200 hides
    a quarter of what its bf16 form would). Over thousands of ranks these latency-bound rings
    dominate a small model's iteration (GB200, dp 4,096: 5x the dense form)."""
    zero2 = level >= _OPTIM_GRADS_LEVEL
    if skips(zero2):
        return 0.0
    zero3 = level >= _OPTIM_GRADS_PARAMS_LEVEL
    d = f[DP] * cp
    params = layer_params_per_gpu(f, f[FFN_HIDDEN_SIZE])
    per_node = ranks_per_node(re, d)
    gather = where(zero3, collective_s(re, 2.0 * params, d, per_node, re.gpn, 1.0, True), 0.0)
    scatter = collective_s(re, grad_element * params, d, per_node, re.gpn, 1.0, True)
    whole = dense[D_LAYER_COMPUTE] + dense[D_RECOMPUTE] + extra_s
    scale = maximum(whole - saving_s, 0.0) / maximum(whole, 1e-30)  # the recipe's share, evenly
    compute = (dense[D_LAYER_COMPUTE] + extra_s) * scale
    slow = hw.comm_slowdown
    exposed = (_beyond(gather, compute / 3, slow)
               + _beyond(gather + scatter, 2 * compute / 3 + dense[D_RECOMPUTE] * scale, slow))
    return where(zero2 & (d > 1), exposed, 0.0)
