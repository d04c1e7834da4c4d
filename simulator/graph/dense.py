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
    grad_accum_op,
    norm_op,
    norm_weight_grad,
    pointwise,
    shape_context,
)
from simulator.graph.quantize import LinearSpec, gathered_bytes, linear, norm_writes, runs_low
from simulator.graph.tp_comm import column_parallel, row_parallel
from simulator.job.enums import PositionEmbedding, Recompute
from simulator.job.specs import Job


def build_layer(job: Job, c: ShapeContext | None = None) -> Block:
    """One transformer layer (Megatron's TransformerLayer) for one micro-batch; `c`: its shape
    context (default the job's; a bf16 layer of an fp8 run passes one without the recipe).
    Its four linears run in the recipe's format when it has one (simulator.graph.quantize)."""
    m = job.model
    c = c or shape_context(job)
    t, T = c.t, c.tokens
    heads, groups, d = m.num_attention_heads // t, m.query_groups // t, m.head_dim
    shard = 1 / t if c.sp else 1.0  # Korthikanti: with SP every saved tensor is split by t
    fwd: list[Op] = []
    bwd: list[Op] = []

    def add(pair: tuple[Op, Op] | tuple[Op, list[Op]]) -> None:
        f, b = pair
        fwd.append(f)
        bwd.extend(b if isinstance(b, list) else [b])

    def add_linear(spec: LinearSpec, saved: float) -> None:
        f, b = linear(c, spec, saved)
        fwd.extend(f)
        bwd.extend(b)

    acc = c.grad_bytes if c.fused_accumulation else 0
    f = m.ffn // t
    up = 2 * f if m.gated_mlp else f
    qkv_out = (heads + 2 * groups) * d
    specs = {"qkv": LinearSpec("qkv", T, qkv_out, m.hidden_size, True, True, False, acc),
             "attn.proj": LinearSpec("attn.proj", T, m.hidden_size, heads * d, False, False,
                                     job.training.flash_attention, acc),
             "mlp.up": LinearSpec("mlp.up", T, up, m.hidden_size, True, True, False, acc),
             "mlp.down": LinearSpec("mlp.down", T, m.hidden_size, f, False, False, False, acc)}
    add(norm_op(c, "input_norm", m.norm, writes=norm_writes(c, specs["qkv"])))
    add_linear(specs["qkv"], 2 * T * m.hidden_size * shard)
    if m.position_embedding is PositionEmbedding.ROPE:
        add(pointwise("rope", OpKind.ELEMENTWISE, T * (heads + groups) * d, c.dt, 1, 1,
                       variant="rope", bwd_traffic=2.0))
    core = attention_core(job, c, heads, groups)
    fwd.extend(core.forward)
    bwd.extend(core.backward)
    add_linear(specs["attn.proj"], 2 * T * heads * d)
    add(dropout_add(c, "attn.dropout_add"))
    add(norm_op(c, "post_attn_norm", m.norm, writes=norm_writes(c, specs["mlp.up"])))
    add_linear(specs["mlp.up"], 2 * T * m.hidden_size * shard)
    act = "swiglu" if m.gated_mlp else "gelu"
    add(pointwise(f"mlp.{act}", OpKind.ACTIVATION, T * up, c.dt, 1, 0.5 if m.gated_mlp else 1,
                   2 * T * up, act, bwd_traffic=2.5 if m.gated_mlp else 3.0, flops_per_elem=8.0))
    add_linear(specs["mlp.down"], 2 * T * f)
    add(dropout_add(c, "mlp.dropout_add"))
    fwd_comm, bwd_comm = _tp_collectives(job, c, specs)
    linears = {"qkv": (m.hidden_size, qkv_out), "attn.proj": (heads * d, m.hidden_size),
               "mlp.up": (m.hidden_size, up), "mlp.down": (f, m.hidden_size)}
    bwd += _parameter_gradient_ops(job, c, linears)
    return _with_recompute(job, tuple(fwd), tuple(reversed(bwd)), fwd_comm, bwd_comm, core, c)


def _tp_collectives(job: Job, c: ShapeContext, specs: dict[str, LinearSpec]
                    ) -> tuple[tuple[CommOp, ...], tuple[CommOp, ...]]:
    """The layer's tensor-parallel collectives (simulator.graph.tp_comm), with quantized
    all-gathers where the linear runs low and TE's userbuffers overlap when enabled."""
    nbytes = c.tokens * c.h * c.dt
    overlap = c.fw.async_tp_grad_allreduce
    ub = job.parallel.tp_comm_overlap
    comms = {}
    for name, spec in specs.items():
        fmt = runs_low(c, name)
        amax = bool(fmt and fmt.amax_pass)
        if spec.column_parallel:
            moved = gathered_bytes(c, name, c.tokens * spec.k, 1)
            comms[name] = column_parallel(name, nbytes, c.t, c.sp, overlap, gathered=moved,
                                          overlap_gemm=ub, amax=amax)
        else:
            moved = gathered_bytes(c, name, c.tokens * spec.n, 2)
            comms[name] = row_parallel(name, nbytes, c.t, c.sp, gathered=moved, overlap_gemm=ub,
                                       amax=amax)
    qkv_c, proj_c, up_c, down_c = (comms[k] for k in ("qkv", "attn.proj", "mlp.up", "mlp.down"))
    fwd_comm = qkv_c.forward + proj_c.forward + up_c.forward + down_c.forward
    bwd_comm = down_c.backward + up_c.backward + proj_c.backward + qkv_c.backward
    return fwd_comm, bwd_comm


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
