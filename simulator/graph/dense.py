"""A dense transformer layer (Megatron's TransformerLayer) for one micro-batch: norms, QKV, the
attention core, projection, MLP, residuals; its tensor-parallel collectives (Megatron-Core's
`core/tensor_parallel/layers.py` and `mappings.py`, see `simulator.graph.tp_comm`); the kernels that
produce and accumulate its parameter gradients; and what the recompute mode saves and re-runs."""

from __future__ import annotations

from simulator.graph.attention import AttentionCore, attention_core
from simulator.graph.ops import Block, CommOp, Op, OpKind, Phase
from simulator.graph.primitives import (
    ShapeContext,
    dropout_add,
    gemm,
    grad_accum_op,
    norm_op,
    norm_weight_grad,
    pointwise,
    shape_context,
)
from simulator.graph.tp_comm import column_parallel, row_parallel
from simulator.job.enums import PositionEmbedding, Recompute
from simulator.job.specs import Job


def build_layer(job: Job) -> Block:
    """One transformer layer (Megatron's TransformerLayer) for one micro-batch."""
    m, c = job.model, shape_context(job)
    t, T = c.t, c.tokens
    heads, groups, d = m.num_attention_heads // t, m.query_groups // t, m.head_dim
    shard = 1 / t if c.sp else 1.0  # Korthikanti: with SP every saved tensor is split by t
    fwd: list[Op] = []
    bwd: list[Op] = []

    def add(pair: tuple[Op, Op] | tuple[Op, list[Op]]) -> None:
        f, b = pair
        fwd.append(f)
        bwd.extend(b if isinstance(b, list) else [b])

    acc = c.grad_bytes if c.fused_accumulation else 0
    add(norm_op(c, "input_norm", m.norm))
    qkv_out = (heads + 2 * groups) * d
    add(gemm("qkv", T, qkv_out, m.hidden_size, c.dt, 2 * T * m.hidden_size * shard,
              accumulate_bytes=acc))
    if m.position_embedding is PositionEmbedding.ROPE:
        add(pointwise("rope", OpKind.ELEMENTWISE, T * (heads + groups) * d, c.dt, 1, 1,
                       variant="rope", bwd_traffic=2.0))
    core = attention_core(job, c, heads, groups)
    fwd.extend(core.forward)
    bwd.extend(core.backward)
    add(gemm("attn.proj", T, m.hidden_size, heads * d, c.dt, 2 * T * heads * d,
              accumulate_bytes=acc))
    add(dropout_add(c, "attn.dropout_add"))
    add(norm_op(c, "post_attn_norm", m.norm))
    f = m.ffn // t
    up = 2 * f if m.gated_mlp else f
    add(gemm("mlp.up", T, up, m.hidden_size, c.dt, 2 * T * m.hidden_size * shard,
              accumulate_bytes=acc))
    act = "swiglu" if m.gated_mlp else "gelu"
    add(pointwise(f"mlp.{act}", OpKind.ACTIVATION, T * up, c.dt, 1, 0.5 if m.gated_mlp else 1,
                   2 * T * up, act, bwd_traffic=2.5 if m.gated_mlp else 3.0, flops_per_elem=8.0))
    add(gemm("mlp.down", T, m.hidden_size, f, c.dt, 2 * T * f, accumulate_bytes=acc))
    add(dropout_add(c, "mlp.dropout_add"))
    nbytes = c.tokens * c.h * c.dt
    overlap = c.fw.async_tp_grad_allreduce
    qkv_c = column_parallel("qkv", nbytes, t, c.sp, overlap)
    up_c = column_parallel("mlp.up", nbytes, t, c.sp, overlap)
    proj_c, down_c = row_parallel("attn.proj", nbytes, t, c.sp), row_parallel("mlp.down", nbytes, t, c.sp)
    fwd_comm = qkv_c.forward + proj_c.forward + up_c.forward + down_c.forward
    bwd_comm = down_c.backward + up_c.backward + proj_c.backward + qkv_c.backward
    linears = {"qkv": (m.hidden_size, qkv_out), "attn.proj": (heads * d, m.hidden_size),
               "mlp.up": (m.hidden_size, up), "mlp.down": (f, m.hidden_size)}
    bwd += _parameter_gradient_ops(job, c, linears)
    return _with_recompute(job, tuple(fwd), tuple(reversed(bwd)), fwd_comm, bwd_comm, core, c)


def _parameter_gradient_ops(job: Job, c: ShapeContext, linears: dict[str, tuple[int, int]]) -> list[Op]:
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
    for name, (k, n) in linears.items():
        if not c.fused_accumulation:
            tensors.append(k * n)
        if m.use_bias:
            numel = c.tokens * n
            ops.append(Op(f"{name}.bias_grad", OpKind.ELEMENTWISE, Phase.BACKWARD_WEIGHT, (numel,),
                          c.dt, numel, numel * c.dt, 0.0, "bias_grad"))
            tensors.append(n)
    for name in ("input_norm", "post_attn_norm"):
        wgrad, params = norm_weight_grad(job, c, name)
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
    its inputs Q, K, V stay saved, its internals are dropped and its forward runs again."""
    full = sum(op.saved_bytes for op in fwd)
    mode = job.training.recompute
    if mode is Recompute.FULL:
        layer_input = c.dt * c.sp_tokens * c.h
        return Block(fwd, bwd, fwd, fwd_comm, bwd_comm, fwd_comm, layer_input, full)
    if mode is Recompute.SELECTIVE:
        internals = sum(op.saved_bytes for op in core.forward)
        return Block(fwd, bwd, tuple(core.forward), fwd_comm, bwd_comm, (),
                     full - internals + core.inputs_bytes, internals)
    return Block(fwd, bwd, (), fwd_comm, bwd_comm, (), full, 0.0)
