"""The output block: final norm, the vocab-parallel logits GEMM, Megatron's vocab-parallel
cross-entropy on fp32 logits, the loss, and the output weight's gradient."""

from __future__ import annotations

from simulator.graph.embedding import tied_on_one_stage, vocab_shard
from simulator.graph.ops import Block, CommGroup, CommOp, Op, OpKind, Phase
from simulator.graph.primitives import (
    FP32,
    gemm,
    grad_accum_op,
    norm_op,
    norm_weight_grad,
    shape_context,
    small_kernels,
)
from simulator.graph.tp_comm import column_parallel
from simulator.job.enums import CollectiveKind
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
    fwd = (norm_f, logits_f, ce_f, loss_f)
    saved = sum(op.saved_bytes for op in fwd)
    # the 16-bit logits live while their fp32 copy is made; the backward works in place on the
    # fp32 softmax and casts the gradient back to 16 bits (VocabParallelCrossEntropy)
    logits16 = c.dt * c.tokens * vocab
    return Block(fwd, (loss_b, ce_b, *logits_b, *params, norm_b), (), tuple(comm),
                 logits_c.backward, (), saved, logits16, logits16)
