"""The output block: final norm, the vocab-parallel logits GEMM, Megatron's vocab-parallel
cross-entropy on fp32 logits, the loss, and the output weight's gradient.

With `training.cross_entropy_fusion: te` (Megatron-Core's `--cross-entropy-loss-fusion
--cross-entropy-fusion-impl te`) the loss is Transformer Engine's `parallel_cross_entropy`, whose
memory differs (TE 2.11 `transformer_engine/pytorch/triton/cross_entropy.py::
cross_entropy_forward`, lines 26-102, and `cross_entropy.py::CrossEntropyFunction`): no fp32 copy
of the logits; the kernels write the gradient into the 16-bit logits in place and the function
saves them (`ctx.save_for_backward(inp.detach())`), so the forward keeps 16-bit logits instead of
an fp32 softmax; besides them only the fp32 per-token loss and the m/d/X_y statistics (3 fp32 a
token, all-gathered over tp). Its backward scales them in place (`element_mul_kernel`). What is
then transient is the output layer's backward (Megatron-Core `tensor_parallel/layers.py`, lines
521-546 at 23e00ed): the input gradient over the whole sequence (`grad_output.matmul(weight)`) and,
with sequence parallelism, its reduce-scattered share. The fused loss's kernel time is not
modelled: the unfused kernels stand in (NOTES.md: a model of TE's kernels made the measured step
times worse)."""

from __future__ import annotations

from dataclasses import replace

from simulator.graph.embedding import tied_on_one_stage, vocab_shard
from simulator.graph.ops import Block, CommGroup, CommOp, Op, OpKind, Phase
from simulator.graph.primitives import (
    FP32,
    ShapeContext,
    gemm,
    grad_accum_op,
    norm_op,
    norm_weight_grad,
    shape_context,
    small_kernels,
)
from simulator.graph.tp_comm import column_parallel
from simulator.job.enums import CollectiveKind, CrossEntropyFusion
from simulator.job.specs import Job

# ... vocab-parallel cross-entropy on fp32 logits: cast, max, subtract, exp, sum, divide (full
# passes) plus 12 small index/mask/log kernels; its backward: 6 small kernels plus the gradient
# multiply and the cast back to 16 bits ...
CE_FWD_KERNELS, CE_BWD_KERNELS = 18, 8


# ... and the loss itself: masked mean over tokens and the data-parallel average for logging
# (that tiny all-reduce is not modelled as a collective).
LOSS_FWD_KERNELS, LOSS_BWD_KERNELS = 8, 5


def build_head(job: Job) -> Block:
    """Final norm, vocab-parallel logits GEMM (a column-parallel linear), Megatron's
    vocab-parallel cross-entropy on fp32 logits and the loss; the output weight's gradient
    accumulates here unless it is the tied embedding table on this same stage (then the
    embedding block sums and accumulates it)."""
    m, c = job.model, shape_context(job)
    vocab = vocab_shard(job)
    norm_f, norm_b = norm_op(c, "final_norm", m.norm)
    acc = c.grad_bytes if c.fused_accumulation else 0
    logits_f, logits_b = gemm("logits", c.tokens, vocab, m.hidden_size, c.dt,
                               2 * c.tokens * m.hidden_size * (1 / c.t if c.sp else 1.0),
                               accumulate_bytes=acc)
    n = c.tokens * vocab
    cast = c.dt + FP32
    # cast, max (read), subtract, exp, sum (read), divide over the (tokens, vocab shard) logits
    ce_f = Op("cross_entropy", OpKind.CROSS_ENTROPY, Phase.FORWARD, (c.tokens, vocab), c.dt,
              5.0 * n, n * (cast + FP32 + 2 * FP32 + 2 * FP32 + FP32 + 2 * FP32), FP32 * n, "",
              CE_FWD_KERNELS)
    # gradient multiply (in place) and the cast back to 16 bits
    ce_b = Op("cross_entropy.bwd", OpKind.CROSS_ENTROPY, Phase.BACKWARD, (c.tokens, vocab), c.dt,
              2.0 * n, n * (2 * FP32 + cast), 0.0, "", CE_BWD_KERNELS)
    loss_f = small_kernels("loss", Phase.FORWARD, LOSS_FWD_KERNELS, c.tokens, LOSS_FWD_KERNELS * 8 * c.tokens)
    loss_b = small_kernels("loss.bwd", Phase.BACKWARD, LOSS_BWD_KERNELS, c.tokens,
                    LOSS_BWD_KERNELS * 8 * c.tokens)
    logits_c = column_parallel("logits", c.tokens * c.h * c.dt, c.t, c.sp, c.fw.async_tp_grad_allreduce)
    comm = list(logits_c.forward)
    if c.t > 1:  # max and sum-exp of the vocab-parallel softmax, and the target logit
        comm += [CommOp(f"cross_entropy.{x}", CollectiveKind.ALL_REDUCE, FP32 * c.tokens, CommGroup.TP)
                 for x in ("max", "target", "sum_exp")]
    wgrad, norm_params = norm_weight_grad(job, c, "final_norm")
    params = [wgrad, *(grad_accum_op(f"final_norm.grad_accum.{i}", numel, c.grad_bytes)
                       for i, numel in enumerate(norm_params))]
    if not tied_on_one_stage(job) and not c.fused_accumulation:
        params.append(grad_accum_op("logits.grad_accum", vocab * c.h, c.grad_bytes))
    logits16 = c.dt * c.tokens * vocab
    if job.training.cross_entropy_fusion is CrossEntropyFusion.TE:
        saved_ce, forward_extra, backward_extra = te_cross_entropy_bytes(c, vocab)
        ce_f = replace(ce_f, saved_bytes=saved_ce)
    else:
        # the 16-bit logits live while their fp32 copy is made; the backward works in place on
        # the fp32 softmax and casts the gradient back to 16 bits (VocabParallelCrossEntropy)
        forward_extra = backward_extra = logits16
    fwd = (norm_f, logits_f, ce_f, loss_f)
    saved = sum(op.saved_bytes for op in fwd)
    return Block(fwd, (loss_b, ce_b, *logits_b, *params, norm_b), (), tuple(comm),
                 logits_c.backward, (), saved, backward_extra, forward_extra)


def te_cross_entropy_bytes(c: ShapeContext, vocab: int) -> tuple[float, float, float]:
    """Transformer Engine's fused cross-entropy (module docstring): what its forward saves (the
    16-bit logits holding the gradient, the fp32 per-token loss), what else is alive at the end of
    its forward (m/d/X_y, 3 fp32 a token, and their tp all-gather), and what the output layer's
    backward allocates while the logits' gradient is alive (the input gradient of the whole
    sequence, and its reduce-scattered share under sequence parallelism)."""
    saved = c.dt * c.tokens * vocab + FP32 * c.tokens
    statistics = 3 * FP32 * c.tokens * (1 + (c.t if c.t > 1 else 0))
    grad_input = c.dt * c.tokens * c.h * (1 + (1 / c.t if c.sp and c.t > 1 else 0))
    return saved, statistics, grad_input
