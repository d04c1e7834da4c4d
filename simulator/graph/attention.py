"""The attention core of a layer: flash attention, or Megatron's unfused `DotProductAttention`
(GQA expand, QK^T bmm, scale-mask-softmax -- fused or its fp32 fallback --, dropout, AV bmm), and
what selective recompute checkpoints of it."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.graph.ops import CommOp, Op, OpKind, Phase
from simulator.graph.primitives import FP32, MASK_BYTES, ShapeContext, gemm, pointwise
from simulator.job.enums import Precision
from simulator.job.precision import FP8_ATTENTION
from simulator.job.specs import Job


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


def _softmax(job: Job, c: ShapeContext, heads: int, scores: float) -> tuple[Op, Op]:
    """Attention softmax: Megatron's fused kernel, or its unfused fallback -- cast to fp32
    (Megatron forces the fallback softmax to fp32 under query-key layer scaling), scale, masked
    fill, softmax, cast back: five kernels, each a full pass over the scores; the fp32
    probabilities are kept for the backward."""
    if fused_softmax_available(job, heads):
        return pointwise("attn.softmax", OpKind.SOFTMAX, scores, c.dt, 1, 1, 2 * scores,
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
class AttentionCore:
    """The attention core's ops (the part selective recompute checkpoints) and the bytes of its
    inputs Q, K, V, which the checkpoint keeps; with context parallelism also its exchanges of
    K and V (simulator.graph.context_parallel) and the buffers they fill."""

    forward: list[Op]
    backward: list[Op]
    inputs_bytes: float
    forward_comm: tuple[CommOp, ...] = ()
    backward_comm: tuple[CommOp, ...] = ()
    buffer_bytes: float = 0.0


def attention_core(job: Job, c: ShapeContext, heads: int, groups: int) -> AttentionCore:
    """Megatron's core attention: flash attention, or `DotProductAttention` (bmm, softmax,
    dropout, bmm) which first `repeat_interleave`s K and V from the query groups to every head
    (GQA) -- an expand kernel per tensor, and full-size K and V saved for the bmms' backward."""
    T, s, d = c.tokens, c.s, job.model.head_dim
    bh = c.b * heads
    inputs = c.dt * T * d * (heads + 2 * groups)
    if job.training.flash_attention:
        fl = 4.0 * bh * s * s * d / 2  # causal: half of the score matrix is skipped
        # FP8 attention (TE's --fp8-dot-product-attention, cuDNN's fused FP8 attention): the
        # QKV GEMM writes Q, K, V in FP8 and the attention's matmuls run at the FP8 peak
        fp8 = c.fp8_attention
        qkv_bytes = 1 if fp8 else c.dt
        io = 3 * T * heads * d * qkv_bytes + T * heads * d * c.dt
        saved = c.dt * T * d * (heads + 2 * groups) * (qkv_bytes / c.dt) if fp8 else inputs
        lse = FP32 * bh * s
        variant, precision = (FP8_ATTENTION, Precision.FP8) if fp8 else ("causal", None)
        flash = Op("flash_attention", OpKind.FLASH_ATTENTION, Phase.FORWARD, (bh, s, s, d), c.dt,
                   fl, io, saved + lse, variant, precision=precision)
        flash_b = Op("flash_attention.bwd", OpKind.FLASH_ATTENTION, Phase.BACKWARD, (bh, s, s, d),
                     c.dt, 2.5 * fl, 2 * io, 0.0, variant, precision=precision)
        return AttentionCore([flash], [flash_b], saved)
    fwd: list[Op] = []
    bwd: list[Op] = []
    kv_heads = groups
    if heads > groups:
        n = T * heads * d
        expand, expand_b = pointwise("attn.kv_expand", OpKind.ELEMENTWISE, 2 * n, c.dt,
                                      groups / heads, 1, variant="repeat_interleave",
                                      bwd_traffic=1 + groups / heads)
        fwd.append(Op(expand.name, expand.kind, expand.phase, expand.shape, c.dt, 0.0,
                      expand.bytes, 0.0, expand.variant, kernels=2))
        bwd.append(Op(expand_b.name, expand_b.kind, expand_b.phase, expand_b.shape, c.dt,
                      expand_b.flops, expand_b.bytes, 0.0, expand_b.variant, kernels=2))
        kv_heads = heads
    scores = float(bh * s * s)
    kv = c.dt * T * kv_heads * d  # K (or V) as the bmm sees it
    qk_f, qk_b = gemm("attn.qk", s, s, d, c.dt, c.dt * T * heads * d + kv, batch=bh,
                       kind=OpKind.BMM)
    soft_f, soft_b = _softmax(job, c, heads, scores)
    fwd += [qk_f, soft_f]
    bwd += [*qk_b, soft_b]
    softmax_fused = soft_f.variant == "scale_mask_softmax"
    if c.attention_dropout:
        drop_f, drop_b = pointwise("attn.dropout", OpKind.DROPOUT, scores, c.dt, 1, 1.5,
                                    MASK_BYTES * scores, "dropout", bwd_traffic=2.5)
        fwd.append(drop_f)
        bwd.append(drop_b)
    # the second bmm saves its probabilities: the dropout's output, the fp32 softmax's 16-bit
    # cast, or (fused softmax, no dropout) the softmax output already kept
    probs = 0.0 if softmax_fused and not c.attention_dropout else c.dt * scores
    av_f, av_b = gemm("attn.av", s, d, s, c.dt, probs + kv, batch=bh, kind=OpKind.BMM)
    fwd.append(av_f)
    bwd.extend(av_b)
    return AttentionCore(fwd, bwd, inputs)
