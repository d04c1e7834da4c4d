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
Every projection is a Transformer Engine linear (`TELinear` "duplicated" for the down
projections, `TELayerNormColumnParallelLinear` fusing the latent norm for the up projections,
`TERowParallelLinear` for the output; `core/models/gpt/gpt_layer_specs.py`): they run in a
low-precision recipe's format (simulator.graph.quantize), and TE all-gathers the normed latents
quantized; the shared rotary key is all-gathered apart, in 16 bits (`k_pos_emb`).
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
    norm_op,
    norm_weight_grad,
    pointwise,
)
from simulator.graph.quantize import LinearSpec, gathered_bytes, linear, linear_comm, norm_writes
from simulator.graph.tp_comm import column_parallel
from simulator.job.enums import CollectiveKind
from simulator.job.specs import Job


def latent_width(job: Job) -> int:
    """Per token: the query latent (if any), the key/value latent and the shared rotary key."""
    m = job.model
    return (m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_pos_emb_head_dim


def _latent_norm(c: ShapeContext, parts: LayerParts, name: str, tokens: float, width: int,
                 variant: str, writes: float = 1) -> None:
    n = tokens * width
    parts.add(pointwise(name, OpKind.NORM, n, c.dt, 1, writes, 2 * n, variant, bwd_traffic=3.0,
                        flops_per_elem=5.0))
    op = Op(f"{name}.wgrad", OpKind.NORM, Phase.BACKWARD_WEIGHT, (int(n),), c.dt, 2 * int(n),
            2 * int(n) * c.dt, 0.0, f"{variant}_wgrad")
    parts.small_weights.append((op, [width]))


def _specs(job: Job, c: ShapeContext, acc: int) -> dict[str, LinearSpec]:
    """MLA's linears on one rank: the down projections on its own tokens (replicated weights),
    the up and output projections on all tokens (split over tp)."""
    m, t = job.model, c.t
    heads, h, rope = m.num_attention_heads // t, m.hidden_size, m.qk_pos_emb_head_dim
    dqk, own, T = m.qk_head_dim + rope, int(c.sp_tokens), c.tokens
    specs = {"mla.kv_down": LinearSpec("mla.kv_down", own, m.kv_lora_rank + rope, h, False,
                                       False, False, acc, local=True),
             "mla.q_up": LinearSpec("mla.q_up", T, heads * dqk, m.q_lora_rank or h, True,
                                    bool(m.q_lora_rank), False, acc),
             "mla.kv_up": LinearSpec("mla.kv_up", T, heads * (m.qk_head_dim + m.v_head_dim),
                                     m.kv_lora_rank, True, True, False, acc),
             "attn.proj": LinearSpec("attn.proj", T, h, heads * m.v_head_dim, False, False,
                                     job.training.flash_attention, acc)}
    if m.q_lora_rank:
        specs["mla.q_down"] = LinearSpec("mla.q_down", own, m.q_lora_rank, h, False, False,
                                         False, acc, local=True)
    return specs


def mla_attention(job: Job, c: ShapeContext, parts: LayerParts, acc: int) -> AttentionCore:
    """The attention half of an MLA layer, appended to `parts`; returns its core."""
    m, t = job.model, c.t
    heads, dt, h = m.num_attention_heads // t, c.dt, m.hidden_size
    rope, dqk, dv = m.qk_pos_emb_head_dim, m.qk_head_dim + m.qk_pos_emb_head_dim, m.v_head_dim
    T, own = c.tokens, int(c.sp_tokens)  # after / before the sequence-parallel gather
    specs = _specs(job, c, acc)
    parts.add(norm_op(c, "input_norm", m.norm))
    parts.small_weights.append(norm_weight_grad(job, c, "input_norm"))
    q_in = m.q_lora_rank or h
    if m.q_lora_rank:
        parts.add_linear(linear(c, specs["mla.q_down"], dt * own * h))
    parts.add_linear(linear(c, specs["mla.kv_down"], 0.0 if m.q_lora_rank else dt * own * h))
    if m.q_lora_rank:
        _latent_norm(c, parts, "mla.q_norm", own, m.q_lora_rank, m.norm.value,
                     norm_writes(c, specs["mla.q_up"]))
    _latent_norm(c, parts, "mla.kv_norm", own, m.kv_lora_rank, m.norm.value,
                 norm_writes(c, specs["mla.kv_up"]))
    parts.add_linear(linear(c, specs["mla.q_up"], dt * T * q_in))
    parts.add_linear(linear(c, specs["mla.kv_up"], dt * T * m.kv_lora_rank))
    parts.add(pointwise("mla.rope", OpKind.ELEMENTWISE, T * (heads + 1) * rope, dt, 1, 1,
                        variant="rope", bwd_traffic=2.0))
    parts.add(pointwise("mla.k_concat", OpKind.ELEMENTWISE, T * heads * dqk, dt, 1, 1,
                        variant="copy", bwd_traffic=2.0))  # the shared rotary key to every head
    core = attention_core(job, c, HeadDims(heads, heads, dqk, dv), None)
    parts.fwd.extend(core.forward)
    parts.bwd.extend(core.backward)
    parts.add_linear(linear(c, specs["attn.proj"], dt * T * heads * dv))
    parts.add(dropout_add(c, "attn.dropout_add"))
    _comm(job, c, parts, core, specs)
    parts.linears.update({"mla.q_up": (q_in, heads * dqk),
                          "mla.kv_up": (m.kv_lora_rank, heads * (m.qk_head_dim + dv)),
                          "attn.proj": (heads * dv, h)})
    if m.q_lora_rank:
        parts.linears["mla.q_down"] = (h, m.q_lora_rank)
    parts.linears["mla.kv_down"] = (h, m.kv_lora_rank + rope)
    return core


def _comm(job: Job, c: ShapeContext, parts: LayerParts, core: AttentionCore,
          specs: dict[str, LinearSpec]) -> None:
    t, T, dt = c.t, c.tokens, c.dt
    latent = T * latent_width(job) * dt
    proj = linear_comm(c, specs["attn.proj"])
    fwd: list[CommOp] = []
    bwd: list[CommOp] = []
    if t > 1 and c.sp:
        fwd += _latent_gathers(job, c, latent)
        bwd.append(CommOp("mla.latent_grad_reduce_scatter", CollectiveKind.REDUCE_SCATTER, latent,
                          CommGroup.TP))
    elif t > 1:
        bwd += column_parallel("mla.kv_up", latent, t, False, c.fw.async_tp_grad_allreduce).backward
    parts.attn_fwd_comm += [*fwd, *core.forward_comm, *proj.forward]
    parts.attn_bwd_comm += [*proj.backward, *core.backward_comm, *bwd]


def _latent_gathers(job: Job, c: ShapeContext, latent: float) -> list[CommOp]:
    """The sequence-parallel all-gathers of the latents: one 16-bit gather of all of them, or
    when the up projections run low (or TE's userbuffers overlap them) TE's gathers of each
    normed latent, quantized and under its up projection's GEMM, and the 16-bit rotary key."""
    if c.low is None and not c.tp_comm_overlap:
        return [CommOp("mla.latent_all_gather", CollectiveKind.ALL_GATHER, latent, CommGroup.TP)]
    m, T = job.model, c.tokens
    widths = {"mla.q_up": m.q_lora_rank or 0, "mla.kv_up": m.kv_lora_rank}
    ops = [CommOp(f"{name}.all_gather", CollectiveKind.ALL_GATHER,
                  gathered_bytes(c, name, T * width, 1), CommGroup.TP,
                  name if c.tp_comm_overlap else "")
           for name, width in widths.items() if width]
    return [*ops, CommOp("mla.k_pos_emb_all_gather", CollectiveKind.ALL_GATHER,
                         T * m.qk_pos_emb_head_dim * c.dt, CommGroup.TP)]
