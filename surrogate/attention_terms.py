"""Attention shapes the dense closed form does not have (`surrogate.extended`): a head size of
its own (`kv_channels`: Qwen3's 128 where hidden / heads is 64) and multi-latent attention
(DeepSeek-V3: queries and keys of qk_head_dim + qk_pos_emb_head_dim = 192, values of 128, on all
128 heads, behind low-rank down / up projections). The dense form sizes every head
hidden / heads (56 for DeepSeek-V3) with grouped K/V, so it under-prices such a layer's
attention core, its projections and context parallelism's K/V exchange
(simulator.graph.fused_attention.HeadDims, simulator.graph.mla, simulator.graph.flops).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from surrogate.physics import RECOMPUTE
from surrogate.records import new_column as _col


class Heads(NamedTuple):
    """A tensor-parallel rank's attention heads and their sizes (simulator's `HeadDims`)."""

    heads: np.ndarray
    kv_heads: np.ndarray
    dqk: np.ndarray
    dv: np.ndarray

    def kv_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """16-bit K and V of `tokens` tokens."""
        return 2.0 * tokens * self.kv_heads * (self.dqk + self.dv)

    def qkv_out_bytes(self, tokens: np.ndarray) -> np.ndarray:
        """16-bit Q, K, V and the output of `tokens` tokens (what Ulysses' all-to-alls move)."""
        return 2.0 * tokens * (self.heads * (self.dqk + self.dv) + self.kv_heads * (self.dqk + self.dv))


def heads(f: Mapping[str, np.ndarray], new: np.ndarray) -> Heads:
    """`Heads` of each row (simulator.graph.dense / mla)."""
    t, a, h = f["tp"], f["num_attention_heads"], f["hidden_size"]
    mla = _col(new, "multi_latent_attention") > 0
    kv = _col(new, "kv_channels")
    d = np.where(kv > 0, kv, h / a)
    dqk = np.where(mla, _col(new, "qk_head_dim") + _col(new, "qk_pos_emb_head_dim"), d)
    dv = np.where(mla, _col(new, "v_head_dim"), d)
    return Heads(a / t, np.where(mla, a, f["num_query_groups"]) / t, dqk, dv)


def attention_extra_s(f: Mapping[str, np.ndarray], new: np.ndarray, dims: Heads,
                      attention_weights: np.ndarray, dense: Mapping[str, np.ndarray],
                      hw: Mapping[str, Any]) -> np.ndarray:
    """Seconds per layer and micro-batch the true attention costs beyond the dense form's
    (zero where they agree): the core scales with the head sizes (FLOPs and traffic go with
    heads x (dqk + dv); the dense form's is 2 x hidden / heads), the projections with their
    weights (`attention_weights`: simulator.graph.flops.attention_matmul_weights; 3 passes of
    2 FLOPs per weight and token, a fourth under full recompute, at the layer's GEMM
    efficiency)."""
    h, a, g, t = f["hidden_size"], f["num_attention_heads"], f["num_query_groups"], f["tp"]
    d = h / a
    core = dense["time_attention_s"] * ((dims.dqk + dims.dv) / (2 * d) - 1)
    dense_weights = h * (a + 2 * g) * d + a * d * h
    tokens = f["micro_batch_size"] * f["seq_length"] / _col(new, "cp")  # a rank's
    passes = 3.0 + (f["recompute"] == RECOMPUTE.index("full"))
    flops = passes * 2.0 * tokens * (attention_weights - dense_weights) / t
    projections = flops / (hw["peak_bf16"] * np.maximum(dense["gemm_efficiency"], 0.05))
    return np.where(attention_weights > 0, core + projections, 0.0)


def ring_exposed_s(cp: np.ndarray, kv_s: np.ndarray, attention_s: np.ndarray) -> np.ndarray:
    """Exposed seconds of ring attention's K/V exchanges per layer and micro-batch
    (simulator.graph.context_parallel._ring_ops): cp - 1 forward exchanges of one chunk's K/V,
    each beside the previous step's attention, cp - 1 backward exchanges of K/V and their
    gradients beside the steps' backward, and the last gradients' return; a step is 1/cp of the
    rank's attention (`attention_s`: forward and backward, the backward 2.5x the forward)."""
    step_f = attention_s / 3.5 / cp
    step_b = attention_s * 2.5 / 3.5 / cp
    exposed = (cp - 1) * (np.maximum(0.0, kv_s - step_f) + np.maximum(0.0, 2 * kv_s - step_b)) + kv_s
    return np.where(cp > 1, exposed, 0.0)
