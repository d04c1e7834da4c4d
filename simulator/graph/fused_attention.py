"""Transformer Engine's fused attention for the variants the plain core does not cover: query/key
and value head sizes that differ (multi-latent attention: 192 and 128 in DeepSeek-V3), sliding
windows (GPT-OSS), attention sinks (`--softmax-type learnable`), and context parallelism, which
`simulator.graph.context_parallel` builds from the same kernel.

One fused kernel computes softmax(Q K^T) V for `pairs` (query, key) pairs: 2 * dqk FLOPs per pair
for Q K^T and 2 * dv for the product with V; its backward runs 2.5 times the forward's FLOPs (as
the plain core, simulator.graph.attention). A causal square block has s^2 / 2 pairs; a sliding
window of W keys gives query i min(i + 1, W + 1) keys (Megatron-Core's `window_size = (W, 0)`).
Attention sinks add one learned logit per head to each softmax denominator: no extra kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.graph.attention import AttentionCore
from simulator.graph.ops import Op, OpKind, Phase
from simulator.graph.primitives import FP32, ShapeContext
from simulator.job.enums import Precision
from simulator.job.precision import FP8_ATTENTION
from simulator.job.specs import Job

BACKWARD_FLOPS = 2.5  # the backward kernel's FLOPs per forward FLOP (as the plain core)


@dataclass(frozen=True)
class HeadDims:
    """Attention heads of one tensor-parallel rank and their sizes."""

    heads: int  # query heads
    kv_heads: int  # key/value heads (query groups; = heads for MLA)
    dqk: int  # query/key head size (MLA: non-rotary + rotary part)
    dv: int  # value head size

    def split(self, n: int) -> HeadDims:
        """The heads of one of `n` ranks that share them (Ulysses all-to-all)."""
        return HeadDims(self.heads // n, self.kv_heads // n, self.dqk, self.dv)

    def qkv_bytes(self, tokens: float, dt: int) -> float:
        return dt * tokens * (self.heads * self.dqk + self.kv_heads * (self.dqk + self.dv))

    def kv_bytes(self, tokens: float, dt: int) -> float:
        return dt * tokens * self.kv_heads * (self.dqk + self.dv)

    def out_bytes(self, tokens: float, dt: int) -> float:
        return dt * tokens * self.heads * self.dv


def causal_pairs(s: float) -> float:
    """(query, key) pairs of causal attention over `s` tokens, counted as the plain core does."""
    return s * s / 2


def window_pairs(s: int, window: int) -> float:
    """Pairs of causal sliding-window attention: query i sees min(i + 1, window + 1) keys."""
    w = window + 1
    if s <= w:
        return s * (s + 1) / 2
    return w * (w + 1) / 2 + (s - w) * w


def flash_pair(name: str, c: ShapeContext, dims: HeadDims, sq: int, skv: int, pairs: float,
               saved: float, variant: str = "causal") -> tuple[Op, Op]:
    """One fused-attention kernel of `b * heads` problems of `sq` queries over `skv` keys that
    computes `pairs` (query, key) pairs per problem, and its backward. Traffic: Q, K, V read and
    the output written (twice that backward). FP8 attention (`fp8_dot_product_attention`, as
    simulator.graph.attention): Q, K, V in FP8 and the matmuls at the FP8 peak."""
    bh = c.b * dims.heads
    flops = 2.0 * bh * pairs * (dims.dqk + dims.dv)
    io = c.dt * c.b * (sq * dims.heads * (dims.dqk + dims.dv) + skv * dims.kv_heads * (dims.dqk + dims.dv))
    if c.fp8_attention:
        q = qkv_element_bytes(c)
        io = c.b * (sq * dims.heads * (dims.dqk * q + dims.dv * c.dt)
                    + skv * dims.kv_heads * (dims.dqk + dims.dv) * q)
    variant, precision = (FP8_ATTENTION, Precision.FP8) if c.fp8_attention else (variant, None)
    fwd = Op(name, OpKind.FLASH_ATTENTION, Phase.FORWARD, (bh, sq, skv, dims.dqk), c.dt, flops, io,
             saved, variant, precision=precision)
    bwd = Op(f"{name}.bwd", OpKind.FLASH_ATTENTION, Phase.BACKWARD, (bh, sq, skv, dims.dqk), c.dt,
             BACKWARD_FLOPS * flops, 2 * io, 0.0, variant, precision=precision)
    return fwd, bwd


def qkv_element_bytes(c: ShapeContext) -> int:
    """Bytes of a Q, K or V element the fused kernel reads and saves: 1 with FP8 attention (the
    QKV GEMM writes them in FP8), else the 16-bit dtype."""
    return 1 if c.fp8_attention else c.dt


def lse_bytes(c: ShapeContext, dims: HeadDims, tokens_per_sequence: int) -> float:
    """The fp32 log-sum-exp the kernel keeps per query for its backward."""
    return FP32 * c.b * dims.heads * tokens_per_sequence


def fused_core(job: Job, c: ShapeContext, dims: HeadDims, window: int | None) -> AttentionCore:
    """The fused attention core of one layer on one rank without context parallelism (with it,
    `context_parallel.attention_core` transforms it). Saved for the backward: Q, K, V and the
    log-sum-exp."""
    s = c.s
    inputs = dims.qkv_bytes(c.tokens, qkv_element_bytes(c))
    if window is None:
        pairs, skv, variant = causal_pairs(s), s, "causal"
    else:
        pairs, skv, variant = window_pairs(s, window), min(s, window + 1), "causal_window"
    fwd, bwd = flash_pair("flash_attention", c, dims, s, skv, pairs,
                          inputs + lse_bytes(c, dims, s), variant)
    return AttentionCore([fwd], [bwd], inputs)
