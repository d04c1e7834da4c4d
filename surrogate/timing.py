"""A roofline estimate of the iteration time of each row, vectorized (the surrogate's baseline).

Mirrors the exact simulator's analytic path in closed form: each kernel costs
max(max(FLOPs / (peak x GEMM efficiency), bytes / HBM bandwidth) + launch gap, host floor)
(simulator.costs.analytic, with its tile/wave/depth GEMM efficiency); collectives cost what
NCCL's algorithm and protocol choice costs (`collective_s`, surrogate.nccl_terms, as
simulator.network.collectives; a calibrated ring on GPUs with measured tables); the pipeline runs
m micro-batches of the slowest stage (the last, with the output layer and loss) plus the fill
and drain through the other stages, (p - 1) / v of a stage without the head (Narayanan et al.
2021, Sec. 2.2: bubble (p - 1) / (v m) where the stages are even); then data-parallel
gradient reduction (partly hidden when overlapped), tied-embedding sync and the Adam step
(simulator.timeline.tail). It is deliberately simple: the gradient-boosted model learns its residual.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from simulator.jit import njit
from simulator.job.enums import Framework
from simulator.job.framework import semantics
from surrogate.compiled_ops import Vec, ceil, floor, maximum, minimum, skips, where
from surrogate.gemm_shapes import gemm_dims
from surrogate.nccl_terms import crossing_ring_s, crossing_tree_s, domain_all_reduce_s, domain_ring_s
from surrogate.physics import Rows, fused_softmax

DT = 2.0  # fp16/bf16 bytes
ADAM_BYTES_PER_PARAM = 36.0  # simulator.timeline.tail
# Megatron-Core's passes over the whole gradient buffer (simulator.job.framework)
GRAD_BUFFER_PASSES = float(semantics(Framework.MEGATRON_LM).grad_buffer_passes)
# Megatron-Core's default gradient bucket (the records' framework; simulator.job.buckets): max(40M,
# 1M x dp) parameters, and only the first model chunk of a stage is bucketed
BUCKET_PARAMS, BUCKET_PARAMS_PER_DP = 40e6, 1e6


@njit(inline=True)
def grad_buckets(grad: Vec, d: Vec, v: Vec, element: Vec, overlap: Vec) -> Vec:
    """Collectives of a stage's data-parallel reduction of `grad` bytes: the first chunk's
    buckets of max(40M, 1M x dp) parameters of `element` bytes, one per later chunk; one call
    without overlap."""
    bucket = maximum(BUCKET_PARAMS, BUCKET_PARAMS_PER_DP * d) * element
    return where(overlap > 0, maximum(1, ceil(grad / v / bucket)) + v - 1, 1.0)


@njit(inline=True)
def kernel_s(r: Rows, flops: Vec, nbytes: Vec, eff: Vec = 1.0 / 16) -> Vec:
    """GPU time of one kernel: roofline plus launch gap (eff 1/16: CUDA cores, not tensor cores).

    Host dispatch is charged per window of kernels (`_window`), as in simulator.timeline.lowering."""
    return kernel_at_s(r, r.peak, flops, nbytes, eff)


@njit(inline=True)
def kernel_at_s(r: Rows, peak: Vec, flops: Vec, nbytes: Vec, eff: Vec) -> Vec:
    """`kernel_s` at the FLOP rate `peak` (a low-precision recipe's GEMMs)."""
    compute, memory = flops / (peak * eff), nbytes / r.hw.hbm_Bps
    return maximum(compute, memory) + r.hw.launch_s


@njit(inline=True)
def gemm_s(r: Rows, batch: Any, m: Vec, n: Vec, k: Vec, eff_f: Vec, eff_w: Vec) -> tuple[Vec, Vec]:
    """(forward, data- plus weight-gradient) GPU seconds of Y[m,n] = X[m,k] W[k,n], at the
    forward's and the weight gradient's GEMM efficiency (`surrogate.gemm_shapes.GemmEffs`).

    The three GEMMs move the same bytes; the data gradient (m x k, depth n) is given the forward's
    efficiency (same row count and tile grid up to a swap) to halve the cost of this feature."""
    return gemm_at_s(r, r.peak, batch, m, n, k, eff_f, eff_w)


@njit(inline=True)
def gemm_at_s(r: Rows, peak: Vec, batch: Any, m: Vec, n: Vec, k: Vec, eff_f: Vec,
              eff_w: Vec) -> tuple[Vec, Vec]:
    """`gemm_s` at the FLOP rate `peak`."""
    flops = 2.0 * batch * m * n * k
    traffic = batch * (m * k + k * n + m * n) * DT
    forward = kernel_at_s(r, peak, flops, traffic, eff_f)
    wgrad = kernel_at_s(r, peak, flops, traffic, eff_w)
    return forward, forward + wgrad


class ProjectionGemms(NamedTuple):
    """A layer's four projections (QKV, attention output, MLP up, MLP down) for one micro-batch:
    each one's forward seconds, and the four's data and weight gradients together."""

    qkv_f: Vec
    proj_f: Vec
    up_f: Vec
    down_f: Vec
    backward: Vec


@njit(inline=True)
def projection_gemms(r: Rows, peak: Vec) -> ProjectionGemms:
    """`ProjectionGemms` of a layer at the FLOP rate `peak` (`r.peak`: the layer's 16-bit one),
    each GEMM at its shape's efficiency (`r.eff`)."""
    d, e = gemm_dims(r.b, r.s, r.h, r.a, r.g, r.f, r.gated, r.V, r.t), r.eff
    qkv_f, qkv_b = gemm_at_s(r, peak, 1.0, d.T, d.qkv_out, r.h, e.qkv, e.qkv_w)
    proj_f, proj_b = gemm_at_s(r, peak, 1.0, d.T, r.h, d.heads * d.hd, e.proj, e.proj_w)
    up_f, up_b = gemm_at_s(r, peak, 1.0, d.T, d.up, r.h, e.up, e.up_w)
    down_f, down_b = gemm_at_s(r, peak, 1.0, d.T, r.h, r.f / r.t, e.down, e.down_w)
    return ProjectionGemms(qkv_f, proj_f, up_f, down_f, qkv_b + proj_b + up_b + down_b)


@njit(inline=True)
def _window(r: Rows, gpu: Vec, comm: Vec, kernels: Vec, collectives: Vec) -> Vec:
    """A window of kernels takes max(GPU + blocking comm, host dispatch) (simulator.timeline.lowering)."""
    host = kernels * r.hw.host_s + collectives * r.hw.coll_s
    return maximum(gpu + comm, host)


class Core(NamedTuple):
    fwd: Vec  # attention core forward seconds
    bwd: Vec
    unfused_fwd: Vec  # what selective recompute re-runs
    n_fwd: Vec  # kernels
    n_bwd: Vec


@njit(inline=True)
def _core(r: Rows, T: Vec, heads: Vec, hd: Vec) -> Core:
    """Attention core: unfused (two batched GEMMs, softmax, dropout) or flash attention."""
    bh = r.b * heads
    scores = bh * r.s * r.s
    # (bh, s, hd, s) is the shape of QK's weight gradient and AV's forward (`GemmEffs.s_hd_s`)
    qk_f, qk_b = gemm_s(r, bh, r.s, r.s, hd, r.eff.scores, r.eff.s_hd_s)
    av_f, av_b = gemm_s(r, bh, r.s, hd, r.s, r.eff.s_hd_s, r.eff.av_w)
    # fused softmax, or Megatron's five-kernel fp32 fallback (simulator.graph.blocks._softmax)
    fused = fused_softmax(r) > 0
    unfused_launches = 4 * r.hw.launch_s
    soft_f = where(fused, kernel_s(r, 5 * scores, 2 * scores * DT),
                      kernel_s(r, 5 * scores, 37 * scores) + unfused_launches) \
        + kernel_s(r, scores, 2.5 * scores * DT)
    soft_b = where(fused, kernel_s(r, 10 * scores, 3 * scores * DT),
                      kernel_s(r, 10 * scores, 41 * scores) + unfused_launches) \
        + kernel_s(r, 2 * scores, 2.5 * scores * DT)
    extra = where(fused, 0.0, 4.0)
    fl = 2.0 * bh * r.s * r.s * hd
    # at the fused kernel's own ceiling (simulator.costs.analytic: `attention_max_efficiency`)
    flash_f = kernel_s(r, fl, 4 * T * heads * hd * DT, r.eff.flash)
    flash_b = kernel_s(r, 2.5 * fl, 8 * T * heads * hd * DT, r.eff.flash)
    fa = r.flash > 0
    return Core(where(fa, flash_f, qk_f + av_f + soft_f), where(fa, flash_b, qk_b + av_b + soft_b),
                qk_f + av_f + soft_f, where(fa, 1.0, 4.0 + extra), where(fa, 1.0, 6.0 + extra))


class Layer(NamedTuple):
    compute: Vec  # GPU seconds of one layer's forward and backward, one micro-batch
    core: Vec  # of which the attention core
    recompute: Vec  # recomputed forward
    tp_comm: Vec  # blocking tensor-parallel collectives
    host_excess: Vec  # where host dispatch is slower than the GPU
    total: Vec
    host: Vec  # host dispatch seconds of the forward and backward windows
    tp_overlap_saving: Vec  # what TE's userbuffers would hide of tp_comm


@njit(inline=True)
def layer_times(r: Rows) -> Layer:
    """Seconds of one layer for one micro-batch: compute (fwd+bwd), recompute, tp comm, host."""
    T, hd = r.b * r.s, r.h / r.a
    heads, groups = r.a / r.t, r.g / r.t
    up = r.f / r.t * (1 + r.gated)
    gemms = projection_gemms(r, r.peak)
    qkv_f, proj_f, up_f, down_f = gemms.qkv_f, gemms.proj_f, gemms.up_f, gemms.down_f
    core = _core(r, T, heads, hd)
    sp_numel = where(r.sp > 0, T / r.t, T) * r.h
    bias = 1 - r.gated
    rope = T * (heads + groups) * hd
    point_f = (2 * kernel_s(r, 5 * sp_numel, 2 * sp_numel * DT) + 2 * kernel_s(r, sp_numel, 3 * sp_numel * DT)
               + kernel_s(r, 8 * T * up, 2 * T * up * DT) + r.gated * kernel_s(r, rope, 2 * rope * DT))
    point_b = (2 * kernel_s(r, 10 * sp_numel, 3 * sp_numel * DT)
               + 2 * kernel_s(r, 2 * sp_numel, 2.5 * sp_numel * DT)
               + kernel_s(r, 16 * T * up, 2.5 * T * up * DT))
    # parameter gradients: bias sums, norm weight reductions, and one accumulation kernel per
    # bias and norm tensor; the GEMM weights' gradients are added inside their weight-gradient
    # GEMMs (Megatron's gradient-accumulation fusion, every record's stack:
    # simulator.graph.dense._parameter_gradient_ops), not by a pass over the weights
    grad = where(r.bf16 > 0, 4.0, 2.0)
    small = bias * ((heads + 2 * groups) * hd + r.h + up + r.h) + 2 * (2 - r.gated) * r.h
    n_tensors = 4 * bias + 2 * (2 - r.gated)
    param_b = kernel_s(r, small, 3 * small * grad) + (n_tensors - 1) * r.hw.launch_s \
        + bias * 4 * kernel_s(r, T * r.h, T * r.h * DT) + 2 * kernel_s(r, 2 * sp_numel, 2 * sp_numel * DT)
    gpu_f = qkv_f + proj_f + up_f + down_f + core.fwd + point_f
    gpu_b = gemms.backward + core.bwd + point_b + param_b
    n_f = 10 + core.n_fwd + r.gated
    n_b = 8 + core.n_bwd + 5 + r.gated + bias * 4 + 2 + n_tensors
    # selective recompute re-runs the core attention (Megatron-Core's default module core_attn,
    # flash attention included: simulator.graph.dense._with_recompute)
    full, selective, fa = r.recompute == 2, r.recompute == 1, r.flash > 0
    gpu_r = where(full, gpu_f, where(selective, where(fa, core.fwd, core.unfused_fwd), 0.0))
    n_r = where(full, n_f, where(selective, where(fa, 1.0, 4.0), 0.0))
    calls = where(r.t > 1, where(r.sp > 0, 4.0, 2.0), 0.0)
    one = tp_comm_s(r, T * r.h * DT)  # per region: all-reduce, or all-gather + reduce-scatter
    tp_comm = _tp_comm(r, one, qkv_f, proj_f, up_f, down_f)
    comm_f = tp_comm.forward
    comm_b = tp_comm.backward + full * tp_comm.forward
    fwd = _window(r, gpu_f, comm_f, n_f, calls)
    bwd = _window(r, gpu_b + gpu_r, comm_b, n_b + n_r, calls * (1 + full))
    host = (n_f + n_b + n_r) * r.hw.host_s + calls * (2 + full) * r.hw.coll_s
    return Layer(gpu_f + gpu_b, core.fwd + core.bwd, gpu_r, comm_f + comm_b,
                 fwd + bwd - (gpu_f + gpu_b + gpu_r + comm_f + comm_b), fwd + bwd, host,
                 tp_comm.overlap_saving * (1 + full) + tp_comm.overlap_saving_b)


class TpComm(NamedTuple):
    forward: Vec  # seconds of a layer's tp collectives in its forward
    backward: Vec
    overlap_saving: Vec  # what TE's userbuffers (tp_comm_overlap) hide of `forward`
    overlap_saving_b: Vec  # ... of `backward`


@njit(inline=True)
def _beside(comm: Vec, gemm: Vec, slowdown: Vec) -> Vec:
    """What a collective overlapped with a GEMM costs: what outlasts it, or what the SMs it
    holds slow the GEMM (simulator.costs.blocks, simulator.timeline.contention)."""
    return maximum(slowdown * minimum(comm, gemm), comm - gemm)


@njit(inline=True)
def _tp_comm(r: Rows, one: Vec, qkv_f: Vec, proj_f: Vec, up_f: Vec, down_f: Vec) -> TpComm:
    """A layer's tp collectives, each direction blocking on two of `one` (an all-reduce of the
    layer's activation, or under sequence parallelism its all-gather plus reduce-scatter, half
    each), and what TE's userbuffers hide of them (simulator.graph.tp_comm: each forward
    all-gather and reduce-scatter overlaps its linear's GEMM, a row-parallel linear's backward
    all-gather its data-gradient GEMM -- `*_f`, the forward GEMM's time -- and costs what
    outlasts it, or what it slows the GEMM). Modelling which backward collectives Megatron
    always overlaps made the closed form's residual wider on three spaces (case study 1, Llama
    3 70B and 405B), so the backward stays blocking here and the trees learn the rest."""
    half = 0.5 * one
    sp = r.sp > 0
    slow = r.hw.comm_slowdown
    ub_f = (_beside(half, qkv_f, slow) + _beside(half, proj_f, slow) + _beside(half, up_f, slow)
            + _beside(half, down_f, slow))
    ub_b = _beside(half, proj_f, slow) + _beside(half, down_f, slow)
    return TpComm(2 * one, 2 * one, where(sp, 2 * one - ub_f, 0.0), where(sp, one - ub_b, 0.0))


@njit(inline=True)
def _ring_s(r: Rows, nbytes: Vec, n: Vec, per_node: Vec, sharing: Vec, calls: Vec = 1.0) -> Vec:
    """All-reduce of `nbytes` over `n` ranks with `per_node` on each node, split into `calls`
    collectives (simulator.network.algorithms.ring, NCCL's ring: inside a node a flat ring;
    across k nodes every rank moves 2(n-1)/n of the buffer and the slowest link is the node's
    network share, its NICs over the `sharing / per_node` groups that use them at once; each
    call takes 2(n-1) steps, 2(k-1) of them over the network). It charged a hierarchical
    reduction's 2(k-1)/k and 2(g-1) steps inside a node, 1.75-1.9x under the simulator's ring
    across two nodes."""
    k = ceil(n / maximum(per_node, 1))
    g = minimum(per_node, n)
    crosses = k > 1
    intra_bw = r.intra_Bps * r.hw.intra_eff
    flat = 2 * (n - 1) / maximum(n, 1) * nbytes / intra_bw + calls * 2 * (n - 1) * r.hw.intra_lat_s
    if not skips(r.hw.ll_max_Bps > 0):  # (a compiled row computes only the branch it takes)
        flat = where(r.hw.ll_max_Bps > 0, domain_all_reduce_s(r.hw, nbytes, n, intra_bw, calls), flat)
    if skips(crosses):
        return where(n > 1, flat, 0.0)
    local = 2 * (g - 1) / maximum(g, 1) * nbytes / intra_bw
    inter = 2 * (n - 1) / n * nbytes * (sharing / g) / (r.inter_Bps * r.hw.inter_eff)
    hier = maximum(local, inter) + calls * (2 * (n - k) * r.hw.intra_lat_s
                                               + 2 * (k - 1) * r.hw.inter_lat_s)
    return where(n > 1, where(crosses, hier, flat), 0.0)


@njit(inline=True)
def collective_s(r: Rows, nbytes: Vec, n: Vec, per_node: Vec, sharing: Vec, calls: Vec, scatter: Any) -> Vec:
    """`calls` all-reduces (`scatter` false) or reduce-scatters / all-gathers (true) of `nbytes`
    in all over `n` ranks, `per_node` on each node and its NICs shared by `sharing` GPUs'
    groups: at NCCL's algorithm and protocol (surrogate.nccl_terms, as the simulator chooses
    them: a ring, NVLS, the tree or PAT), or on a GPU with measured collective tables the
    calibrated ring `_ring_s` (a reduce-scatter half of its all-reduce). The calibrated ring
    charged every step Simple's latency and never the tree: B200's dp reductions over hundreds
    of ranks at 21.6 us per NVLink step."""
    if skips(r.hw.ll_max_Bps > 0):
        return _ring_s(r, nbytes, n, per_node, sharing, calls) * where(scatter, 0.5, 1.0)
    k = ceil(n / maximum(per_node, 1))
    g = minimum(per_node, n)
    intra = r.intra_Bps * r.hw.intra_eff
    inter = r.inter_Bps * r.hw.inter_eff * g / sharing
    steps = where(scatter, n - 1, 2 * (n - 1))
    net_steps = where(scatter, k - 1, 2 * (k - 1))
    reduces = np.logical_not(scatter)  # an all-reduce, which may take NVLS or the tree
    if skips(k > 1):  # a compiled row inside one domain
        inside = domain_ring_s(r.hw, nbytes, n, steps, intra, calls)
        if not skips(reduces):
            inside = where(scatter, inside, domain_all_reduce_s(r.hw, nbytes, n, intra, calls))
        return where(n > 1, inside, 0.0)
    across = crossing_ring_s(r.hw, nbytes, n, k, steps, net_steps, minimum(intra, inter), calls,
                             where(scatter, 0.0, 1.0))
    if not skips(reduces):
        tree = crossing_tree_s(r.hw, nbytes, n, k, intra, inter, calls)
        across = where(scatter, across, minimum(across, tree))
    if skips(k <= 1):  # a compiled row across domains
        return where(n > 1, across, 0.0)
    inside = where(scatter, domain_ring_s(r.hw, nbytes, n, steps, intra, calls),
                   domain_all_reduce_s(r.hw, nbytes, n, intra, calls))
    calibrated = _ring_s(r, nbytes, n, per_node, sharing, calls) * where(scatter, 0.5, 1.0)
    return where(n > 1, where(r.hw.ll_max_Bps > 0, where(k > 1, across, inside), calibrated), 0.0)


@njit(inline=True)
def tp_comm_s(r: Rows, nbytes: Vec) -> Vec:
    """One tp all-reduce (or all-gather + reduce-scatter pair under sequence parallelism)."""
    per_node = minimum(r.t, r.gpn)
    return _ring_s(r, nbytes, r.t, per_node, per_node, 1.0)


@njit(inline=True)
def dp_placement(r: Rows) -> Vec:
    """Data-parallel ranks per node (simulator.network.topology.dp_placement)."""
    return ranks_per_node(r, r.d)


@njit(inline=True)
def ranks_per_node(r: Rows, n: Vec) -> Vec:
    """Ranks per node of a group of `n` placed tp apart (data parallelism; with context
    parallelism, its dp x cp gradient group)."""
    return where(r.t < r.gpn, maximum(1, minimum(n, floor(r.gpn / r.t))), 1.0)


class Iteration(NamedTuple):
    total: Vec  # estimated seconds of one iteration
    pipeline: Vec
    stage_mb: Vec
    bubble: Vec
    layer: Vec
    layer_compute: Vec
    tp_comm: Vec
    recompute: Vec
    attention: Vec
    p2p: Vec
    host_excess: Vec
    layer_host: Vec
    tp_overlap_saving: Vec
    pp_comm: Vec
    dp_comm: Vec
    dp_exposed: Vec
    embedding_sync: Vec
    optimizer: Vec


@njit(inline=True)
def iteration(r: Rows, stage_params: Vec, vocab_p: Vec) -> Iteration:
    """Estimated seconds of one iteration and of its parts."""
    layer = layer_times(r)
    T = r.b * r.s
    m, p, v = r.m, r.p, r.v
    # `GemmEffs.logits` is of this shape: `vocab_p` is `gemm_shapes.padded_vocab`'s
    logits_f, logits_b = gemm_s(r, 1.0, T, vocab_p / r.t, r.h, r.eff.logits, r.eff.logits_w)
    logits = logits_f + logits_b
    # cross-entropy on fp32 logits: 38 bytes per logit forward, 14 backward (simulator.graph.blocks)
    n = T * vocab_p / r.t
    ce = kernel_s(r, 5 * n, 38 * n) + kernel_s(r, 2 * n, 14 * n) + 24 * r.hw.launch_s
    # the word-embedding gradient table: zeroed, (tied) summed, accumulated
    table = vocab_p * r.h / r.t
    emb_grad = kernel_s(r, table, table * (DT + 3 * DT + 3 * where(r.bf16 > 0, 4.0, 2.0)))
    head = _window(r, logits + ce + emb_grad, 0.0, 60.0, where(r.t > 1, 4.0, 0.0))
    stage = r.L / p * layer.total + head + 2 * v * r.hw.mb_s
    # m micro-batches of the busiest stage (the last: its layers and the head), and the fill and
    # drain through the others, which have no head: a pipeline of stages S_i runs
    # sum_i S_i + (m - 1) max_i S_i (the simulator's engine; uniform stages give Narayanan's
    # (m + (p - 1) / v) slots)
    fill = (p - 1) / v * (stage - head)
    pipeline = m * stage + fill
    bubble = fill / pipeline
    stride = r.t * r.d
    p2p_crosses = stride >= r.gpn
    p2p_bw = where(p2p_crosses, r.inter_Bps / r.gpn, r.intra_Bps)
    p2p = where(p > 1, T * r.h * DT / r.t / (p2p_bw * r.hw.p2p_eff) + r.hw.intra_lat_s, 0.0)
    pp_comm = 2 * (p - 1) * p2p * v
    grad = stage_params * where(r.bf16 > 0, 4.0, 2.0)
    per_node = dp_placement(r)
    buckets = grad_buckets(grad, r.d, v, where(r.bf16 > 0, 4.0, 2.0), r.overlap)
    reduce = collective_s(r, grad, r.d, per_node, r.gpn, buckets, r.dopt > 0)
    gather = collective_s(r, 2.0 * stage_params, r.d, per_node, r.gpn, 1.0, True) * r.dopt
    backward_mb = stage / v * (2 / 3)
    hidden = where(r.overlap > 0, minimum(reduce * 0.9, backward_mb), 0.0)
    # what outlasts the backward, or what the hidden part slows it (simulator.timeline.contention)
    dp_exposed = maximum(r.hw.comm_slowdown * hidden, reduce - hidden) + gather
    tied = (1 - r.gated) * (p > 1)
    emb_crosses = (p - 1) * stride >= r.gpn
    emb = tied * collective_s(r, vocab_p * r.h / r.t * where(r.bf16 > 0, 4.0, 2.0), 2.0,
                              where(emb_crosses, 1.0, 2.0), r.gpn, 1.0, False)
    shard = where(r.dopt > 0, r.d, 1.0)
    optimizer = kernel_s(r, 10 * stage_params / shard, ADAM_BYTES_PER_PARAM * stage_params / shard)
    # Megatron-Core's DDP zeroes the whole gradient buffer and takes its NaN-check norm each
    # iteration (simulator.timeline.tail.grad_buffer_op)
    optimizer = optimizer + GRAD_BUFFER_PASSES * (grad / r.hw.hbm_Bps + r.hw.launch_s)
    total = pipeline + pp_comm + dp_exposed + emb + optimizer
    return Iteration(total, pipeline, stage, bubble, layer.total, layer.compute, layer.tp_comm,
                     layer.recompute, layer.core, p2p, layer.host_excess, layer.host,
                     layer.tp_overlap_saving, pp_comm,
                     reduce + gather,
                     dp_exposed, emb, optimizer)
