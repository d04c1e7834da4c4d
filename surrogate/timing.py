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

import numpy as np

from surrogate.physics import Rows

TILES = ((256, 128, 1.0), (128, 128, 0.92), (128, 64, 0.8), (64, 64, 0.6))  # simulator.costs
DT = 2.0  # fp16/bf16 bytes
ADAM_BYTES_PER_PARAM = 36.0  # simulator.tail
BUCKET_BYTES = 25e6  # ParallelPlan.bucket_size_mb default


def gemm_efficiency(r: Rows, batch: np.ndarray, m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
    sms = r.hw["num_sms"]
    best = np.zeros_like(m)
    for tm, tn, rel in TILES:
        tiles_m, tiles_n = np.ceil(m / tm), np.ceil(n / tn)
        tiles = batch * tiles_m * tiles_n
        wave = tiles / (np.ceil(tiles / sms) * sms)
        fill = (m * n) / (tiles_m * tm * tiles_n * tn)
        best = np.maximum(best, rel * wave * fill)
    return r.hw["gemm_max"] * best * k / (k + r.hw["k_half"])


def kernel_s(r: Rows, flops: np.ndarray | float, nbytes: np.ndarray | float,
             eff: np.ndarray | float = 1.0 / 16) -> np.ndarray:
    """One kernel: roofline plus launch gap, floored by host dispatch (eff 1/16: CUDA cores)."""
    peak = np.where(r.bf16 > 0, r.hw["peak_bf16"], r.hw["peak_fp16"])
    gpu = np.maximum(flops / (peak * eff), nbytes / r.hw["hbm_Bps"]) + r.hw["launch_s"]
    return np.maximum(gpu, r.hw["host_s"])


def gemm_s(r: Rows, batch: np.ndarray | float, m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Forward, data-gradient and weight-gradient GEMMs of Y[m,n] = X[m,k] W[k,n]."""
    batch = np.broadcast_to(np.asarray(batch, dtype=float), m.shape)
    flops = 2.0 * batch * m * n * k
    total = np.zeros_like(m)
    for mm, nn, kk in ((m, n, k), (m, k, n), (n, k, m)):
        traffic = batch * (mm * kk + kk * nn + mm * nn) * DT
        total = total + kernel_s(r, flops, traffic, gemm_efficiency(r, batch, mm, nn, kk))
    return total


def layer_times(r: Rows) -> dict[str, np.ndarray]:
    """Seconds of one layer for one micro-batch: compute (fwd+bwd), recompute, tp comm."""
    T, hd = r.b * r.s, r.h / r.a
    heads, groups = r.a / r.t, r.g / r.t
    up = r.f / r.t * (1 + r.gated)
    qkv = gemm_s(r, 1.0, T, (heads + 2 * groups) * hd, r.h)
    proj = gemm_s(r, 1.0, T, r.h, heads * hd)
    mlp = gemm_s(r, 1.0, T, up, r.h) + gemm_s(r, 1.0, T, r.h, r.f / r.t)
    bh = r.b * heads
    scores = bh * r.s * r.s
    bmm = gemm_s(r, bh, r.s, r.s, hd) + gemm_s(r, bh, r.s, hd, r.s)
    softmax = 2 * (kernel_s(r, 5 * scores, 2 * scores * DT) + kernel_s(r, 3 * scores, 3 * scores * DT))
    unfused = bmm + softmax
    flash_flops = 2.0 * bh * r.s * r.s * hd
    flash = 3.5 * kernel_s(r, flash_flops, 4 * T * heads * hd * DT,
                           gemm_efficiency(r, bh, r.s, hd, r.s))
    core = np.where(r.flash > 0, flash, unfused)
    sp_numel = np.where(r.sp > 0, T / r.t, T) * r.h
    pointwise = (4 * kernel_s(r, 5 * sp_numel, 2 * sp_numel * DT)
                 + 4 * kernel_s(r, sp_numel, 3 * sp_numel * DT)
                 + 2 * kernel_s(r, 8 * T * up, 2.5 * T * up * DT))
    fwd_share = 1 / 3
    dense = qkv + proj + mlp + pointwise
    compute = dense + core
    recompute = np.select([r.recompute == 2, (r.recompute == 1) & (r.flash == 0)],
                          [compute * fwd_share, unfused * fwd_share], 0.0)
    tp = tp_comm_s(r, T * r.h * DT) * (4 + 2 * (r.recompute == 2))
    return {"compute": compute, "core": core, "recompute": recompute, "tp_comm": tp,
            "total": compute + recompute + tp}


def _ring_s(r: Rows, nbytes: np.ndarray, n: np.ndarray, crosses: np.ndarray,
            sharing: np.ndarray, calls: np.ndarray | float = 1.0) -> np.ndarray:
    """Ring all-reduce of `nbytes` over `n` ranks, split into `calls` collectives
    (simulator.network: each call pays the 2(n-1) step latency)."""
    volume = 2 * (n - 1) / np.maximum(n, 1) * nbytes
    intra = volume / (r.intra_Bps * r.hw["intra_eff"])
    inter = sharing * volume / (r.inter_Bps * r.hw["inter_eff"])
    lat = np.where(crosses, r.hw["inter_lat_s"], r.hw["intra_lat_s"])
    t = np.where(crosses, np.maximum(intra, inter), intra) + calls * 2 * (n - 1) * lat
    return np.where(n > 1, t, 0.0)


def tp_comm_s(r: Rows, nbytes: np.ndarray) -> np.ndarray:
    """One tp all-reduce (or all-gather + reduce-scatter pair under sequence parallelism)."""
    crosses = r.t > r.gpn
    return _ring_s(r, nbytes, r.t, crosses, np.ones_like(r.t))


def dp_placement(r: Rows) -> tuple[np.ndarray, np.ndarray]:
    per_node = np.where(r.t < r.gpn, np.maximum(1, np.minimum(r.d, np.floor(r.gpn / r.t))), 1.0)
    crosses = np.ceil(r.d / per_node) > 1
    return crosses, r.gpn / per_node


def iteration(r: Rows, stage_params: np.ndarray, vocab_p: np.ndarray) -> dict[str, np.ndarray]:
    """Estimated seconds of one iteration and of its parts."""
    layer = layer_times(r)
    T = r.b * r.s
    m, p, v = r.m, r.p, r.v
    head = gemm_s(r, 1.0, T, vocab_p / r.t, r.h) + 2 * kernel_s(r, 5 * T * vocab_p / r.t,
                                                               T * vocab_p / r.t * 10)
    stage = r.L / p * layer["total"] + head
    slots = m + (p - 1) / v
    bubble = (p - 1) / v / slots
    pipeline = slots * stage
    stride = r.t * r.d
    p2p_crosses = stride >= r.gpn
    p2p_bw = np.where(p2p_crosses, r.inter_Bps / r.gpn, r.intra_Bps)
    p2p = np.where(p > 1, T * r.h * DT / r.t / (p2p_bw * r.hw["p2p_eff"]) + r.hw["intra_lat_s"], 0.0)
    pp_comm = 2 * (p - 1) * p2p * v
    grad = stage_params * np.where(r.bf16 > 0, 4.0, 2.0)
    crosses, sharing = dp_placement(r)
    buckets = np.where(r.overlap > 0, np.maximum(1, np.ceil(grad / v / BUCKET_BYTES)) * v, 1.0)
    reduce = _ring_s(r, grad, r.d, crosses, sharing, buckets) * np.where(r.dopt > 0, 0.5, 1.0)
    gather = _ring_s(r, 2.0 * stage_params, r.d, crosses, sharing) * 0.5 * r.dopt
    backward_mb = stage / v * (2 / 3)
    hidden = np.where(r.overlap > 0, np.minimum(reduce * 0.9, backward_mb), 0.0)
    dp_exposed = reduce - hidden + gather
    tied = (1 - r.gated) * (p > 1)
    emb_crosses = (p - 1) * stride >= r.gpn
    emb = tied * _ring_s(r, vocab_p * r.h / r.t * np.where(r.bf16 > 0, 4.0, 2.0), np.full_like(p, 2.0),
                         emb_crosses, np.ones_like(p))
    shard = np.where(r.dopt > 0, r.d, 1.0)
    optimizer = kernel_s(r, 10 * stage_params / shard, ADAM_BYTES_PER_PARAM * stage_params / shard)
    total = pipeline + pp_comm + dp_exposed + emb + optimizer
    return {"total": total, "pipeline": pipeline, "stage_mb": stage, "bubble": bubble,
            "layer": layer["total"], "layer_compute": layer["compute"], "tp_comm": layer["tp_comm"],
            "recompute": layer["recompute"], "attention": layer["core"], "p2p": p2p,
            "pp_comm": pp_comm, "dp_comm": reduce + gather, "dp_exposed": dp_exposed,
            "embedding_sync": emb, "optimizer": optimizer}
