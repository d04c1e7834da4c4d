"""The input block: Megatron's vocab-parallel Embedding (word lookup, learned positions, the
[b,s,h] -> [s,b,h] transpose, embedding dropout) and its backward through PyTorch's dense
embedding gradient; the vocabulary shard each tensor-parallel rank holds."""

from __future__ import annotations

from simulator.graph.ops import Block, Op, OpKind, Phase
from simulator.graph.params import padded_vocab
from simulator.graph.primitives import MASK_BYTES, grad_accum_op, pointwise, shape_context, small_kernels
from simulator.graph.tp_comm import embedding_comm
from simulator.job.enums import PositionEmbedding
from simulator.job.framework import semantics
from simulator.job.specs import Job

# Kernel launches of Megatron's input and loss code besides the big passes (PyTorch index,
# compare, mask and scalar kernels, counted from megatron/core/tensor_parallel): masking the ids
# outside a rank's vocabulary shard (<, >=, |, clone, -, masked_fill) ...
VOCAB_MASK_KERNELS = 6


# ... PyTorch's embedding_dense_backward: a zeroed gradient table plus one scatter kernel for up
# to 3072 tokens, a radix sort and segment reduction (about a dozen kernels) beyond that ...
EMBEDDING_BWD_KERNELS = (2, 12)


EMBEDDING_BWD_SORT_ABOVE = 3072


def tied_on_one_stage(job: Job) -> bool:
    return job.model.tied_embeddings and job.parallel.pp == 1


def vocab_shard(job: Job) -> int:
    """Rows of the (padded, per the framework) vocabulary held by one tp rank."""
    fw = semantics(job.training.framework)
    return padded_vocab(job.model, job.parallel.tp, fw.pads_vocab) // job.parallel.tp


def build_embedding(job: Job) -> Block:
    """Megatron's Embedding: vocab-parallel word lookup (+ learned positions), [b,s,h] -> [s,b,h]
    transpose, dropout; backward through PyTorch's dense embedding gradient into the tables'
    accumulated gradients (summed with the tied output layer's gradient on the same stage,
    unless the output layer accumulated it in place)."""
    m, c = job.model, shape_context(job)
    vocab = vocab_shard(job)
    th, dt = c.tokens * c.h, c.dt
    sort = EMBEDDING_BWD_KERNELS[c.tokens > EMBEDDING_BWD_SORT_ABOVE]

    def lookup(name: str, rows: int, variant: str) -> tuple[Op, list[Op]]:
        """Forward lookup; backward: zero a dense gradient table, scatter-add the tokens' rows
        (sorting them first for long inputs), accumulate it into the table's gradient."""
        grad = [Op(f"{name}.bwd", OpKind.EMBEDDING, Phase.BACKWARD, (c.tokens, c.h), dt, th,
                   rows * c.h * dt + 3 * th * dt, 0.0, variant, sort)]
        if name == "embedding" and tied_on_one_stage(job) and not c.fused_accumulation:
            grad.append(Op("embedding.tied_grad_sum", OpKind.ELEMENTWISE, Phase.BACKWARD_WEIGHT,
                           (rows * c.h,), dt, rows * c.h, 3 * rows * c.h * dt, 0.0, "add"))
        grad.append(grad_accum_op(f"{name}.grad_accum", rows * c.h, c.grad_bytes))
        return Op(name, OpKind.EMBEDDING, Phase.FORWARD, (c.tokens, c.h), dt, th, 2 * th * dt, 0.0,
                  variant), grad

    fwd: list[Op] = []
    bwd: list[Op] = []
    if c.t > 1:  # ids outside this rank's shard look up row 0 ...
        fwd.append(small_kernels("embedding.vocab_mask", Phase.FORWARD, VOCAB_MASK_KERNELS, c.tokens,
                          VOCAB_MASK_KERNELS * 2 * 8 * c.tokens))
    words, words_grad = lookup("embedding", vocab, "")
    fwd.append(words)
    if c.t > 1:  # ... and their rows are zeroed before the all-reduce
        fwd.append(Op("embedding.vocab_mask_rows", OpKind.ELEMENTWISE, Phase.FORWARD, (th,), dt, th,
                      2 * th * dt, 0.0, "masked_fill"))
    if m.position_embedding is PositionEmbedding.LEARNED:
        positions, positions_grad = lookup("position_embedding", m.seq_length, "position")
        add_f, _ = pointwise("embedding.add", OpKind.ELEMENTWISE, th, dt, 2, 1)
        fwd += [positions, add_f]  # the add's gradient flows to both tables: no kernel
        bwd += positions_grad
    bwd += words_grad
    tr_f, tr_b = pointwise("embedding.transpose", OpKind.ELEMENTWISE, th, dt, 1, 1, variant="copy",
                            bwd_traffic=2.0)
    fwd.append(tr_f)
    back = [tr_b]
    saved = 0.0
    if c.hidden_dropout:  # Megatron's embedding dropout uses hidden_dropout
        drop_f, drop_b = pointwise("embedding.dropout", OpKind.DROPOUT, c.sp_tokens * c.h, dt, 2,
                                    1, MASK_BYTES * c.sp_tokens * c.h, "dropout", bwd_traffic=2.5)
        fwd.append(drop_f)
        back.insert(0, drop_b)
        saved = drop_f.saved_bytes
    comm = embedding_comm(th * dt, c.t, c.sp, m.position_embedding is PositionEmbedding.LEARNED)
    return Block(tuple(fwd), tuple(back + bwd), (), comm.forward, comm.backward, (), saved, 0.0)
