"""Multi-latent attention (DeepSeek-V2/V3), as Megatron-Core's `MLASelfAttention`
(core/transformer/multi_latent_attention.py) runs it with Transformer Engine.

Queries: a down projection of the hidden state to `q_lora_rank` (replicated on the tp ranks,
TE's "duplicated" linear), its norm, and an up projection to heads x (qk_head_dim +
qk_pos_emb_head_dim) (column-parallel); without `q_lora_rank` one column-parallel projection.
Keys and values: a down projection to kv_lora_rank + qk_pos_emb_head_dim (duplicated), the
latent's norm, an up projection to heads x (qk_head_dim + v_head_dim) (column-parallel); the
rotary part of the key is shared by the heads. Rope on the rotary parts; fused attention with
query/key heads of qk_head_dim + qk_pos_emb_head_dim and value heads of v_head_dim; the output
projection (row-parallel). With sequence parallelism the down projections run on the rank's
share of the tokens and the small latents are all-gathered over tp (their gradient
reduce-scattered); without it the up projections' input gradients are all-reduced over tp.
"""

from __future__ import annotations

from simulator.graph.attention import AttentionCore
from simulator.graph.context_parallel import attention_core
from simulator.graph.fused_attention import HeadDims
from simulator.graph.layer_parts import LayerParts
from simulator.graph.ops import CommGroup, CommOp, Op, OpKind, Phase
from simulator.graph.primitives import (
    ShapeContext,
    dropout_add,
    gemm,
    norm_op,
    norm_weight_grad,
    pointwise,
)
from simulator.graph.tp_comm import column_parallel, row_parallel
from simulator.job.enums import CollectiveKind
from simulator.job.specs import Job


def latent_width(job: Job) -> int:
    """Per token: the query latent (if any), the key/value latent and the shared rotary key."""
    m = job.model
    return (m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_pos_emb_head_dim


def _latent_norm(c: ShapeContext, parts: LayerParts, name: str, tokens: float, width: int,
                 variant: str) -> None:
    n = tokens * width
    parts.add(pointwise(name, OpKind.NORM, n, c.dt, 1, 1, 2 * n, variant, bwd_traffic=3.0,
                        flops_per_elem=5.0))
    op = Op(f"{name}.wgrad", OpKind.NORM, Phase.BACKWARD_WEIGHT, (int(n),), c.dt, 2 * int(n),
            2 * int(n) * c.dt, 0.0, f"{variant}_wgrad")
    parts.small_weights.append((op, [width]))


def mla_attention(job: Job, c: ShapeContext, parts: LayerParts, acc: int) -> AttentionCore:
    """The attention half of an MLA layer, appended to `parts`; returns its core."""
    m, t = job.model, c.t
    heads, dt, h = m.num_attention_heads // t, c.dt, m.hidden_size
    rope, dqk, dv = m.qk_pos_emb_head_dim, m.qk_head_dim + m.qk_pos_emb_head_dim, m.v_head_dim
    T, own = c.tokens, int(c.sp_tokens)  # after / before the sequence-parallel gather
    parts.add(norm_op(c, "input_norm", m.norm))
    parts.small_weights.append(norm_weight_grad(job, c, "input_norm"))
    q_in = m.q_lora_rank or h
    if m.q_lora_rank:
        parts.add(gemm("mla.q_down", own, m.q_lora_rank, h, dt, dt * own * h, accumulate_bytes=acc))
    parts.add(gemm("mla.kv_down", own, m.kv_lora_rank + rope, h, dt,
                   0.0 if m.q_lora_rank else dt * own * h, accumulate_bytes=acc))
    if m.q_lora_rank:
        _latent_norm(c, parts, "mla.q_norm", own, m.q_lora_rank, m.norm.value)
    _latent_norm(c, parts, "mla.kv_norm", own, m.kv_lora_rank, m.norm.value)
    parts.add(gemm("mla.q_up", T, heads * dqk, q_in, dt, dt * T * q_in, accumulate_bytes=acc))
    parts.add(gemm("mla.kv_up", T, heads * (m.qk_head_dim + dv), m.kv_lora_rank, dt,
                   dt * T * m.kv_lora_rank, accumulate_bytes=acc))
    parts.add(pointwise("mla.rope", OpKind.ELEMENTWISE, T * (heads + 1) * rope, dt, 1, 1,
                        variant="rope", bwd_traffic=2.0))
    parts.add(pointwise("mla.k_concat", OpKind.ELEMENTWISE, T * heads * dqk, dt, 1, 1,
                        variant="copy", bwd_traffic=2.0))  # the shared rotary key to every head
    core = attention_core(job, c, HeadDims(heads, heads, dqk, dv), None)
    parts.fwd.extend(core.forward)
    parts.bwd.extend(core.backward)
    parts.add(gemm("attn.proj", T, h, heads * dv, dt, dt * T * heads * dv, accumulate_bytes=acc))
    parts.add(dropout_add(c, "attn.dropout_add"))
    _comm(job, c, parts, core)
    parts.linears.update({"mla.q_up": (q_in, heads * dqk),
                          "mla.kv_up": (m.kv_lora_rank, heads * (m.qk_head_dim + dv)),
                          "attn.proj": (heads * dv, h)})
    if m.q_lora_rank:
        parts.linears["mla.q_down"] = (h, m.q_lora_rank)
    parts.linears["mla.kv_down"] = (h, m.kv_lora_rank + rope)
    return core


def _comm(job: Job, c: ShapeContext, parts: LayerParts, core: AttentionCore) -> None:
    t, T, dt = c.t, c.tokens, c.dt
    latent = T * latent_width(job) * dt
    proj = row_parallel("attn.proj", T * c.h * dt, t, c.sp)
    fwd: list[CommOp] = []
    bwd: list[CommOp] = []
    if t > 1 and c.sp:
        fwd.append(CommOp("mla.latent_all_gather", CollectiveKind.ALL_GATHER, latent, CommGroup.TP))
        bwd.append(CommOp("mla.latent_grad_reduce_scatter", CollectiveKind.REDUCE_SCATTER, latent,
                          CommGroup.TP))
    elif t > 1:
        bwd += column_parallel("mla.kv_up", latent, t, False, c.fw.async_tp_grad_allreduce).backward
    parts.attn_fwd_comm += [*fwd, *core.forward_comm, *proj.forward]
    parts.attn_bwd_comm += [*proj.backward, *core.backward_comm, *bwd]
