"""Job -> operator graph of one micro-batch: transformer layer, embedding and head blocks.

Every transformer layer of a job is identical, so the graph holds one `Block` per kind and the
schedule repeats it; a pipeline chunk's cost is `layers * layer cost` (identical layers are costed
once). Shapes are per GPU: tensor parallelism (tp) splits heads, the FFN and the vocabulary;
sequence parallelism splits norms, dropouts and residuals along the sequence (Korthikanti et al.
2022). Saved-activation bytes follow Korthikanti et al. 2022, Sec. 4 (fp16/bf16 activations,
1-byte dropout masks). Tensor-parallel collectives follow Megatron-Core's
`core/tensor_parallel/layers.py` and `mappings.py` (see `simulator.tp_comm`); what differs between
training stacks comes from `simulator.framework`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simulator import graph_eager
from simulator.enums import CollectiveKind, Norm, PositionEmbedding, Recompute
from simulator.framework import MEGATRON_HOST, FrameworkSemantics, HostCost, semantics
from simulator.memo import Memo
from simulator.ops import CommGroup, CommOp, Op, OpKind, Phase
from simulator.params import padded_vocab
from simulator.partition import chunk_layers
from simulator.specs import Job
from simulator.tp_comm import column_parallel, embedding_comm, row_parallel

MASK_BYTES = 1  # dropout masks are stored as bytes
FP32 = 4


@dataclass(frozen=True)
class Block:
    """The kernels and tensor-parallel collectives of one block for one micro-batch."""

    forward: tuple[Op, ...]
    backward: tuple[Op, ...]
    recompute: tuple[Op, ...]
    forward_comm: tuple[CommOp, ...]
    backward_comm: tuple[CommOp, ...]
    recompute_comm: tuple[CommOp, ...]
    saved_bytes: float  # held from the micro-batch's forward until its backward
    working_bytes: float  # transient during its backward (e.g. the recomputed activations)
    forward_transient_bytes: float = 0.0  # alive only at the end of its forward (loss temps)
    host_cost: HostCost = MEGATRON_HOST  # the stack's host time per launch of each direction


@dataclass(frozen=True)
class JobGraph:
    layer: Block
    embedding: Block
    head: Block
    chunk_layers: np.ndarray  # (pp, v) transformer layers of each stage's model chunks
    p2p_bytes: float  # activation (or its gradient) sent between stages per micro-batch per GPU

    @property
    def layers_per_chunk(self) -> int:
        """Layers of the fullest chunk (every chunk's, when the split is even)."""
        return int(self.chunk_layers.max())


@dataclass(frozen=True)
class _Ctx:
    """Per-GPU shape context of a job, and the switches of its framework."""

    b: int
    s: int
    h: int
    t: int
    sp: bool
    dt: int  # activation dtype bytes
    hidden_dropout: bool
    attention_dropout: bool
    fused_accumulation: bool  # weight gradients accumulate inside the wgrad GEMM
    grad_bytes: int  # bytes of an accumulated gradient element
    fw: FrameworkSemantics

    @property
    def tokens(self) -> int:
        return self.b * self.s

    @property
    def sp_tokens(self) -> float:
        """Tokens held by one rank in the sequence-split regions."""
        return self.tokens / self.t if self.sp else self.tokens


def gradient_accumulation_fused(job: Job) -> bool:
    """`training.gradient_accumulation_fusion`, or the framework's default when unset."""
    fused = job.training.gradient_accumulation_fusion
    return semantics(job.training.framework).gradient_accumulation_fusion if fused is None else fused


def grad_bytes(job: Job) -> int:
    """Bytes of one accumulated gradient element (the framework's gradient buffer dtype)."""
    return semantics(job.training.framework).param_bytes(job.training.precision).gradients


def _gemm(name: str, m: int, n: int, k: int, dt: int, saved: float, batch: int = 1,
          kind: OpKind = OpKind.GEMM, accumulate_bytes: int = 0) -> tuple[Op, list[Op]]:
    """A matmul Y[m,n] = X[m,k] W[k,n] and its backward (data- and weight-gradient GEMMs).
    `accumulate_bytes` > 0: the weight gradient is accumulated in place into a gradient buffer of
    that dtype (Megatron's `wgrad_gemm_accum_fp32`): the GEMM reads and writes it."""
    flops = 2.0 * batch * m * n * k

    def op(nm: str, phase: Phase, mm: int, nn: int, kk: int, save: float = 0.0,
           out_bytes: float = dt) -> Op:
        traffic = batch * ((mm * kk + kk * nn) * dt + mm * nn * out_bytes)
        return Op(nm, kind, phase, (batch, mm, nn, kk), dt, flops, traffic, save)

    fwd = op(name, Phase.FORWARD, m, n, k, saved)
    dgrad = op(f"{name}.dgrad", Phase.BACKWARD_DATA, m, k, n)
    if kind is OpKind.BMM:  # attention bmms have no weights: the second gradient is data
        wgrad = op(f"{name}.dgrad2", Phase.BACKWARD_DATA, n, k, m)
    else:
        out = 2 * accumulate_bytes if accumulate_bytes else dt
        wgrad = op(f"{name}.wgrad", Phase.BACKWARD_WEIGHT, n, k, m, out_bytes=out)
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


def _norm(c: _Ctx, name: str, variant: Norm, saved: bool = True) -> tuple[Op, Op]:
    numel = c.sp_tokens * c.h
    return _pointwise(name, OpKind.NORM, numel, c.dt, 1, 1, 2 * numel if saved else 0.0,
                      variant.value, bwd_traffic=3.0, flops_per_elem=5.0)


def _dropout_add(c: _Ctx, name: str) -> tuple[Op, Op]:
    """Megatron's fused bias-dropout-residual-add; saves the dropout mask. With hidden dropout 0
    PyTorch's dropout returns its input (`at::native::dropout`, p == 0): the kernel only adds
    the bias and the residual, and no mask is kept."""
    numel = c.sp_tokens * c.h
    if not c.hidden_dropout:
        return _pointwise(name, OpKind.ELEMENTWISE, numel, c.dt, 2, 1, 0.0, "bias_add",
                          bwd_traffic=2.0)
    return _pointwise(name, OpKind.DROPOUT, numel, c.dt, 2, 1, MASK_BYTES * numel,
                      "bias_dropout_add", bwd_traffic=2.5)


def fused_softmax_available(job: Job, heads_per_rank: int) -> bool:
    """Whether Megatron's fused scale-mask-softmax kernel runs (its
    `FusedScaleMaskSoftmax.is_kernel_available`, 16-bit inputs): 16 < seq <= 4096, seq % 4 == 0,
    and micro-batch x heads per rank a multiple of the kernel's batches per block (4 for seq >
    128, else 8). Otherwise -- or when the stack lacks the compiled kernels
    (`training.fused_softmax: false`) -- Megatron falls back to separate PyTorch kernels, e.g.
    16 heads on 8 tensor-parallel ranks at micro-batch 1."""
    if not job.training.fused_softmax:
        return False
    s = job.model.seq_length
    if not (16 < s <= 4096 and s % 4 == 0):
        return False
    per_block = 4 if s > 128 else 8
    return (job.training.micro_batch_size * heads_per_rank) % per_block == 0


def _softmax(job: Job, c: _Ctx, heads: int, scores: float) -> tuple[Op, Op]:
    """Attention softmax: Megatron's fused kernel, or its unfused fallback -- cast to fp32
    (Megatron forces the fallback softmax to fp32 under query-key layer scaling), scale, masked
    fill, softmax, cast back: five kernels, each a full pass over the scores; the fp32
    probabilities are kept for the backward."""
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


@dataclass(frozen=True)
class _Attention:
    """The attention core's ops (the part selective recompute checkpoints) and the bytes of its
    inputs Q, K, V, which the checkpoint keeps."""

    forward: list[Op]
    backward: list[Op]
    inputs_bytes: float


def _attention_core(job: Job, c: _Ctx, heads: int, groups: int) -> _Attention:
    """Megatron's core attention: flash attention, or `DotProductAttention` (bmm, softmax,
    dropout, bmm) which first `repeat_interleave`s K and V from the query groups to every head
    (GQA) -- an expand kernel per tensor, and full-size K and V saved for the bmms' backward."""
    T, s, d = c.tokens, c.s, job.model.head_dim
    bh = c.b * heads
    inputs = c.dt * T * d * (heads + 2 * groups)
    if job.training.flash_attention:
        fl = 4.0 * bh * s * s * d / 2  # causal: half of the score matrix is skipped
        io = (3 * T * heads * d + T * heads * d) * c.dt
        lse = FP32 * bh * s
        flash = Op("flash_attention", OpKind.FLASH_ATTENTION, Phase.FORWARD, (bh, s, s, d), c.dt,
                   fl, io, inputs + lse, "causal")
        flash_b = Op("flash_attention.bwd", OpKind.FLASH_ATTENTION, Phase.BACKWARD, (bh, s, s, d),
                     c.dt, 2.5 * fl, 2 * io, 0.0, "causal")
        return _Attention([flash], [flash_b], inputs)
    fwd: list[Op] = []
    bwd: list[Op] = []
    kv_heads = groups
    if heads > groups:
        n = T * heads * d
        expand, expand_b = _pointwise("attn.kv_expand", OpKind.ELEMENTWISE, 2 * n, c.dt,
                                      groups / heads, 1, variant="repeat_interleave",
                                      bwd_traffic=1 + groups / heads)
        fwd.append(Op(expand.name, expand.kind, expand.phase, expand.shape, c.dt, 0.0,
                      expand.bytes, 0.0, expand.variant, kernels=2))
        bwd.append(Op(expand_b.name, expand_b.kind, expand_b.phase, expand_b.shape, c.dt,
                      expand_b.flops, expand_b.bytes, 0.0, expand_b.variant, kernels=2))
        kv_heads = heads
    scores = float(bh * s * s)
    kv = c.dt * T * kv_heads * d  # K (or V) as the bmm sees it
    qk_f, qk_b = _gemm("attn.qk", s, s, d, c.dt, c.dt * T * heads * d + kv, batch=bh,
                       kind=OpKind.BMM)
    soft_f, soft_b = _softmax(job, c, heads, scores)
    fwd += [qk_f, soft_f]
    bwd += [*qk_b, soft_b]
    softmax_fused = soft_f.variant == "scale_mask_softmax"
    if c.attention_dropout:
        drop_f, drop_b = _pointwise("attn.dropout", OpKind.DROPOUT, scores, c.dt, 1, 1.5,
                                    MASK_BYTES * scores, "dropout", bwd_traffic=2.5)
        fwd.append(drop_f)
        bwd.append(drop_b)
    # the second bmm saves its probabilities: the dropout's output, the fp32 softmax's 16-bit
    # cast, or (fused softmax, no dropout) the softmax output already kept
    probs = 0.0 if softmax_fused and not c.attention_dropout else c.dt * scores
    av_f, av_b = _gemm("attn.av", s, d, s, c.dt, probs + kv, batch=bh, kind=OpKind.BMM)
    fwd.append(av_f)
    bwd.extend(av_b)
    return _Attention(fwd, bwd, inputs)


def build_layer(job: Job) -> Block:
    """One transformer layer (Megatron's TransformerLayer) for one micro-batch."""
    m, c = job.model, _ctx(job)
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
    add(_norm(c, "input_norm", m.norm))
    qkv_out = (heads + 2 * groups) * d
    add(_gemm("qkv", T, qkv_out, m.hidden_size, c.dt, 2 * T * m.hidden_size * shard,
              accumulate_bytes=acc))
    if m.position_embedding is PositionEmbedding.ROPE:
        add(_pointwise("rope", OpKind.ELEMENTWISE, T * (heads + groups) * d, c.dt, 1, 1,
                       variant="rope", bwd_traffic=2.0))
    core = _attention_core(job, c, heads, groups)
    fwd.extend(core.forward)
    bwd.extend(core.backward)
    add(_gemm("attn.proj", T, m.hidden_size, heads * d, c.dt, 2 * T * heads * d,
              accumulate_bytes=acc))
    add(_dropout_add(c, "attn.dropout_add"))
    add(_norm(c, "post_attn_norm", m.norm))
    f = m.ffn // t
    up = 2 * f if m.gated_mlp else f
    add(_gemm("mlp.up", T, up, m.hidden_size, c.dt, 2 * T * m.hidden_size * shard,
              accumulate_bytes=acc))
    act = "swiglu" if m.gated_mlp else "gelu"
    add(_pointwise(f"mlp.{act}", OpKind.ACTIVATION, T * up, c.dt, 1, 0.5 if m.gated_mlp else 1,
                   2 * T * up, act, bwd_traffic=2.5 if m.gated_mlp else 3.0, flops_per_elem=8.0))
    add(_gemm("mlp.down", T, m.hidden_size, f, c.dt, 2 * T * f, accumulate_bytes=acc))
    add(_dropout_add(c, "mlp.dropout_add"))
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
        wgrad, params = _norm_weight_grad(job, c, name)
        ops.append(wgrad)
        tensors += params
    return ops + [_grad_accum(f"grad_accum.{i}", numel, c.grad_bytes)
                  for i, numel in enumerate(tensors)]


def _with_recompute(job: Job, fwd: tuple[Op, ...], bwd: tuple[Op, ...],
                    fwd_comm: tuple[CommOp, ...], bwd_comm: tuple[CommOp, ...],
                    core: _Attention, c: _Ctx) -> Block:
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


def _grad_accum(name: str, numel: float, nbytes: int) -> Op:
    """grad += this micro-batch's gradient (one pass: read both, write one)."""
    return Op(name, OpKind.ELEMENTWISE, Phase.BACKWARD_WEIGHT, (int(numel),), nbytes, numel,
              3 * numel * nbytes, 0.0, "grad_accum")


def _tied_on_one_stage(job: Job) -> bool:
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
    m, c = job.model, _ctx(job)
    vocab = vocab_shard(job)
    th, dt = c.tokens * c.h, c.dt
    sort = EMBEDDING_BWD_KERNELS[c.tokens > EMBEDDING_BWD_SORT_ABOVE]

    def lookup(name: str, rows: int, variant: str) -> tuple[Op, list[Op]]:
        """Forward lookup; backward: zero a dense gradient table, scatter-add the tokens' rows
        (sorting them first for long inputs), accumulate it into the table's gradient."""
        grad = [Op(f"{name}.bwd", OpKind.EMBEDDING, Phase.BACKWARD, (c.tokens, c.h), dt, th,
                   rows * c.h * dt + 3 * th * dt, 0.0, variant, sort)]
        if name == "embedding" and _tied_on_one_stage(job) and not c.fused_accumulation:
            grad.append(Op("embedding.tied_grad_sum", OpKind.ELEMENTWISE, Phase.BACKWARD_WEIGHT,
                           (rows * c.h,), dt, rows * c.h, 3 * rows * c.h * dt, 0.0, "add"))
        grad.append(_grad_accum(f"{name}.grad_accum", rows * c.h, c.grad_bytes))
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
    fwd.append(tr_f)
    back = [tr_b]
    saved = 0.0
    if c.hidden_dropout:  # Megatron's embedding dropout uses hidden_dropout
        drop_f, drop_b = _pointwise("embedding.dropout", OpKind.DROPOUT, c.sp_tokens * c.h, dt, 2,
                                    1, MASK_BYTES * c.sp_tokens * c.h, "dropout", bwd_traffic=2.5)
        fwd.append(drop_f)
        back.insert(0, drop_b)
        saved = drop_f.saved_bytes
    comm = embedding_comm(th * dt, c.t, c.sp, m.position_embedding is PositionEmbedding.LEARNED)
    return Block(tuple(fwd), tuple(back + bwd), (), comm.forward, comm.backward, (), saved, 0.0)


def build_head(job: Job) -> Block:
    """Final norm, vocab-parallel logits GEMM (a column-parallel linear), Megatron's
    vocab-parallel cross-entropy on fp32 logits and the loss; the output weight's gradient
    accumulates here unless it is the tied embedding table on this same stage (then the
    embedding block sums and accumulates it)."""
    m, c = job.model, _ctx(job)
    vocab = vocab_shard(job)
    norm_f, norm_b = _norm(c, "final_norm", m.norm)
    acc = c.grad_bytes if c.fused_accumulation else 0
    logits_f, logits_b = _gemm("logits", c.tokens, vocab, m.hidden_size, c.dt,
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
    loss_f = _small("loss", Phase.FORWARD, LOSS_FWD_KERNELS, c.tokens, LOSS_FWD_KERNELS * 8 * c.tokens)
    loss_b = _small("loss.bwd", Phase.BACKWARD, LOSS_BWD_KERNELS, c.tokens,
                    LOSS_BWD_KERNELS * 8 * c.tokens)
    logits_c = column_parallel("logits", c.tokens * c.h * c.dt, c.t, c.sp, c.fw.async_tp_grad_allreduce)
    comm = list(logits_c.forward)
    if c.t > 1:  # max and sum-exp of the vocab-parallel softmax, and the target logit
        comm += [CommOp(f"cross_entropy.{x}", CollectiveKind.ALL_REDUCE, FP32 * c.tokens, CommGroup.TP)
                 for x in ("max", "target", "sum_exp")]
    wgrad, norm_params = _norm_weight_grad(job, c, "final_norm")
    params = [wgrad, *(_grad_accum(f"final_norm.grad_accum.{i}", numel, c.grad_bytes)
                       for i, numel in enumerate(norm_params))]
    if not _tied_on_one_stage(job) and not c.fused_accumulation:
        params.append(_grad_accum("logits.grad_accum", vocab * c.h, c.grad_bytes))
    fwd = (norm_f, logits_f, ce_f, loss_f)
    saved = sum(op.saved_bytes for op in fwd)
    # the 16-bit logits live while their fp32 copy is made; the backward works in place on the
    # fp32 softmax and casts the gradient back to 16 bits (VocabParallelCrossEntropy)
    logits16 = c.dt * c.tokens * vocab
    return Block(fwd, (loss_b, ce_b, *logits_b, *params, norm_b), (), tuple(comm),
                 logits_c.backward, (), saved, logits16, logits16)


def p2p_bytes(job: Job) -> float:
    """The activation sent between pipeline stages per micro-batch: Megatron-Core sends the full
    [s, b, h] tensor, split along the sequence only under sequence parallelism
    (`pipeline_parallel/schedules.py::get_tensor_shapes`); stacks with the older scatter-gather
    optimization send 1/tp of it (simulator.framework)."""
    c = _ctx(job)
    split = c.sp or c.fw.p2p_scatter_gather
    return c.tokens * c.h * c.dt / (c.t if split else 1)


# Parallel-plan fields the blocks never read: every layout that differs only in these shares
# its blocks (a new ParallelPlan field is part of the key unless added here).
LAYOUT_ONLY = frozenset({"pp", "dp", "virtual_stages", "schedule", "distributed_optimizer",
                         "overlap_grad_reduce", "bucket_size_mb", "first_stage_layers",
                         "last_stage_layers"})

BLOCKS: Memo[tuple[Block, Block, Block]] = Memo(maxsize=512)


def blocks_key(job: Job) -> tuple[object, ...]:
    """What the layer, embedding and head blocks depend on: the whole model and training
    configs, the parallel plan's non-layout fields, whether the pipeline has one stage (a tied
    embedding's gradients are then summed on it), and for the eager stack the number of
    micro-batches (its gradient accumulation kernels run from the second one on).
    tests/simulator_tests/test_caches.py checks that layouts sharing a key share their blocks."""
    par = job.parallel
    kept = tuple(v for k, v in par.__dict__.items() if k not in LAYOUT_ONLY)
    eager = semantics(job.training.framework).eager_autocast
    return job.model, job.training, kept, par.pp == 1, job.num_microbatches if eager else 0


def build_graph(job: Job) -> JobGraph:
    """The job's graph. Its blocks are memoized under `blocks_key` (layouts of one model, tp and
    micro-batch share them); the stage split and p2p size are the layout's own."""
    layer, emb, head = BLOCKS.get(blocks_key(job), lambda: build_blocks(job))
    return JobGraph(layer, emb, head, chunk_layers(job), p2p_bytes(job))


def build_blocks(job: Job) -> tuple[Block, Block, Block]:
    """The layer, embedding and head blocks of one micro-batch (not memoized), each carrying the
    host dispatch cost per launch of the stack that runs it (simulator.framework)."""
    fw = semantics(job.training.framework)
    blocks = _eager_blocks(job) if fw.eager_autocast else (
        build_layer(job), build_embedding(job), build_head(job))
    cost = fw.host_launch_cost
    layer, emb, head = (replace(b, host_cost=cost) for b in blocks)
    return layer, emb, head


def _eager_blocks(job: Job) -> tuple[Block, Block, Block]:
    """The eager PyTorch / autocast stack (simulator.graph_eager); tp = 1, no collectives.
    Full recompute (`torch.utils.checkpoint`) keeps each layer's fp32 input and re-runs the
    layer's forward, weight casts included."""
    layer, emb, head = graph_eager.eager_layer(job), graph_eager.eager_embedding(job), \
        graph_eager.eager_head(job)
    T, h = job.training.micro_batch_size * job.model.seq_length, job.model.hidden_size
    if job.training.recompute is Recompute.FULL:
        block = Block(layer.fwd, layer.bwd, layer.fwd, (), (), (), FP32 * T * h, layer.saved_bytes)
    else:
        block = Block(layer.fwd, layer.bwd, (), (), (), (), layer.saved_bytes, 0.0)
    return (block, Block(emb.fwd, emb.bwd, (), (), (), (), emb.saved_bytes, 0.0),
            Block(head.block.fwd, head.block.bwd, (), (), (), (), head.block.saved_bytes,
                  head.backward_transient_bytes, head.forward_transient_bytes))


def _ctx(job: Job) -> _Ctx:
    m, t = job.model, job.training
    return _Ctx(t.micro_batch_size, m.seq_length, m.hidden_size, job.parallel.tp,
                job.parallel.sequence_parallel and job.parallel.tp > 1, t.precision.bytes,
                m.hidden_dropout > 0, m.attention_dropout > 0, gradient_accumulation_fused(job),
                grad_bytes(job), semantics(t.framework))


__all__ = ["BLOCKS", "Block", "JobGraph", "blocks_key", "build_blocks", "build_embedding",
           "build_graph", "build_head",
           "build_layer", "fused_softmax_available", "grad_bytes", "gradient_accumulation_fused"]
