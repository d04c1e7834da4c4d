"""Attention shapes the dense closed form does not have (`surrogate.extended`): a head size of
its own (`kv_channels`: Qwen3's 128 where hidden / heads is 64) and multi-latent attention
(DeepSeek-V3: queries and keys of qk_head_dim + qk_pos_emb_head_dim = 192, values of 128, on all
128 heads, behind low-rank down / up projections). The dense form sizes every head
hidden / heads (56 for DeepSeek-V3) with grouped K/V, so it under-prices such a layer's
attention core, its projections and context parallelism's K/V exchange
(simulator.graph.fused_attention.HeadDims, simulator.graph.mla, simulator.graph.flops).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from simulator.jit import njit
from surrogate.compiled_ops import Vec, gemm_efficiency, maximum, skips, where
from surrogate.physics import RECOMPUTE, Hardware, Rows
from surrogate.slots import (
    CP,
    D_ATTENTION,
    D_GEMM_EFFICIENCY,
    FLASH_ATTENTION,
    HIDDEN_SIZE,
    KV_CHANNELS,
    MICRO_BATCH_SIZE,
    MULTI_LATENT_ATTENTION,
    NUM_ATTENTION_HEADS,
    NUM_QUERY_GROUPS,
    QK_HEAD_DIM,
    QK_LAYERNORM,
    QK_POS_EMB_HEAD_DIM,
    RECOMPUTE_CODE,
    SEQ_LENGTH,
    TP,
    V_HEAD_DIM,
)
from surrogate.timing import DT, kernel_s

_FULL = float(RECOMPUTE.index("full"))


class Heads(NamedTuple):
    """A tensor-parallel rank's attention heads and their sizes (simulator's `HeadDims`)."""

    heads: Vec
    kv_heads: Vec
    dqk: Vec
    dv: Vec


@njit
def kv_bytes(dims: Heads, tokens: Vec) -> Vec:
    """16-bit K and V of `tokens` tokens."""
    return 2.0 * tokens * dims.kv_heads * (dims.dqk + dims.dv)


@njit
def qkv_out_bytes(dims: Heads, tokens: Vec) -> Vec:
    """16-bit Q, K, V and the output of `tokens` tokens (what Ulysses' all-to-alls move)."""
    return 2.0 * tokens * (dims.heads * (dims.dqk + dims.dv) + dims.kv_heads * (dims.dqk + dims.dv))


@njit(inline=True)
def heads(f: Any, new: Any) -> Heads:
    """`Heads` of each row (simulator.graph.dense / mla); `f`, `new`: `surrogate.slots`."""
    t, a, h = f[TP], f[NUM_ATTENTION_HEADS], f[HIDDEN_SIZE]
    mla = new[MULTI_LATENT_ATTENTION] > 0
    kv = new[KV_CHANNELS]
    d = where(kv > 0, kv, h / a)
    dqk = where(mla, new[QK_HEAD_DIM] + new[QK_POS_EMB_HEAD_DIM], d)
    dv = where(mla, new[V_HEAD_DIM], d)
    return Heads(a / t, where(mla, a, f[NUM_QUERY_GROUPS]) / t, dqk, dv)


@njit(inline=True)
def attention_saved_bytes(f: Any, new: Any, dims: Heads) -> Vec:
    """Bytes one layer saves per micro-batch for the true attention beyond the dense form's
    (physics.layer_activations: heads of hidden / heads), flash attention without full
    recompute (MLA and the unfused core: zero, not modelled here): the core's Q, K, V inputs and
    the projection's input at the true head sizes, and under `qk_layernorm` the query and key
    norms' inputs (simulator.graph.dense: `attn.q_norm`, `attn.k_norm`). Qwen3-30B-A3B (32
    heads of 128 on a 2,048 hidden) keeps 2x the dense form's Q and output."""
    h, a, g, t = f[HIDDEN_SIZE], f[NUM_ATTENTION_HEADS], f[NUM_QUERY_GROUPS], f[TP]
    d = h / a
    tokens = f[MICRO_BATCH_SIZE] * f[SEQ_LENGTH] / new[CP]  # a rank's
    q, kv = dims.heads * dims.dqk, dims.kv_heads * (dims.dqk + dims.dv)
    true = q + kv + dims.heads * dims.dv + where(new[QK_LAYERNORM] > 0, q + dims.kv_heads * dims.dqk, 0.0)
    dense = d * (a + 2 * g) / t + a * d / t
    applies = (new[MULTI_LATENT_ATTENTION] == 0) & (f[FLASH_ATTENTION] > 0) & (f[RECOMPUTE_CODE] != _FULL)
    return where(applies, 2.0 * tokens * (true - dense), 0.0)


@njit(inline=True)
def attention_extra_s(f: Any, new: Any, dims: Heads, attention_weights: Vec, dense: Any,
                      hw: Hardware) -> Vec:
    """Seconds per layer and micro-batch the true attention costs beyond the dense form's
    (zero where they agree): the core scales with the head sizes (FLOPs and traffic go with
    heads x (dqk + dv); the dense form's is 2 x hidden / heads), the projections with their
    weights (`attention_weights`: simulator.graph.flops.attention_matmul_weights; 3 passes of
    2 FLOPs per weight and token, a fourth under full recompute, at the layer's GEMM
    efficiency)."""
    h, a, g, t = f[HIDDEN_SIZE], f[NUM_ATTENTION_HEADS], f[NUM_QUERY_GROUPS], f[TP]
    d = h / a
    core = dense[D_ATTENTION] * ((dims.dqk + dims.dv) / (2 * d) - 1)
    dense_weights = h * (a + 2 * g) * d + a * d * h
    tokens = f[MICRO_BATCH_SIZE] * f[SEQ_LENGTH] / new[CP]  # a rank's
    passes = 3.0 + (f[RECOMPUTE_CODE] == _FULL)
    flops = passes * 2.0 * tokens * (attention_weights - dense_weights) / t
    projections = flops / (hw.peak_bf16 * maximum(dense[D_GEMM_EFFICIENCY], 0.05))
    return where(attention_weights > 0, core + projections, 0.0)


@njit
def ring_exposed_s(cp: Vec, kv_s: Vec, attention_s: Vec) -> Vec:
    """Exposed seconds of ring attention's K/V exchanges per layer and micro-batch
    (simulator.graph.context_parallel._ring_ops): cp - 1 forward exchanges of one chunk's K/V,
    each beside the previous step's attention, cp - 1 backward exchanges of K/V and their
    gradients beside the steps' backward, and the last gradients' return; a step is 1/cp of the
    rank's attention (`attention_s`: forward and backward, the backward 2.5x the forward)."""
    step_f = attention_s / 3.5 / cp
    step_b = attention_s * 2.5 / 3.5 / cp
    exposed = (cp - 1) * (maximum(0.0, kv_s - step_f) + maximum(0.0, 2 * kv_s - step_b)) + kv_s
    return where(cp > 1, exposed, 0.0)


@njit(inline=True)
def _flash_s(re: Rows, bh: Vec, sq: Vec, skv: Vec, pairs: Vec, tokens: Vec, hd: Vec,
             heads: Vec) -> tuple[Vec, Vec]:
    """(forward, backward) seconds of one fused-attention kernel of `bh` problems of `sq` queries
    over `skv` keys computing `pairs` pairs each, at the fused kernel's efficiency of that shape
    (as surrogate.timing._core prices the whole core)."""
    flops = 4.0 * bh * pairs * hd
    io = 2.0 * tokens * heads * hd * DT * (1 + skv / sq)  # Q and O, and K and V of skv keys
    eff = gemm_efficiency(bh, sq, hd, skv, re.hw.num_sms, re.hw.attention_max, re.hw.attention_k_half)
    return kernel_s(re, flops, io, eff), kernel_s(re, 2.5 * flops, 2 * io, eff)


class GpuHost(NamedTuple):
    """What a term adds to a layer per micro-batch: GPU seconds, and host dispatch seconds (the
    floor a layer's windows cannot go under, surrogate.timing._window)."""

    gpu: Vec
    host: Vec


@njit(inline=True)
def ring_steps_extra(re: Rows, cp: Vec, ring: Any, attention_s: Vec) -> GpuHost:
    """What ring attention's cp steps cost beyond the dense form's core (`attention_s`, forward
    and backward; `re`: the effective row, b / cp sequences of all s tokens). The simulator
    (simulator.graph.context_parallel._ring_ops) runs step 0 as the local chunk's causal
    attention and each later step as the local queries against half a chunk's keys (load
    balanced), each its own kernel at its own, smaller shape's efficiency, and merges each
    later step's output into the running one (an fp32 correction kernel); full recompute and
    selective's core_attn run the forward again. Each later step launches its kernel, its
    correction and its backward, and its K/V (and dK/dV) exchange is a collective of its own."""
    if skips(ring):
        return GpuHost(0.0, 0.0)
    heads, hd = re.a / re.t, re.h / re.a
    local = re.s / cp
    sequences = re.b * cp
    bh = sequences * heads
    tokens = sequences * local
    first_f, first_b = _flash_s(re, bh, local, local, local * local / 2, tokens, hd, heads)
    step_f, step_b = _flash_s(re, bh, local, local / 2, local * local / 2, tokens, hd, heads)
    n = tokens * heads * hd
    correction = kernel_s(re, 4 * n, 3 * n * DT)
    forward = first_f + (cp - 1) * (step_f + correction)
    again = re.recompute > 0  # full, or selective's core_attn: the forward runs again
    gpu = (forward + first_b + (cp - 1) * step_b - attention_s
           + where(again, forward - attention_s / 3.5, 0.0))
    launches = 3 * (cp - 1) + where(again, 2 * (cp - 1), 0.0)
    exchanges = 2 * (cp - 1) + 1 + where(again, cp - 1, 0.0)
    host = launches * re.hw.host_s + exchanges * re.hw.coll_s
    return GpuHost(where(ring & (cp > 1) & (re.flash > 0), gpu, 0.0),
                     where(ring & (cp > 1) & (re.flash > 0), host, 0.0))
