"""Job -> operator graph of one micro-batch: transformer layer, embedding and head blocks.

Every transformer layer of a job is identical, so the graph holds one `Block` per kind and the
schedule repeats it; a pipeline chunk's cost is `layers * layer cost` (identical layers are costed
once). Shapes are per GPU: tensor parallelism (tp) splits heads, the FFN and the vocabulary;
sequence parallelism splits norms, dropouts and residuals along the sequence (Korthikanti et al.
2022). Saved-activation bytes follow Korthikanti et al. 2022, Sec. 4 (fp16/bf16 activations,
1-byte dropout masks).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.enums import CollectiveKind, Norm, PositionEmbedding, Precision, Recompute
from simulator.ops import CommGroup, CommOp, Op, OpKind, Phase
from simulator.params import padded_vocab
from simulator.specs import Job

MASK_BYTES = 1  # dropout masks are stored as bytes
FP32 = 4


@dataclass(frozen=True)
class Block:
    """The kernels and blocking tensor-parallel collectives of one block for one micro-batch."""

    forward: tuple[Op, ...]
    backward: tuple[Op, ...]
    recompute: tuple[Op, ...]
    forward_comm: tuple[CommOp, ...]
    backward_comm: tuple[CommOp, ...]
    recompute_comm: tuple[CommOp, ...]
    saved_bytes: float  # held from the micro-batch's forward until its backward
    working_bytes: float  # transient during its backward (e.g. the recomputed activations)


@dataclass(frozen=True)
class JobGraph:
    layer: Block
    embedding: Block
    head: Block
    layers_per_chunk: int
    p2p_bytes: float  # activation (or its gradient) sent between stages per micro-batch per GPU


@dataclass(frozen=True)
class _Ctx:
    """Per-GPU shape context of a job."""

    b: int
    s: int
    h: int
    t: int
    sp: bool
    dt: int  # activation dtype bytes

    @property
    def tokens(self) -> int:
        return self.b * self.s

    @property
    def sp_tokens(self) -> float:
        """Tokens held by one rank in the sequence-split regions."""
        return self.tokens / self.t if self.sp else self.tokens


def _gemm(name: str, m: int, n: int, k: int, dt: int, saved: float, batch: int = 1,
          kind: OpKind = OpKind.GEMM) -> tuple[Op, list[Op]]:
    """A matmul Y[m,n] = X[m,k] W[k,n] and its backward (data- and weight-gradient GEMMs)."""
    flops = 2.0 * batch * m * n * k

    def op(nm: str, phase: Phase, mm: int, nn: int, kk: int, save: float = 0.0) -> Op:
        traffic = batch * (mm * kk + kk * nn + mm * nn) * dt
        return Op(nm, kind, phase, (batch, mm, nn, kk), dt, flops, traffic, save)

    fwd = op(name, Phase.FORWARD, m, n, k, saved)
    dgrad = op(f"{name}.dgrad", Phase.BACKWARD_DATA, m, k, n)
    # attention bmms have no weights: their second gradient is another data gradient
    second = Phase.BACKWARD_DATA if kind is OpKind.BMM else Phase.BACKWARD_WEIGHT
    wgrad = op(f"{name}.{'dgrad2' if kind is OpKind.BMM else 'wgrad'}", second, n, k, m)
    return fwd, [dgrad, wgrad]


def _pointwise(name: str, kind: OpKind, numel: float, dt: int, reads: float, writes: float,
               saved: float = 0.0, variant: str = "", bwd_traffic: float = 3.0,
               flops_per_elem: float = 1.0) -> tuple[Op, Op]:
    """A memory-bound kernel and its backward (reads y/x and dy, writes dx by default)."""
    n = int(numel)
    fwd = Op(name, kind, Phase.FORWARD, (n,), dt, flops_per_elem * n, (reads + writes) * n * dt,
             saved, variant)
    bwd = Op(f"{name}.bwd", kind, Phase.BACKWARD, (n,), dt, 2 * flops_per_elem * n,
             bwd_traffic * n * dt, 0.0, variant)
    return fwd, bwd


def _tp_comm(c: _Ctx, name: str, gather: bool) -> CommOp | None:
    """The tp collective around a parallel region: all-reduce, or with sequence parallelism an
    all-gather (entering) / reduce-scatter (leaving)."""
    if c.t == 1:
        return None
    nbytes = c.tokens * c.h * c.dt
    if not c.sp:
        return None if gather else CommOp(name, CollectiveKind.ALL_REDUCE, nbytes, CommGroup.TP)
    kind = CollectiveKind.ALL_GATHER if gather else CollectiveKind.REDUCE_SCATTER
    return CommOp(name, kind, nbytes, CommGroup.TP)


def _mirror(comm: CommOp | None) -> CommOp | None:
    """The backward of a tp collective: all-reduce <-> identity, all-gather <-> reduce-scatter."""
    if comm is None:
        return None
    swap = {CollectiveKind.ALL_GATHER: CollectiveKind.REDUCE_SCATTER,
            CollectiveKind.REDUCE_SCATTER: CollectiveKind.ALL_GATHER,
            CollectiveKind.ALL_REDUCE: CollectiveKind.ALL_REDUCE}
    return CommOp(f"{comm.name}.bwd", swap[comm.kind], comm.bytes, comm.group)


def _norm(c: _Ctx, name: str, variant: Norm, saved: bool = True) -> tuple[Op, Op]:
    numel = c.sp_tokens * c.h
    return _pointwise(name, OpKind.NORM, numel, c.dt, 1, 1, 2 * numel if saved else 0.0,
                      variant.value, bwd_traffic=3.0, flops_per_elem=5.0)


def _dropout_add(c: _Ctx, name: str) -> tuple[Op, Op]:
    """Fused bias-dropout-residual-add; saves the dropout mask."""
    numel = c.sp_tokens * c.h
    return _pointwise(name, OpKind.DROPOUT, numel, c.dt, 2, 1, MASK_BYTES * numel,
                      "bias_dropout_add", bwd_traffic=2.5)


def fused_softmax_available(job: Job, heads_per_rank: int) -> bool:
    """Whether Megatron's fused scale-mask-softmax kernel runs (its
    `FusedScaleMaskSoftmax.is_kernel_available`, 16-bit inputs): 16 < seq <= 4096, seq % 4 == 0,
    and micro-batch x heads per rank a multiple of the kernel's batches per block (4 for seq >
    128, else 8). Otherwise Megatron falls back to separate PyTorch kernels -- e.g. 16 heads on 8
    tensor-parallel ranks at micro-batch 1."""
    s = job.model.seq_length
    if not (16 < s <= 4096 and s % 4 == 0):
        return False
    per_block = 4 if s > 128 else 8
    return (job.training.micro_batch_size * heads_per_rank) % per_block == 0


def _softmax(job: Job, c: _Ctx, heads: int, scores: float) -> tuple[Op, Op]:
    """Attention softmax: Megatron's fused kernel, or its unfused fallback -- cast to fp32
    (Megatron forces the fallback softmax to fp32 under query-key layer scaling), scale, masked
    fill, softmax, cast back: five kernels, each a full pass over the scores."""
    if fused_softmax_available(job, heads):
        return _pointwise("attn.softmax", OpKind.SOFTMAX, scores, c.dt, 1, 1, 2 * scores,
                          "scale_mask_softmax", bwd_traffic=3.0, flops_per_elem=5.0)
    n, cast = int(scores), c.dt + FP32
    # bytes per score: cast + scale + mask fill (1-byte mask) + softmax (+ its backward) + cast
    fwd_bytes = cast + 2 * FP32 + (2 * FP32 + 1) + 2 * FP32 + cast
    bwd_bytes = cast + 2 * FP32 + (2 * FP32 + 1) + 3 * FP32 + cast
    fwd = Op("attn.softmax", OpKind.SOFTMAX, Phase.FORWARD, (n,), c.dt, 5.0 * n, fwd_bytes * n,
             FP32 * scores, "unfused_fp32", kernels=5)
    bwd = Op("attn.softmax.bwd", OpKind.SOFTMAX, Phase.BACKWARD, (n,), c.dt, 10.0 * n,
             bwd_bytes * n, 0.0, "unfused_fp32", kernels=5)
    return fwd, bwd


def build_layer(job: Job) -> Block:
    """One transformer layer (Megatron's ParallelTransformerLayer) for one micro-batch."""
    m, c = job.model, _ctx(job)
    t, T, s = c.t, c.tokens, c.s
    heads, groups, d = m.num_attention_heads // t, m.query_groups // t, m.head_dim
    shard = 1 / t if c.sp else 1.0  # Korthikanti: with SP every saved tensor is split by t
    fwd: list[Op] = []
    bwd: list[Op] = []
    attn_core: list[Op] = []
    attn_core_bwd: list[Op] = []

    def add(pair: tuple[Op, Op] | tuple[Op, list[Op]], core: bool = False) -> None:
        f, b = pair
        (attn_core if core else fwd).append(f)
        (attn_core_bwd if core else bwd).extend(b if isinstance(b, list) else [b])

    add(_norm(c, "input_norm", m.norm))
    ag1, rs1 = _tp_comm(c, "attn.all_gather", True), _tp_comm(c, "attn.reduce", False)
    qkv_out = (heads + 2 * groups) * d
    add(_gemm("qkv", T, qkv_out, m.hidden_size, c.dt, 2 * T * m.hidden_size * shard))
    if m.position_embedding is PositionEmbedding.ROPE:
        add(_pointwise("rope", OpKind.ELEMENTWISE, T * (heads + groups) * d, c.dt, 1, 1,
                       variant="rope", bwd_traffic=2.0))
    saved_qkv = 2 * T * heads * d + 2 * 2 * T * groups * d  # Q, K, V (tp-split heads)
    if job.training.flash_attention:
        bh = c.b * heads
        fl = 4.0 * bh * s * s * d / 2  # causal: half of the score matrix is skipped
        io = (3 * T * heads * d + T * heads * d) * c.dt
        lse = FP32 * bh * s
        fwd.append(Op("flash_attention", OpKind.FLASH_ATTENTION, Phase.FORWARD, (bh, s, s, d),
                      c.dt, fl, io, saved_qkv + lse, "causal"))
        bwd.append(Op("flash_attention.bwd", OpKind.FLASH_ATTENTION, Phase.BACKWARD, (bh, s, s, d),
                      c.dt, 2.5 * fl, 2 * io, 0.0, "causal"))
    else:
        bh = c.b * heads
        scores = float(bh * s * s)
        q_k_saved = 2 * T * heads * d + 2 * T * groups * d
        add(_gemm("attn.qk", s, s, d, c.dt, q_k_saved, batch=bh, kind=OpKind.BMM), core=True)
        add(_softmax(job, c, heads, scores), core=True)
        add(_pointwise("attn.dropout", OpKind.DROPOUT, scores, c.dt, 1, 1.5,
                       MASK_BYTES * scores, "dropout", bwd_traffic=2.5), core=True)
        add(_gemm("attn.av", s, d, s, c.dt, 2 * scores + 2 * T * groups * d, batch=bh,
                  kind=OpKind.BMM), core=True)
        fwd.extend(attn_core)
        bwd.extend(attn_core_bwd)
    add(_gemm("attn.proj", T, m.hidden_size, heads * d, c.dt, 2 * T * heads * d))
    add(_dropout_add(c, "attn.dropout_add"))
    add(_norm(c, "post_attn_norm", m.norm))
    ag2, rs2 = _tp_comm(c, "mlp.all_gather", True), _tp_comm(c, "mlp.reduce", False)
    f = m.ffn // t
    up = 2 * f if m.gated_mlp else f
    add(_gemm("mlp.up", T, up, m.hidden_size, c.dt, 2 * T * m.hidden_size * shard))
    act = "swiglu" if m.gated_mlp else "gelu"
    add(_pointwise(f"mlp.{act}", OpKind.ACTIVATION, T * up, c.dt, 1, 0.5 if m.gated_mlp else 1,
                   2 * T * up, act, bwd_traffic=2.5 if m.gated_mlp else 3.0, flops_per_elem=8.0))
    add(_gemm("mlp.down", T, m.hidden_size, f, c.dt, 2 * T * f))
    add(_dropout_add(c, "mlp.dropout_add"))
    fwd_comm = tuple(x for x in (ag1, rs1, ag2, rs2) if x is not None)
    bwd_comm = tuple(x for x in map(_mirror, (ag1, rs1, ag2, rs2)) if x is not None)
    linears = {"qkv": (m.hidden_size, qkv_out), "attn.proj": (heads * d, m.hidden_size),
               "mlp.up": (m.hidden_size, up), "mlp.down": (f, m.hidden_size)}
    bwd += _parameter_gradient_ops(job, c, linears)
    return _with_recompute(job, tuple(fwd), tuple(reversed(bwd)), fwd_comm, bwd_comm,
                           tuple(attn_core), c)


def _norm_weight_grad(job: Job, c: _Ctx, name: str) -> tuple[Op, list[int]]:
    """A norm's weight (and bias) gradient: a reduction over the tokens; and its tensors' sizes."""
    norm = job.model.norm
    numel = int(c.sp_tokens * c.h)
    op = Op(f"{name}.wgrad", OpKind.NORM, Phase.BACKWARD_WEIGHT, (numel,), c.dt, 2 * numel,
            2 * numel * c.dt, 0.0, f"{norm.value}_wgrad")
    return op, [c.h] * (2 if norm is Norm.LAYERNORM else 1)


def _parameter_gradient_ops(job: Job, c: _Ctx, linears: dict[str, tuple[int, int]]) -> list[Op]:
    """Kernels that produce and accumulate parameter gradients besides the weight-gradient GEMMs.

    Bias gradients are column sums of the output gradient and norm weights' gradients reductions
    over tokens (separate kernels in Megatron). Gradient accumulation adds each parameter tensor's
    micro-batch gradient into its accumulated gradient: one memory-bound kernel per tensor (as in
    PyTorch autograd / DeepSpeed without gradient-accumulation fusion).
    """
    m = job.model
    ops: list[Op] = []
    tensors: list[int] = []
    for name, (k, n) in linears.items():
        tensors.append(k * n)
        if m.use_bias:
            numel = c.tokens * n
            ops.append(Op(f"{name}.bias_grad", OpKind.ELEMENTWISE, Phase.BACKWARD_WEIGHT, (numel,),
                          c.dt, numel, numel * c.dt, 0.0, "bias_grad"))
            tensors.append(n)
    for name in ("input_norm", "post_attn_norm"):
        wgrad, params = _norm_weight_grad(job, c, name)
        ops.append(wgrad)
        tensors += params
    return ops + [_grad_accum(f"grad_accum.{i}", numel, _grad_bytes(job))
                  for i, numel in enumerate(tensors)]


def _with_recompute(job: Job, fwd: tuple[Op, ...], bwd: tuple[Op, ...],
                    fwd_comm: tuple[CommOp, ...], bwd_comm: tuple[CommOp, ...],
                    attn_core: tuple[Op, ...], c: _Ctx) -> Block:
    """Apply the recompute mode: what is saved per micro-batch and what re-runs before backward."""
    full = sum(op.saved_bytes for op in fwd)
    mode = job.training.recompute
    if mode is Recompute.FULL:
        layer_input = c.dt * c.sp_tokens * c.h
        return Block(fwd, bwd, fwd, fwd_comm, bwd_comm, fwd_comm, layer_input, full)
    if mode is Recompute.SELECTIVE and attn_core:
        core = sum(op.saved_bytes for op in attn_core)
        # the core's inputs (Q, K, V) stay saved by the surrounding ops; its internals are dropped
        q_k_v = attn_core[0].saved_bytes + 2 * c.tokens * (job.model.query_groups // c.t) * job.model.head_dim
        return Block(fwd, bwd, attn_core, fwd_comm, bwd_comm, (), full - core + q_k_v, core)
    return Block(fwd, bwd, (), fwd_comm, bwd_comm, (), full, 0.0)


# Kernel launches of Megatron's input and loss code besides the big passes (PyTorch index,
# compare, mask and scalar kernels, counted from megatron/core/tensor_parallel): masking the ids
# outside a rank's vocabulary shard (<, >=, |, clone, -, masked_fill) ...
VOCAB_MASK_KERNELS = 6
# ... PyTorch's embedding_dense_backward: a zeroed gradient table plus one scatter kernel for up
# to 3072 tokens, a radix sort and segment reduction (about a dozen kernels) beyond that ...
EMBEDDING_BWD_KERNELS = (2, 12)
EMBEDDING_BWD_SORT_ABOVE = 3072
# ... vocab-parallel cross-entropy on fp32 logits: cast, max, subtract, exp, sum, divide (full
# passes) plus 12 small index/mask/log kernels; its backward: 6 small kernels plus the gradient
# multiply and the cast back to 16 bits ...
CE_FWD_KERNELS, CE_BWD_KERNELS = 18, 8
# ... and the loss itself: masked mean over tokens and the data-parallel average for logging
# (that tiny all-reduce is not modelled as a collective).
LOSS_FWD_KERNELS, LOSS_BWD_KERNELS = 8, 5


def _small(name: str, phase: Phase, kernels: int, numel: float, nbytes: float) -> Op:
    """A burst of tiny index/mask/scalar kernels: negligible traffic, `kernels` launches."""
    return Op(name, OpKind.ELEMENTWISE, phase, (int(numel),), 8, numel, nbytes, 0.0, "small",
              kernels)


def _grad_accum(name: str, numel: float, grad_bytes: int) -> Op:
    """grad += this micro-batch's gradient (one pass: read both, write one)."""
    return Op(name, OpKind.ELEMENTWISE, Phase.BACKWARD_WEIGHT, (int(numel),), grad_bytes, numel,
              3 * numel * grad_bytes, 0.0, "grad_accum")


def _grad_bytes(job: Job) -> int:
    """fp16 runs accumulate 16-bit gradients (DeepSpeed fp16); bf16 runs fp32 main grads."""
    return 4 if job.training.precision is Precision.BF16 else 2


def _tied_on_one_stage(job: Job) -> bool:
    return job.model.tied_embeddings and job.parallel.pp == 1


def build_embedding(job: Job) -> Block:
    """Megatron's Embedding: vocab-parallel word lookup (+ learned positions), [b,s,h] -> [s,b,h]
    transpose, dropout; backward through PyTorch's dense embedding gradient into the tables'
    accumulated gradients (summed with the tied output layer's gradient on the same stage)."""
    m, c = job.model, _ctx(job)
    vocab = padded_vocab(m, c.t) // c.t
    th, dt, gb = c.tokens * c.h, c.dt, _grad_bytes(job)
    sort = EMBEDDING_BWD_KERNELS[c.tokens > EMBEDDING_BWD_SORT_ABOVE]

    def lookup(name: str, rows: int, variant: str) -> tuple[Op, list[Op]]:
        """Forward lookup; backward: zero a dense gradient table, scatter-add the tokens' rows
        (sorting them first for long inputs), accumulate it into the table's gradient."""
        grad = [Op(f"{name}.bwd", OpKind.EMBEDDING, Phase.BACKWARD, (c.tokens, c.h), dt, th,
                   rows * c.h * dt + 3 * th * dt, 0.0, variant, sort)]
        if name == "embedding" and _tied_on_one_stage(job):  # + the logits' weight gradient
            grad.append(Op("embedding.tied_grad_sum", OpKind.ELEMENTWISE, Phase.BACKWARD_WEIGHT,
                           (rows * c.h,), dt, rows * c.h, 3 * rows * c.h * dt, 0.0, "add"))
        grad.append(_grad_accum(f"{name}.grad_accum", rows * c.h, gb))
        return Op(name, OpKind.EMBEDDING, Phase.FORWARD, (c.tokens, c.h), dt, th, 2 * th * dt, 0.0,
                  variant), grad

    fwd: list[Op] = []
    bwd: list[Op] = []
    if c.t > 1:  # ids outside this rank's shard look up row 0 ...
        fwd.append(_small("embedding.vocab_mask", Phase.FORWARD, VOCAB_MASK_KERNELS, c.tokens,
                          VOCAB_MASK_KERNELS * 2 * 8 * c.tokens))
    words, words_grad = lookup("embedding", vocab, "")
    fwd.append(words)
    if c.t > 1:  # ... and their rows are zeroed before the all-reduce
        fwd.append(Op("embedding.vocab_mask_rows", OpKind.ELEMENTWISE, Phase.FORWARD, (th,), dt, th,
                      2 * th * dt, 0.0, "masked_fill"))
    if m.position_embedding is PositionEmbedding.LEARNED:
        positions, positions_grad = lookup("position_embedding", m.seq_length, "position")
        add_f, _ = _pointwise("embedding.add", OpKind.ELEMENTWISE, th, dt, 2, 1)
        fwd += [positions, add_f]  # the add's gradient flows to both tables: no kernel
        bwd += positions_grad
    bwd += words_grad
    tr_f, tr_b = _pointwise("embedding.transpose", OpKind.ELEMENTWISE, th, dt, 1, 1, variant="copy",
                            bwd_traffic=2.0)
    drop_f, drop_b = _pointwise("embedding.dropout", OpKind.DROPOUT, c.sp_tokens * c.h, dt, 2, 1,
                                MASK_BYTES * c.sp_tokens * c.h, "dropout", bwd_traffic=2.5)
    fwd += [tr_f, drop_f]
    bwd = [drop_b, tr_b, *bwd]
    reduce = _tp_comm(c, "embedding.reduce", False)
    comm = (reduce,) if reduce else ()
    return Block(tuple(fwd), tuple(bwd), (), comm, (), (), drop_f.saved_bytes, 0.0)


def build_head(job: Job) -> Block:
    """Final norm, vocab-parallel logits GEMM, Megatron's vocab-parallel cross-entropy on fp32
    logits and the loss; the output weight's gradient accumulates here unless it is the tied
    embedding table on this same stage (then the embedding block sums and accumulates it)."""
    m, c = job.model, _ctx(job)
    vocab = padded_vocab(m, c.t) // c.t
    norm_f, norm_b = _norm(c, "final_norm", m.norm)
    gather = _tp_comm(c, "head.all_gather", True)
    logits_f, logits_b = _gemm("logits", c.tokens, vocab, m.hidden_size, c.dt,
                               2 * c.tokens * m.hidden_size)
    n = c.tokens * vocab
    cast = c.dt + FP32
    # cast, max (read), subtract, exp, sum (read), divide over the (tokens, vocab shard) logits
    ce_f = Op("cross_entropy", OpKind.CROSS_ENTROPY, Phase.FORWARD, (c.tokens, vocab), c.dt,
              5.0 * n, n * (cast + FP32 + 2 * FP32 + 2 * FP32 + FP32 + 2 * FP32), FP32 * n, "",
              CE_FWD_KERNELS)
    # gradient multiply (in place) and the cast back to 16 bits
    ce_b = Op("cross_entropy.bwd", OpKind.CROSS_ENTROPY, Phase.BACKWARD, (c.tokens, vocab), c.dt,
              2.0 * n, n * (2 * FP32 + cast), 0.0, "", CE_BWD_KERNELS)
    loss_f = _small("loss", Phase.FORWARD, LOSS_FWD_KERNELS, c.tokens, LOSS_FWD_KERNELS * 8 * c.tokens)
    loss_b = _small("loss.bwd", Phase.BACKWARD, LOSS_BWD_KERNELS, c.tokens,
                    LOSS_BWD_KERNELS * 8 * c.tokens)
    comm: list[CommOp] = [gather] if gather else []
    if c.t > 1:  # max and sum-exp of the vocab-parallel softmax, and the target logit
        comm += [CommOp(f"cross_entropy.{x}", CollectiveKind.ALL_REDUCE, FP32 * c.tokens, CommGroup.TP)
                 for x in ("max", "target", "sum_exp")]
    bwd_comm = tuple(x for x in (_mirror(gather),) if x is not None)
    gb = _grad_bytes(job)
    wgrad, norm_params = _norm_weight_grad(job, c, "final_norm")
    params = [wgrad, *(_grad_accum(f"final_norm.grad_accum.{i}", numel, gb)
                       for i, numel in enumerate(norm_params))]
    if not _tied_on_one_stage(job):
        params.append(_grad_accum("logits.grad_accum", vocab * c.h, gb))
    fwd = (norm_f, logits_f, ce_f, loss_f)
    saved = sum(op.saved_bytes for op in fwd)
    return Block(fwd, (loss_b, ce_b, *logits_b, *params, norm_b), (), tuple(comm), bwd_comm, (),
                 saved, 0.0)


def build_graph(job: Job) -> JobGraph:
    c = _ctx(job)
    p2p = c.tokens * c.h * c.dt / c.t  # Megatron scatters the p2p tensor over the tp ranks
    layers_per_chunk = job.model.num_layers // (job.parallel.pp * job.parallel.virtual_stages)
    return JobGraph(build_layer(job), build_embedding(job), build_head(job), layers_per_chunk, p2p)


def _ctx(job: Job) -> _Ctx:
    return _Ctx(job.training.micro_batch_size, job.model.seq_length, job.model.hidden_size,
                job.parallel.tp, job.parallel.sequence_parallel and job.parallel.tp > 1,
                job.training.precision.bytes)
