"""A transformer layer (Megatron's TransformerLayer) for one micro-batch: norms, QKV, the
attention core, projection, MLP, residuals; its tensor-parallel collectives (Megatron-Core's
`core/tensor_parallel/layers.py` and `mappings.py`, see `simulator.graph.tp_comm`); the kernels that
produce and accumulate its parameter gradients; and what the recompute mode saves and re-runs.

A layer is two halves: the attention (grouped-query here, or multi-latent attention from
`simulator.graph.mla`) and the MLP (dense here, or routed experts from `simulator.graph.moe`);
`simulator.job.layer_pattern.LayerKind` says which. A dense GPT/Llama layer takes exactly the
path it always took. Every Transformer Engine linear runs in a low-precision recipe's format
(simulator.graph.quantize) unless the kind is kept in 16 bits (`high_precision`)."""

from __future__ import annotations

from dataclasses import replace

from simulator.graph.attention import AttentionCore, attention_core
from simulator.graph.context_parallel import attention_core as fused_attention_core
from simulator.graph.fused_attention import HeadDims
from simulator.graph.layer_parts import LayerParts
from simulator.graph.mla import mla_attention
from simulator.graph.mlp import dense_mlp, mlp_up_spec
from simulator.graph.moe.layer import moe_mlp
from simulator.graph.ops import Block, CommOp, Op, OpKind, Phase
from simulator.graph.primitives import (
    ShapeContext,
    dropout_add,
    grad_accum_op,
    layer_context,
    norm_op,
    norm_weight_grad,
    pointwise,
)
from simulator.graph.quantize import LinearSpec, linear, linear_comm, norm_writes
from simulator.graph.recompute import selective_block
from simulator.job.enums import PositionEmbedding, Recompute, RecomputeModule, SoftmaxType
from simulator.job.layer_pattern import DENSE, LayerKind
from simulator.job.specs import Job


def build_layer(job: Job, kind: LayerKind = DENSE) -> Block:
    """One transformer layer of `kind` (Megatron's TransformerLayer) for one micro-batch."""
    m, c = job.model, layer_context(job, kind.high_precision)
    parts = LayerParts()
    acc = c.grad_bytes if c.fused_accumulation else 0
    if m.multi_latent_attention:
        core = mla_attention(job, c, parts, acc)
    else:
        core = _gqa_attention(job, c, parts, acc, kind)
    if kind.moe:
        parts.add(norm_op(c, "post_attn_norm", m.norm))
        moe_mlp(job, c, parts, acc)
    else:
        up = mlp_up_spec(job, c, acc, m.ffn, "mlp")
        parts.add(norm_op(c, "post_attn_norm", m.norm, writes=norm_writes(c, up)))
        dense_mlp(job, c, parts, acc, m.ffn, "mlp")
    parts.add(dropout_add(c, "mlp.dropout_add"))
    parts.small_weights.append(norm_weight_grad(job, c, "post_attn_norm"))
    bwd = parts.bwd + _parameter_gradient_ops(job, c, parts)
    modules = job.training.recompute_modules
    if job.training.recompute is Recompute.SELECTIVE and modules is not None \
            and tuple(modules) != (RecomputeModule.CORE_ATTN,):
        block = selective_block(job, kind, tuple(parts.fwd), tuple(reversed(bwd)), parts, core, c)
        moe_saved = block.moe_saved_bytes
    else:
        block = _with_recompute(job, tuple(parts.fwd), tuple(reversed(bwd)), parts.forward_comm,
                                parts.backward_comm, core, c)
        # full recompute keeps only the layer's input, none of the MoE's tensors
        full = job.training.recompute is Recompute.FULL
        moe_saved = 0.0 if full else parts.moe_saved_bytes
    return replace(block, dispatch_buffer_bytes=parts.dispatch_buffer_bytes,
                   kv_buffer_bytes=core.buffer_bytes, moe_saved_bytes=moe_saved)


def _is_plain_attention(job: Job, kind: LayerKind) -> bool:
    m = job.model
    return (not kind.window and job.parallel.cp == 1 and m.softmax_type is SoftmaxType.VANILLA)


def _gqa_attention(job: Job, c: ShapeContext, parts: LayerParts, acc: int,
                   kind: LayerKind) -> AttentionCore:
    """Input norm, QKV (a column-parallel linear), rope, (query/key norms), the core, the output
    projection (row-parallel) and the residual."""
    m, t, T = job.model, c.t, c.tokens
    heads, groups, d = m.num_attention_heads // t, m.query_groups // t, m.head_dim
    shard = 1 / t if c.sp else 1.0  # Korthikanti: with SP every saved tensor is split by t
    qkv_out = (heads + 2 * groups) * d
    qkv = LinearSpec("qkv", T, qkv_out, m.hidden_size, True, True, False, acc)
    proj = LinearSpec("attn.proj", T, m.hidden_size, heads * d, False, False,
                      job.training.flash_attention, acc)
    parts.add(norm_op(c, "input_norm", m.norm, writes=norm_writes(c, qkv)))
    parts.add_linear(linear(c, qkv, 2 * T * m.hidden_size * shard))
    if m.position_embedding is PositionEmbedding.ROPE:
        parts.add(pointwise("rope", OpKind.ELEMENTWISE, T * (heads + groups) * d, c.dt, 1, 1,
                            variant="rope", bwd_traffic=2.0))
    if m.qk_layernorm:  # per-head norms of queries and keys (TE's q_layernorm / k_layernorm)
        for name, n in (("q_norm", heads), ("k_norm", groups)):
            parts.add(pointwise(f"attn.{name}", OpKind.NORM, T * n * d, c.dt, 1, 1, 2 * T * n * d,
                                m.norm.value, bwd_traffic=3.0, flops_per_elem=5.0))
            parts.small_weights.append(_small_weight_grad(c, f"attn.{name}", T * n * d, d, m.norm.value))
    if _is_plain_attention(job, kind) and not job.model.qk_layernorm:
        core = attention_core(job, c, heads, groups)
    else:
        window = m.window_size if kind.window else None
        core = fused_attention_core(job, c, HeadDims(heads, groups, d, d), window)
    parts.fwd.extend(core.forward)
    parts.bwd.extend(core.backward)
    parts.add_linear(linear(c, proj, 2 * T * heads * d))
    parts.add(dropout_add(c, "attn.dropout_add"))
    qkv_c, proj_c = linear_comm(c, qkv), linear_comm(c, proj)
    parts.attn_fwd_comm += [*qkv_c.forward, *core.forward_comm, *proj_c.forward]
    parts.attn_bwd_comm += [*proj_c.backward, *core.backward_comm, *qkv_c.backward]
    parts.linears.update({"qkv": (m.hidden_size, qkv_out), "attn.proj": (heads * d, m.hidden_size)})
    parts.small_weights.insert(0, norm_weight_grad(job, c, "input_norm"))
    return core


def _small_weight_grad(c: ShapeContext, name: str, numel: float, params: int,
                       variant: str) -> tuple[Op, list[int]]:
    """The gradient of a small weight reduced over `numel` elements (a norm of heads or of a
    latent), and its tensor size."""
    n = int(numel)
    op = Op(f"{name}.wgrad", OpKind.NORM, Phase.BACKWARD_WEIGHT, (n,), c.dt, 2 * n, 2 * n * c.dt,
            0.0, f"{variant}_wgrad")
    return op, [params]


def _parameter_gradient_ops(job: Job, c: ShapeContext, parts: LayerParts) -> list[Op]:
    """Kernels that produce and accumulate parameter gradients besides the weight-gradient GEMMs.

    Bias gradients are column sums of the output gradient and norm weights' gradients reductions
    over tokens (separate kernels in Megatron). Each parameter tensor's micro-batch gradient is
    then added into its accumulated gradient by one memory-bound kernel -- PyTorch autograd /
    DeepSpeed, and Megatron's gradient hook (`param.main_grad.add_(param.grad)`) for biases and
    norms -- except the GEMM weights when gradient-accumulation fusion writes them in place.
    """
    m = job.model
    ops: list[Op] = []
    tensors: list[int] = []
    for name, (k, n) in parts.linears.items():
        copies = parts.linear_tensors.get(name, 1)
        if not c.fused_accumulation:
            tensors += [k * n] * copies
        if m.use_bias:
            numel = parts.linear_tokens.get(name, c.tokens) * n
            ops.append(Op(f"{name}.bias_grad", OpKind.ELEMENTWISE, Phase.BACKWARD_WEIGHT, (numel,),
                          c.dt, numel, numel * c.dt, 0.0, "bias_grad"))
            tensors += [n] * copies
    for wgrad, params in parts.small_weights:
        ops.append(wgrad)
        tensors += params
    return ops + [grad_accum_op(f"grad_accum.{i}", numel, c.grad_bytes)
                  for i, numel in enumerate(tensors)]


def _with_recompute(job: Job, fwd: tuple[Op, ...], bwd: tuple[Op, ...],
                    fwd_comm: tuple[CommOp, ...], bwd_comm: tuple[CommOp, ...],
                    core: AttentionCore, c: ShapeContext) -> Block:
    """Apply the recompute mode: what is saved per micro-batch and what re-runs before backward.
    Selective recompute checkpoints the core attention, flash attention included
    (Megatron-Core `Attention._checkpointed_attention_forward`, recompute module `core_attn`):
    its inputs Q, K, V stay saved, its internals are dropped and its forward runs again (with
    context parallelism, its K/V exchanges too). Other `training.recompute_modules`:
    simulator.graph.recompute."""
    full = sum(op.saved_bytes for op in fwd)
    mode = job.training.recompute
    if mode is Recompute.FULL:
        layer_input = c.dt * c.sp_tokens * c.h
        return Block(fwd, bwd, fwd, fwd_comm, bwd_comm, fwd_comm, layer_input, full)
    if mode is Recompute.SELECTIVE:
        internals = sum(op.saved_bytes for op in core.forward)
        return Block(fwd, bwd, tuple(core.forward), fwd_comm, bwd_comm, core.forward_comm,
                     full - internals + core.inputs_bytes, internals)
    return Block(fwd, bwd, (), fwd_comm, bwd_comm, (), full, 0.0)
