"""The closed form's data-parallel corrections beyond the dense form (`surrogate.timing`): the
gradient reduction's dtype, context parallelism's dp x cp gradient group and optimizer shards,
and NCCL's tree where it beats the ring. Written once over vectors indexed by `surrogate.slots`
like `surrogate.extended_terms`, which reads them (and `surrogate.extended`'s plain rows)."""

from __future__ import annotations

from typing import Any

from simulator.jit import njit
from surrogate.physics import Hardware, Rows, Vec, ceil, floor, log2, maximum, minimum, where
from surrogate.records import CHOICES
from surrogate.slots import (
    CP,
    D_DP_COMM,
    D_STAGE_MB,
    D_STAGE_PARAMS,
    DISTRIBUTED_OPTIMIZER,
    DP,
    GLOBAL_BATCH_SIZE,
    GPUS_PER_NODE,
    GRAD_REDUCE_IN_FP32,
    INTER_NODE_BANDWIDTH_GBPS,
    MICRO_BATCH_SIZE,
    NUM_GPUS,
    OVERLAP_GRAD_REDUCE,
    PRECISION,
    TP,
    VIRTUAL_STAGES,
)
from surrogate.timing import (
    ADAM_BYTES_PER_PARAM,
    GRAD_BUFFER_PASSES,
    _ring_s,
    grad_buckets,
    kernel_s,
    ranks_per_node,
)

# codes the compiled formulas compare with (numba reads module constants, not dict lookups)
_GRAD_16 = float(CHOICES["grad_reduce_in_fp32"].index("false"))
_GRAD_32 = float(CHOICES["grad_reduce_in_fp32"].index("true"))


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
def _dp_comm_s(re: Rows, stage: Vec, element: Vec, ranks: Vec, sharded: Vec, overlap: Vec) -> Vec:
    """The dense form's data-parallel communication (surrogate.timing.iteration: the gradient
    reduction in buckets, the distributed optimizer's reduce-scatter and parameter gather) over
    `ranks` placed tp apart, of `element` bytes per gradient; `sharded`: the optimizer is."""
    per_node = ranks_per_node(re, ranks)
    grad = stage * element
    buckets = grad_buckets(grad, re.d, re.v, element, overlap)  # sized by dp without cp
    reduce = _ring_s(re, grad, ranks, per_node, re.gpn, buckets) * where(sharded, 0.5, 1.0)
    gather = _ring_s(re, 2.0 * stage, ranks, per_node, re.gpn, 1.0) * 0.5 * where(sharded, 1.0, 0.0)
    return reduce + gather


@njit(inline=True)
def dp_correction(f: Any, new: Any, dense: Any, hw: Hardware, re: Rows, element: Vec) -> Vec:
    """Seconds to add to the dense estimate's data-parallel exposure and optimizer step for what
    the dense form's ring over dp leaves out:

    - context parallelism: Megatron reduces the dense gradients over dp x cp ranks (every cp rank
      saw part of each sequence; simulator.timeline.grad_sync), which the effective rows' dense
      form (cp folded into the batch) did not; the distributed optimizer shards its step over
      them too;
    - the gradient dtype (`grad_dtype_s`: `element` bytes per gradient, not the dense form's);
    - NCCL's tree (`dp_tree_correction`).

    `f`, `new`, `dense`: `surrogate.slots`; `re`: the effective rows the dense form ran on."""
    ranks = f[DP] * new[CP]
    overlap = f[OVERLAP_GRAD_REDUCE] > 0
    default = _dense_grad_bytes(f)
    dopt = re.dopt > 0
    stage = dense[D_STAGE_PARAMS]
    extra = (_dp_comm_s(re, stage, element, ranks, dopt, overlap)
             - _dp_comm_s(re, stage, default, re.d, dopt, overlap))
    # the distributed optimizer's step on 1 / (dp x cp) of the stage's parameters, not 1 / dp
    step = (kernel_s(re, 10 * stage / ranks, ADAM_BYTES_PER_PARAM * stage / ranks)
            - kernel_s(re, 10 * stage / re.d, ADAM_BYTES_PER_PARAM * stage / re.d))
    return (dp_tree_correction(f, dense, hw, element, ranks, extra)
            + where(dopt & (new[CP] > 1), step, 0.0))


@njit
def plain_tree_correction(f: Any, dense: Any, hw: Hardware) -> Vec:
    """`dp_tree_correction` of plain rows (the dense form's gradient bytes, over dp, nothing
    beyond the dense form's ring), compiled as one call: the one-row path pays numba's dispatch
    per argument."""
    return dp_tree_correction(f, dense, hw, _dense_grad_bytes(f), f[DP], 0.0)


@njit(inline=True)
def dp_tree_correction(f: Any, dense: Any, hw: Hardware, element: Vec, ranks: Vec,
                       extra: Vec) -> Vec:
    """Seconds to add to the dense estimate because NCCL reduces a bucket over nodes with the
    double binary tree where that is faster than the ring (simulator.network.algorithms.tree:
    2 ((g - 1) NVLink + log2(k) network) hops instead of the ring's 2 (n - 1) steps, 2 (k - 1)
    of them over the network, at 0.92 of the ring's bandwidth), which the dense form's ring
    (`surrogate.timing._ring_s`) does not choose: per bucket min(ring,
    tree) - ring, on the reduction of `element` bytes per gradient over `ranks` placed tp apart
    (dp x cp), less what overlapping still hides; `extra`: seconds the reduction takes beyond
    the dense form's before the tree (`dp_correction`; 0 for a plain row). `f`, `dense`:
    `surrogate.slots`."""
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
    saving = where(k > 1, saving * buckets * where(f[DISTRIBUTED_OPTIMIZER] > 0, 0.5, 1.0), 0.0)
    old = dense[D_DP_COMM]
    new = maximum(old - saving + extra, 0.0)
    backward = dense[D_STAGE_MB] / v * (2 / 3)
    hidden_old = where(overlap, minimum(old * 0.9, backward), 0.0)
    hidden_new = where(overlap, minimum(new * 0.9, backward), 0.0)
    slow = hw.comm_slowdown  # the dense form's exposure (surrogate.timing.iteration)
    return (maximum(slow * hidden_new, new - hidden_new)
            - maximum(slow * hidden_old, old - hidden_old))
