"""A roofline estimate of the iteration time of each row, vectorized (the surrogate's baseline).

Mirrors the exact simulator's analytic path in closed form: each kernel costs
max(max(FLOPs / (peak x GEMM efficiency), bytes / HBM bandwidth) + launch gap, host floor)
(simulator.costs, with its tile/wave/depth GEMM efficiency); tensor-parallel collectives are ring
all-reduces on NVLink (simulator.network); the pipeline runs (m + (p - 1) / v) micro-batch slots of
the slowest stage (Narayanan et al. 2021, Sec. 2.2: bubble (p - 1) / (v m)); then data-parallel
gradient reduction (partly hidden when overlapped), tied-embedding sync and the Adam step
(simulator.tail). It is deliberately simple: the gradient-boosted model learns its residual.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.costs import gemm_efficiency as gemm_efficiency_scalar
from simulator.costs import gemm_efficiency_array
from surrogate.physics import Rows, fused_softmax

DT = 2.0  # fp16/bf16 bytes
ADAM_BYTES_PER_PARAM = 36.0  # simulator.tail
BUCKET_BYTES = 25e6  # ParallelPlan.bucket_size_mb default


def gemm_efficiency(r: Rows, batch: Any, m: Any, n: Any, k: Any) -> Any:
    """Tensor-core efficiency of batch x Y[m,n] = X[m,k] W[k,n]: the simulator's own tile / wave /
    depth model (`simulator.costs.gemm_efficiency`, vectorized as `gemm_efficiency_array` for
    tables; one model of the physics, not a copy)."""
    hw = r.hw
    if r.xp is np:
        return gemm_efficiency_array(batch, m, n, k, hw["num_sms"], hw["gemm_max"], hw["k_half"])
    return gemm_efficiency_scalar(batch, m, n, k, hw["num_sms"], hw["gemm_max"], hw["k_half"])


def kernel_s(r: Rows, flops: np.ndarray | float, nbytes: np.ndarray | float,
             eff: np.ndarray | float = 1.0 / 16) -> np.ndarray:
    """GPU time of one kernel: roofline plus launch gap (eff 1/16: CUDA cores, not tensor cores).

    Host dispatch is charged per window of kernels (`_window`), as in simulator.lowering."""
    compute, memory = flops / (r.peak * eff), nbytes / r.hw["hbm_Bps"]
    return r.xp.maximum(compute, memory) + r.hw["launch_s"]


def gemm_s(r: Rows, batch: Any, m: np.ndarray, n: np.ndarray, k: np.ndarray,
           eff: tuple[Any, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(forward, data- plus weight-gradient) GPU seconds of Y[m,n] = X[m,k] W[k,n].

    The three GEMMs move the same bytes; the data gradient (m x k, depth n) is given the forward's
    efficiency (same row count and tile grid up to a swap) to halve the cost of this feature.
    `eff`: the (forward, weight-gradient) efficiencies when the caller already has them."""
    batch = batch * r.xp.ones_like(m)
    flops = 2.0 * batch * m * n * k
    traffic = batch * (m * k + k * n + m * n) * DT
    if eff is None:
        eff = gemm_efficiency(r, batch, m, n, k), gemm_efficiency(r, batch, n, k, m)
    forward = kernel_s(r, flops, traffic, eff[0])
    wgrad = kernel_s(r, flops, traffic, eff[1])
    return forward, forward + wgrad


def _window(r: Rows, gpu: np.ndarray, comm: np.ndarray, kernels: np.ndarray,
            collectives: np.ndarray) -> np.ndarray:
    """A window of kernels takes max(GPU + blocking comm, host dispatch) (simulator.lowering)."""
    host = kernels * r.hw["host_s"] + collectives * r.hw["coll_s"]
    return r.xp.maximum(gpu + comm, host)


def _core(r: Rows, T: np.ndarray, heads: np.ndarray, hd: np.ndarray) -> dict[str, np.ndarray]:
    """Attention core: unfused (two batched GEMMs, softmax, dropout) or flash attention."""
    bh = r.b * heads
    scores = bh * r.s * r.s
    # (bh, s, hd, s) is the shape of QK's weight gradient, AV's forward and flash attention's
    # GEMMs: its efficiency is computed once
    s_hd_s = gemm_efficiency(r, bh, r.s, hd, r.s)
    qk_f, qk_b = gemm_s(r, bh, r.s, r.s, hd, (gemm_efficiency(r, bh, r.s, r.s, hd), s_hd_s))
    av_f, av_b = gemm_s(r, bh, r.s, hd, r.s, (s_hd_s, gemm_efficiency(r, bh, hd, r.s, r.s)))
    # fused softmax, or Megatron's five-kernel fp32 fallback (simulator.graph._softmax)
    fused = fused_softmax(r) > 0
    unfused_launches = 4 * r.hw["launch_s"]
    soft_f = r.xp.where(fused, kernel_s(r, 5 * scores, 2 * scores * DT),
                        kernel_s(r, 5 * scores, 37 * scores) + unfused_launches) \
        + kernel_s(r, scores, 2.5 * scores * DT)
    soft_b = r.xp.where(fused, kernel_s(r, 10 * scores, 3 * scores * DT),
                        kernel_s(r, 10 * scores, 41 * scores) + unfused_launches) \
        + kernel_s(r, 2 * scores, 2.5 * scores * DT)
    extra = r.xp.where(fused, 0.0, 4.0)
    fl = 2.0 * bh * r.s * r.s * hd
    flash_f = kernel_s(r, fl, 4 * T * heads * hd * DT, s_hd_s)
    flash_b = kernel_s(r, 2.5 * fl, 8 * T * heads * hd * DT, s_hd_s)
    fa = r.flash > 0
    return {"fwd": r.xp.where(fa, flash_f, qk_f + av_f + soft_f),
            "bwd": r.xp.where(fa, flash_b, qk_b + av_b + soft_b),
            "unfused_fwd": qk_f + av_f + soft_f,
            "n_fwd": r.xp.where(fa, 1.0, 4.0 + extra), "n_bwd": r.xp.where(fa, 1.0, 6.0 + extra)}


def layer_times(r: Rows) -> dict[str, np.ndarray]:
    """Seconds of one layer for one micro-batch: compute (fwd+bwd), recompute, tp comm, host."""
    T, hd = r.b * r.s, r.h / r.a
    heads, groups = r.a / r.t, r.g / r.t
    up = r.f / r.t * (1 + r.gated)
    gemms = [gemm_s(r, 1.0, T, (heads + 2 * groups) * hd, r.h), gemm_s(r, 1.0, T, r.h, heads * hd),
             gemm_s(r, 1.0, T, up, r.h), gemm_s(r, 1.0, T, r.h, r.f / r.t)]
    core = _core(r, T, heads, hd)
    sp_numel = r.xp.where(r.sp > 0, T / r.t, T) * r.h
    bias = 1 - r.gated
    rope = T * (heads + groups) * hd
    point_f = (2 * kernel_s(r, 5 * sp_numel, 2 * sp_numel * DT) + 2 * kernel_s(r, sp_numel, 3 * sp_numel * DT)
               + kernel_s(r, 8 * T * up, 2 * T * up * DT) + r.gated * kernel_s(r, rope, 2 * rope * DT))
    point_b = (2 * kernel_s(r, 10 * sp_numel, 3 * sp_numel * DT)
               + 2 * kernel_s(r, 2 * sp_numel, 2.5 * sp_numel * DT)
               + kernel_s(r, 16 * T * up, 2.5 * T * up * DT))
    # parameter gradients: bias sums, norm weight reductions, one accumulation kernel per tensor
    grad = r.xp.where(r.bf16 > 0, 4.0, 2.0)
    weights = (r.h * (heads + 2 * groups) * hd + heads * hd * r.h + r.h * up + r.f / r.t * r.h)
    n_tensors = 4 + 4 * bias + 2 * (2 - r.gated)
    param_b = kernel_s(r, weights, 3 * weights * grad) + n_tensors * r.hw["launch_s"] \
        + bias * 4 * kernel_s(r, T * r.h, T * r.h * DT) + 2 * kernel_s(r, 2 * sp_numel, 2 * sp_numel * DT)
    gpu_f = sum(g[0] for g in gemms) + core["fwd"] + point_f
    gpu_b = sum(g[1] for g in gemms) + core["bwd"] + point_b + param_b
    n_f = 10 + core["n_fwd"] + r.gated
    n_b = 8 + core["n_bwd"] + 5 + r.gated + bias * 4 + 2 + n_tensors
    full, selective = r.recompute == 2, (r.recompute == 1) & (r.flash == 0)
    gpu_r = r.xp.select([full, selective], [gpu_f, core["unfused_fwd"]], 0.0)
    n_r = r.xp.select([full, selective], [n_f, 4.0], 0.0)
    calls = r.xp.where(r.t > 1, r.xp.where(r.sp > 0, 4.0, 2.0), 0.0)
    one = tp_comm_s(r, T * r.h * DT)  # per region: all-reduce, or all-gather + reduce-scatter
    comm_f = 2 * one
    comm_b = 2 * one + full * 2 * one
    fwd = _window(r, gpu_f, comm_f, n_f, calls)
    bwd = _window(r, gpu_b + gpu_r, comm_b, n_b + n_r, calls * (1 + full))
    return {"compute": gpu_f + gpu_b, "core": core["fwd"] + core["bwd"], "recompute": gpu_r,
            "tp_comm": comm_f + comm_b, "host_excess": fwd + bwd - (gpu_f + gpu_b + gpu_r + comm_f + comm_b),
            "total": fwd + bwd}


def _ring_s(r: Rows, nbytes: np.ndarray, n: np.ndarray, per_node: np.ndarray, sharing: np.ndarray,
            calls: np.ndarray | float = 1.0) -> np.ndarray:
    """All-reduce of `nbytes` over `n` ranks with `per_node` on each node, split into `calls`
    collectives (simulator.network: a flat ring inside a node; hierarchical across k nodes, the
    node's links carrying 2(k-1)/k of the buffer for each of `sharing / per_node` groups)."""
    k = r.xp.ceil(n / r.xp.maximum(per_node, 1))
    g = r.xp.minimum(per_node, n)
    crosses = k > 1
    intra_bw = r.intra_Bps * r.hw["intra_eff"]
    flat = 2 * (n - 1) / r.xp.maximum(n, 1) * nbytes / intra_bw + calls * 2 * (n - 1) * r.hw["intra_lat_s"]
    local = 2 * (g - 1) / r.xp.maximum(g, 1) * nbytes / intra_bw
    inter = 2 * (k - 1) / k * nbytes * (sharing / g) / (r.inter_Bps * r.hw["inter_eff"])
    hier = r.xp.maximum(local, inter) + calls * (2 * (g - 1) * r.hw["intra_lat_s"]
                                               + 2 * (k - 1) * r.hw["inter_lat_s"])
    return r.xp.where(n > 1, r.xp.where(crosses, hier, flat), 0.0)


def tp_comm_s(r: Rows, nbytes: np.ndarray) -> np.ndarray:
    """One tp all-reduce (or all-gather + reduce-scatter pair under sequence parallelism)."""
    per_node = r.xp.minimum(r.t, r.gpn)
    return _ring_s(r, nbytes, r.t, per_node, per_node)


def dp_placement(r: Rows) -> np.ndarray:
    """Data-parallel ranks per node (simulator.topology.dp_placement)."""
    return r.xp.where(r.t < r.gpn, r.xp.maximum(1, r.xp.minimum(r.d, r.xp.floor(r.gpn / r.t))), 1.0)


def iteration(r: Rows, stage_params: np.ndarray, vocab_p: np.ndarray) -> dict[str, np.ndarray]:
    """Estimated seconds of one iteration and of its parts."""
    layer = layer_times(r)
    T = r.b * r.s
    m, p, v = r.m, r.p, r.v
    logits_f, logits_b = gemm_s(r, 1.0, T, vocab_p / r.t, r.h)
    logits = logits_f + logits_b
    # cross-entropy on fp32 logits: 38 bytes per logit forward, 14 backward (simulator.graph)
    n = T * vocab_p / r.t
    ce = kernel_s(r, 5 * n, 38 * n) + kernel_s(r, 2 * n, 14 * n) + 24 * r.hw["launch_s"]
    # the word-embedding gradient table: zeroed, (tied) summed, accumulated
    table = vocab_p * r.h / r.t
    emb_grad = kernel_s(r, table, table * (DT + 3 * DT + 3 * r.xp.where(r.bf16 > 0, 4.0, 2.0)))
    head = _window(r, logits + ce + emb_grad, r.xp.zeros_like(T), r.xp.full_like(T, 60.0),
                   r.xp.where(r.t > 1, 4.0, 0.0))
    stage = r.L / p * layer["total"] + head + 2 * v * r.hw["mb_s"]
    slots = m + (p - 1) / v
    bubble = (p - 1) / v / slots
    pipeline = slots * stage
    stride = r.t * r.d
    p2p_crosses = stride >= r.gpn
    p2p_bw = r.xp.where(p2p_crosses, r.inter_Bps / r.gpn, r.intra_Bps)
    p2p = r.xp.where(p > 1, T * r.h * DT / r.t / (p2p_bw * r.hw["p2p_eff"]) + r.hw["intra_lat_s"], 0.0)
    pp_comm = 2 * (p - 1) * p2p * v
    grad = stage_params * r.xp.where(r.bf16 > 0, 4.0, 2.0)
    per_node = dp_placement(r)
    buckets = r.xp.where(r.overlap > 0, r.xp.maximum(1, r.xp.ceil(grad / v / BUCKET_BYTES)) * v, 1.0)
    reduce = _ring_s(r, grad, r.d, per_node, r.gpn, buckets) * r.xp.where(r.dopt > 0, 0.5, 1.0)
    gather = _ring_s(r, 2.0 * stage_params, r.d, per_node, r.gpn) * 0.5 * r.dopt
    backward_mb = stage / v * (2 / 3)
    hidden = r.xp.where(r.overlap > 0, r.xp.minimum(reduce * 0.9, backward_mb), 0.0)
    dp_exposed = reduce - hidden + gather
    tied = (1 - r.gated) * (p > 1)
    emb_crosses = (p - 1) * stride >= r.gpn
    emb = tied * _ring_s(r, vocab_p * r.h / r.t * r.xp.where(r.bf16 > 0, 4.0, 2.0), r.xp.full_like(p, 2.0),
                         r.xp.where(emb_crosses, 1.0, 2.0), r.gpn)
    shard = r.xp.where(r.dopt > 0, r.d, 1.0)
    optimizer = kernel_s(r, 10 * stage_params / shard, ADAM_BYTES_PER_PARAM * stage_params / shard)
    total = pipeline + pp_comm + dp_exposed + emb + optimizer
    return {"total": total, "pipeline": pipeline, "stage_mb": stage, "bubble": bubble,
            "layer": layer["total"], "layer_compute": layer["compute"], "tp_comm": layer["tp_comm"],
            "recompute": layer["recompute"], "attention": layer["core"], "p2p": p2p,
            "host_excess": layer["host_excess"],
            "pp_comm": pp_comm, "dp_comm": reduce + gather, "dp_exposed": dp_exposed,
            "embedding_sync": emb, "optimizer": optimizer}
