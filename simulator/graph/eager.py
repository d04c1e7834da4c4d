"""The operator graph of eager PyTorch / Hugging Face training under `torch.autocast` (bf16).

What such a stack launches and keeps differs from Megatron (`simulator.graph.blocks`), and was counted
from real H100 traces of these stacks (`../shared/data/traces/h100/*.json.gz`, kernels per layer
by class; `bench/kernel_census.py`) and from what autograd saves (`bench/measure_memory_terms.py`):

- Parameters are fp32; every forward casts each weight and bias to bf16 (one kernel each, the
  copies kept for the backward), and the weight gradients are cast back to fp32 and, from the
  second micro-batch on, added to `.grad` (one kernel each).
- The residual stream, norms, softmax and the loss stay fp32: a linear layer first casts its
  fp32 input to bf16 (one kernel, the copy saved for its backward) -- once per projection, since
  autocast caches only parameters (Hugging Face Llama's separate q/k/v and gate/up projections
  cast the same input three and two times).
- Separate kernels for bias-free dropout, the residual add (fp32 + bf16 -> fp32), GeLU; the
  fallback attention is bmm, scale, mask, fp32 softmax, dropout, cast, bmm. Hugging Face's
  `gelu_new` (GPT-2) is eight eager ops whose intermediates are fp32; Llama's RMSNorm and RoPE
  are eager ops too (6 and 5 kernels). Hugging Face's default `use_cache=True` concatenates K and
  V into a cache in training too, and SDPA then saves those copies.
- The vocabulary is not padded: a GEMM with an odd dimension (GPT-2's 50,257) cannot use the
  aligned Hopper kernels (`gemm_alignment` in simulator.costs.analytic).
- The loss upcasts the bf16 logits to fp32 and keeps log_softmax's fp32 output; its backward
  materializes two more fp32 logits-sized tensors.

Model families follow the project's convention: a gated MLP is a Hugging Face Llama
(RMSNorm, separate projections, RoPE, no biases), otherwise a GPT (LayerNorm, fused QKV, biases).
Only tp = pp = 1 is supported (simulator.job.validation).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.graph.ops import Op, OpKind, Phase
from simulator.job.enums import Activation, Norm, PositionEmbedding
from simulator.job.specs import Job

FP32, BF16, MASK = 4, 2, 1
# Launch counts of eager backward nodes, counted in the traces (per call):
RMSNORM_FWD_KERNELS, RMSNORM_BWD_KERNELS = 6, 14  # pow, mean, add, rsqrt, mul, mul / autograd
ROPE_FWD_KERNELS, ROPE_BWD_KERNELS = 5, 10  # mul, neg, cat, mul, add (per tensor) / backward
GELU_NEW_FWD_KERNELS, GELU_NEW_BWD_KERNELS = 9, 12
SDPA_FWD_KERNELS, SDPA_BWD_KERNELS = 2, 4  # (+ philox unpack with dropout) memset, fprop / bwd
LOSS_FWD_KERNELS, LOSS_BWD_KERNELS = 6, 4  # nll, fills, label shift / nll bwd, fills
EMBEDDING_BWD_KERNELS = (5, 15)  # embedding_dense_backward: direct, or sorted above 3072 ids


@dataclass
class _Ops:
    """Forward and backward ops of a block under construction, with their saved bytes."""

    fwd: list[Op] = field(default_factory=list)
    bwd: list[Op] = field(default_factory=list)

    def add(self, f: Op, *b: Op) -> None:
        self.fwd.append(f)
        self.bwd.extend(b)


def _ew(name: str, phase: Phase, numel: float, bytes_per: float, variant: str,
        kernels: float = 1, saved: float = 0.0, kind: OpKind = OpKind.ELEMENTWISE,
        flops_per: float = 1.0, dtype: int = BF16) -> Op:
    n = int(numel)
    return Op(name, kind, phase, (n,), dtype, flops_per * n, bytes_per * n, saved, variant, kernels)


def _gemm_ops(name: str, m: int, n: int, k: int, memsets: float) -> tuple[Op, Op, Op]:
    flops = 2.0 * m * n * k

    def op(nm: str, phase: Phase, mm: int, nn: int, kk: int, kernels: float) -> Op:
        return Op(nm, OpKind.GEMM, phase, (1, mm, nn, kk), BF16, flops,
                  (mm * kk + kk * nn + mm * nn) * BF16, 0.0, "", kernels)

    return (op(name, Phase.FORWARD, m, n, k, 1 + memsets),
            op(f"{name}.dgrad", Phase.BACKWARD_DATA, m, k, n, 2),
            op(f"{name}.wgrad", Phase.BACKWARD_WEIGHT, n, k, m, 1))


def _linear(o: _Ops, name: str, T: int, k: int, n: int, bias: bool, cast_input: bool,
            accumulate: float) -> float:
    """An autocast linear: cast W (and b, and an fp32 input), GEMM; backward: dgrad, wgrad,
    bias reduction, the gradients cast back to fp32 and accumulated into `.grad`. Returns the
    bytes it saves for the backward (the bf16 input copy when it made one)."""
    params = [k * n] + ([n] if bias else [])
    for i, p in enumerate(params):
        o.add(_ew(f"{name}.cast{i}", Phase.FORWARD, p, FP32 + BF16, "autocast_weight"),
              _ew(f"{name}.grad_cast{i}", Phase.BACKWARD_WEIGHT, p, BF16 + FP32, "grad_cast"))
        if accumulate > 0:
            o.bwd.append(_ew(f"{name}.grad_accum{i}", Phase.BACKWARD_WEIGHT, p * accumulate,
                             3 * FP32, "grad_accum", kernels=accumulate, dtype=FP32))
    saved = 0.0
    if cast_input:
        saved = BF16 * T * k
        o.add(_ew(f"{name}.input_cast", Phase.FORWARD, T * k, FP32 + BF16, "autocast_input"),
              _ew(f"{name}.input_grad_cast", Phase.BACKWARD, T * k, BF16 + FP32, "grad_cast"))
    # the traces show a memset before the GEMMs that widen their input (QKV, fc1, gate, up)
    fwd, dgrad, wgrad = _gemm_ops(name, T, n, k, memsets=1 if n > k else 0)
    o.add(fwd, dgrad, wgrad)
    if bias:
        o.bwd.append(_ew(f"{name}.bias_grad", Phase.BACKWARD_WEIGHT, T * n, BF16, "bias_grad",
                         kernels=2))
    return saved


def _norm(o: _Ops, name: str, job: Job, T: int, h: int) -> float:
    """fp32 norm of the fp32 residual stream; returns its saved bytes."""
    if job.model.norm is Norm.RMSNORM:  # Hugging Face LlamaRMSNorm: eager ops, keeps x and x*rstd
        o.add(_ew(name, Phase.FORWARD, T * h, 7 * FP32, "rmsnorm_eager", RMSNORM_FWD_KERNELS,
                  2 * FP32 * T * h, OpKind.NORM, 5.0, FP32),
              _ew(f"{name}.bwd", Phase.BACKWARD, T * h, 10 * FP32, "rmsnorm_eager",
                  RMSNORM_BWD_KERNELS, kind=OpKind.NORM, flops_per=10.0, dtype=FP32))
        return 2 * FP32 * T * h
    o.add(_ew(name, Phase.FORWARD, T * h, 2 * FP32, "layernorm_fp32", 1, FP32 * T * h,
              OpKind.NORM, 5.0, FP32),
          _ew(f"{name}.bwd", Phase.BACKWARD, T * h, 3 * FP32, "layernorm_fp32", 2,
              kind=OpKind.NORM, flops_per=10.0, dtype=FP32))
    return FP32 * T * h


def _residual(o: _Ops, name: str, T: int, h: int, dropout: bool) -> float:
    """(dropout of the bf16 branch and) the fp32 residual add; backward: the gradient cast to
    bf16 for the branch, the dropout mask, and the residual gradient sum."""
    saved = 0.0
    if dropout:
        saved = MASK * T * h
        o.add(_ew(f"{name}.dropout", Phase.FORWARD, T * h, 2 * BF16 + MASK, "dropout", 1, saved,
                  OpKind.DROPOUT),
              _ew(f"{name}.dropout.bwd", Phase.BACKWARD, T * h, 2 * BF16 + MASK, "dropout", 1,
                  kind=OpKind.DROPOUT))
    o.add(_ew(f"{name}.add", Phase.FORWARD, T * h, 2 * FP32 + BF16, "residual_fp32"),
          _ew(f"{name}.add.bwd", Phase.BACKWARD, T * h, 3 * FP32 + BF16, "residual_fp32", 2))
    return saved


def _attention(o: _Ops, job: Job, T: int) -> float:
    """Core attention; returns the bytes it saves (including the projection's input)."""
    m, t = job.model, job.training
    b, s, h, d = t.micro_batch_size, m.seq_length, m.hidden_size, m.head_dim
    heads, groups = m.num_attention_heads, m.query_groups
    kv = T * groups * d
    dropout = m.attention_dropout > 0
    saved = 0.0
    if m.gated_mlp:  # Hugging Face Llama: RoPE on q and k (fp32 results), the KV-cache copies
        for nm, n in (("q", T * h), ("k", kv)):
            o.add(_ew(f"rope.{nm}", Phase.FORWARD, n, 5 * BF16 + 3 * FP32, "rope_eager",
                      ROPE_FWD_KERNELS),
                  _ew(f"rope.{nm}.bwd", Phase.BACKWARD, n, 6 * FP32, "rope_eager",
                      ROPE_BWD_KERNELS))
        o.fwd.append(_ew("kv_cache", Phase.FORWARD, 2 * kv, 2 * (FP32 + BF16), "cat", 2))
        # autocast casts q, k, v to bf16 for SDPA, which keeps those copies
        o.add(_ew("sdpa.input_cast", Phase.FORWARD, T * h + 2 * kv, FP32 + BF16, "autocast_input",
                  3),
              _ew("sdpa.input_grad_cast", Phase.BACKWARD, T * h + 2 * kv, BF16 + FP32,
                  "grad_cast", 3))
        saved += BF16 * (T * h + 2 * kv)
    elif job.training.flash_attention:  # GPT: q, k, v are views of the fused QKV output
        saved += BF16 * 3 * T * h
        if m.activation_function is Activation.GELU_NEW:  # Hugging Face GPT-2's KV-cache cat
            o.fwd.append(_ew("kv_cache", Phase.FORWARD, 2 * T * h, 2 * BF16, "cat", 2))
            saved += BF16 * 2 * T * h  # SDPA keeps the concatenated K and V
    if job.training.flash_attention:
        bh = b * heads
        fl = 4.0 * bh * s * s * d / 2
        io = (3 * T * heads * d + T * heads * d) * BF16
        launches = SDPA_FWD_KERNELS + (1 if dropout else 0)
        bwd_launches = SDPA_BWD_KERNELS + (2 if heads > groups else 0) + (0 if m.gated_mlp else 2)
        o.add(Op("sdpa", OpKind.FLASH_ATTENTION, Phase.FORWARD, (bh, s, s, d), BF16, fl, io,
                 FP32 * bh * s, "causal", launches),
              Op("sdpa.bwd", OpKind.FLASH_ATTENTION, Phase.BACKWARD, (bh, s, s, d), BF16,
                 2.5 * fl, 2 * io, 0.0, "causal", bwd_launches))
        # its output (also the projection's input) and its fp32 log-sum-exp
        return saved + BF16 * T * h + FP32 * bh * s
    # the eager fallback: q, k, v made contiguous for bmm, fp32 softmax, dropout, cast, bmm
    scores = float(b * heads * s * s)
    o.add(_ew("attn.qkv_copy", Phase.FORWARD, 3 * T * h, 2 * BF16, "copy", 3),
          _ew("attn.qkv_copy.bwd", Phase.BACKWARD, 3 * T * h, 2 * BF16, "copy", 2))
    bh = b * heads
    for nm, (mm, nn, kk) in (("attn.qk", (s, s, d)), ("attn.av", (s, d, s))):
        fl = 2.0 * bh * mm * nn * kk
        traffic = bh * (mm * kk + kk * nn + mm * nn) * BF16
        o.add(Op(nm, OpKind.BMM, Phase.FORWARD, (bh, mm, nn, kk), BF16, fl, traffic),
              Op(f"{nm}.bwd", OpKind.BMM, Phase.BACKWARD_DATA, (bh, mm, nn, kk), BF16, 2 * fl,
                 2 * traffic, kernels=2))
        if nm == "attn.qk":
            # scale, mask (made per call: ones, triu), masked_fill, cast to fp32, softmax,
            # dropout (fp32), cast back to bf16 for the second bmm
            per = 2 * BF16 + (BF16 + BF16) + (BF16 + FP32) + 2 * FP32 + (2 * FP32 + MASK) + (FP32 + BF16)
            keep = FP32 + (MASK + BF16 if dropout else BF16)
            saved += keep * scores
            o.add(_ew("attn.softmax", Phase.FORWARD, scores, per, "softmax_fp32_eager",
                      7 + (1 if dropout else 0), keep * scores, OpKind.SOFTMAX, 5.0),
                  _ew("attn.softmax.bwd", Phase.BACKWARD, scores, per + FP32, "softmax_fp32_eager",
                      5 + (1 if dropout else 0), kind=OpKind.SOFTMAX, flops_per=10.0))
    o.add(_ew("attn.context_copy", Phase.FORWARD, T * h, 2 * BF16, "copy"),
          _ew("attn.context_copy.bwd", Phase.BACKWARD, T * h, 2 * BF16, "copy"))
    return saved + BF16 * 3 * T * h + BF16 * T * h  # q, k, v copies; the context copy


def _mlp(o: _Ops, job: Job, T: int, accumulate: float) -> float:
    m = job.model
    h, f, bias = m.hidden_size, m.ffn, m.use_bias
    if m.gated_mlp:  # gate and up cast the same input separately; silu(gate) * up; down
        saved = _linear(o, "mlp.gate", T, h, f, bias, True, accumulate)
        saved += _linear(o, "mlp.up", T, h, f, bias, True, accumulate)
        # kept: gate's output (silu), silu's output and up's output (mul), the product (down)
        o.add(_ew("mlp.silu_mul", Phase.FORWARD, T * f, 5 * BF16, "swiglu", 2, 4 * BF16 * T * f,
                  OpKind.ACTIVATION, 8.0),
              _ew("mlp.silu_mul.bwd", Phase.BACKWARD, T * f, 8 * BF16, "swiglu", 3,
                  kind=OpKind.ACTIVATION, flops_per=16.0))
        return saved + 4 * BF16 * T * f + _linear(o, "mlp.down", T, f, h, bias, False, accumulate)
    saved = _linear(o, "mlp.up", T, h, f, bias, True, accumulate)
    if m.activation_function is Activation.GELU_NEW:
        # 0.5x (bf16), x -> fp32 for pow (autocast), pow, *c, +, *sqrt(2/pi), tanh, +1, *:
        # keeps the fp32 copy, tanh's output and (1 + tanh), and 0.5x; its output is fp32
        o.add(_ew("mlp.gelu_new", Phase.FORWARD, T * f, 70.0, "gelu_new_eager",
                  GELU_NEW_FWD_KERNELS, (3 * FP32 + BF16) * T * f, OpKind.ACTIVATION, 10.0),
              _ew("mlp.gelu_new.bwd", Phase.BACKWARD, T * f, 90.0, "gelu_new_eager",
                  GELU_NEW_BWD_KERNELS, kind=OpKind.ACTIVATION, flops_per=20.0))
        return saved + (3 * FP32 + BF16) * T * f + _linear(o, "mlp.down", T, f, h, bias, True,
                                                           accumulate)
    o.add(_ew("mlp.gelu", Phase.FORWARD, T * f, 2 * BF16, "gelu", 1, BF16 * T * f,
              OpKind.ACTIVATION, 8.0),
          _ew("mlp.gelu.bwd", Phase.BACKWARD, T * f, 3 * BF16, "gelu", 1, kind=OpKind.ACTIVATION,
              flops_per=16.0))
    # kept: the up projection's output (GeLU's input) and GeLU's output (down's input)
    return saved + 2 * BF16 * T * f + _linear(o, "mlp.down", T, f, h, bias, False, accumulate)


def accumulations_per_microbatch(job: Job) -> float:
    """`.grad += g` runs from the second micro-batch on: (m - 1) / m kernels per tensor."""
    m = job.num_microbatches
    return (m - 1) / m


@dataclass(frozen=True)
class EagerBlock:
    fwd: tuple[Op, ...]
    bwd: tuple[Op, ...]
    saved_bytes: float


def eager_layer(job: Job) -> EagerBlock:
    """One transformer layer of the eager stack for one micro-batch."""
    m = job.model
    T, h, bias = job.training.micro_batch_size * m.seq_length, m.hidden_size, m.use_bias
    acc = accumulations_per_microbatch(job)
    hidden_dropout = m.hidden_dropout > 0
    o = _Ops()
    saved = _norm(o, "input_norm", job, T, h)
    qkv = (m.num_attention_heads + 2 * m.query_groups) * m.head_dim
    if m.gated_mlp:
        for nm, n in (("q", h), ("k", m.query_groups * m.head_dim), ("v", m.query_groups * m.head_dim)):
            saved += _linear(o, f"attn.{nm}", T, h, n, bias, True, acc)
    else:
        saved += _linear(o, "qkv", T, h, qkv, bias, True, acc)
    saved += _attention(o, job, T)
    saved += _linear(o, "attn.proj", T, h, h, bias, False, acc)
    saved += _residual(o, "attn", T, h, hidden_dropout)
    saved += _norm(o, "post_attn_norm", job, T, h)
    saved += _mlp(o, job, T, acc)
    saved += _residual(o, "mlp", T, h, hidden_dropout)
    norm_tensors = 2 if m.norm is Norm.RMSNORM else 4
    if acc > 0:
        o.bwd.append(_ew("norm.grad_accum", Phase.BACKWARD_WEIGHT, norm_tensors * h * acc,
                         3 * FP32, "grad_accum", kernels=norm_tensors * acc, dtype=FP32))
    return EagerBlock(tuple(o.fwd), tuple(reversed(o.bwd)), saved)


def eager_embedding(job: Job) -> EagerBlock:
    """fp32 lookups (+ learned positions), embedding dropout; backward: dense fp32 gradients."""
    m = job.model
    T, h = job.training.micro_batch_size * m.seq_length, m.hidden_size
    acc = accumulations_per_microbatch(job)
    o = _Ops()
    sort = EMBEDDING_BWD_KERNELS[T > 3072]
    tables = [("embedding", m.vocab_size)]
    if m.position_embedding is PositionEmbedding.LEARNED:
        tables.append(("position_embedding", m.seq_length))
    for name, rows in tables:
        o.add(_ew(name, Phase.FORWARD, T * h, 2 * FP32, "gather_fp32", 1, kind=OpKind.EMBEDDING,
                  dtype=FP32),
              _ew(f"{name}.bwd", Phase.BACKWARD, rows * h + 3 * T * h, FP32, "dense_fp32", sort,
                  kind=OpKind.EMBEDDING, dtype=FP32))
        if acc > 0:
            o.bwd.append(_ew(f"{name}.grad_accum", Phase.BACKWARD_WEIGHT, rows * h * acc, 3 * FP32,
                             "grad_accum", kernels=acc, dtype=FP32))
    saved = 0.0
    if len(tables) > 1:
        o.fwd.append(_ew("embedding.add", Phase.FORWARD, T * h, 3 * FP32, "add", 2))  # + arange
    if m.hidden_dropout > 0:
        saved = MASK * T * h
        o.add(_ew("embedding.dropout", Phase.FORWARD, T * h, 2 * FP32 + MASK, "dropout", 1, saved,
                  OpKind.DROPOUT, dtype=FP32),
              _ew("embedding.dropout.bwd", Phase.BACKWARD, T * h, 2 * FP32 + MASK, "dropout", 1,
                  kind=OpKind.DROPOUT, dtype=FP32))
    return EagerBlock(tuple(o.fwd), tuple(reversed(o.bwd)), saved)


@dataclass(frozen=True)
class EagerHead:
    block: EagerBlock
    forward_transient_bytes: float  # bf16 logits and their fp32 copy, alive in the loss
    backward_transient_bytes: float  # two fp32 logits-sized gradients in the loss backward


def eager_head(job: Job) -> EagerHead:
    """Final norm, the bf16 logits GEMM (tied or untied output weight cast to bf16), logits
    upcast to fp32, log_softmax (output kept), NLL; backward back through the same."""
    m = job.model
    T, h, V = job.training.micro_batch_size * m.seq_length, m.hidden_size, m.vocab_size
    acc = accumulations_per_microbatch(job)
    o = _Ops()
    saved = _norm(o, "final_norm", job, T, h)
    norm_tensors = 1 if m.norm is Norm.RMSNORM else 2
    if acc > 0:
        o.bwd.append(_ew("final_norm.grad_accum", Phase.BACKWARD_WEIGHT, norm_tensors * h * acc,
                         3 * FP32, "grad_accum", kernels=norm_tensors * acc, dtype=FP32))
    if m.tied_embeddings:  # the table is cast here; its gradient joins the embedding's
        o.add(_ew("logits.cast", Phase.FORWARD, V * h, FP32 + BF16, "autocast_weight"),
              _ew("logits.grad_cast", Phase.BACKWARD_WEIGHT, V * h, BF16 + FP32, "grad_cast"))
        o.bwd.append(_ew("logits.tied_grad_sum", Phase.BACKWARD_WEIGHT, V * h, 3 * FP32, "add",
                         dtype=FP32))
        saved += BF16 * T * h
        o.add(_ew("logits.input_cast", Phase.FORWARD, T * h, FP32 + BF16, "autocast_input"),
              _ew("logits.input_grad_cast", Phase.BACKWARD, T * h, BF16 + FP32, "grad_cast"))
        fwd, dgrad, wgrad = _gemm_ops("logits", T, V, h, memsets=1)
        o.add(fwd, dgrad, wgrad)
    else:
        saved += _linear(o, "logits", T, h, V, False, True, acc)
    n = T * V
    o.add(_ew("loss.upcast", Phase.FORWARD, n, BF16 + FP32, "logits_fp32"),
          _ew("loss.upcast.bwd", Phase.BACKWARD, n, FP32 + BF16, "logits_fp32"))
    o.add(_ew("log_softmax", Phase.FORWARD, n, 2 * FP32, "log_softmax_fp32", 1, FP32 * n,
              OpKind.CROSS_ENTROPY, 5.0, FP32),
          _ew("log_softmax.bwd", Phase.BACKWARD, n, 3 * FP32, "log_softmax_fp32", 1,
              kind=OpKind.CROSS_ENTROPY, flops_per=5.0, dtype=FP32))
    o.add(_ew("nll_loss", Phase.FORWARD, T, 8, "small", LOSS_FWD_KERNELS),
          _ew("nll_loss.bwd", Phase.BACKWARD, n, FP32, "nll_fill", LOSS_BWD_KERNELS))
    saved += FP32 * n
    return EagerHead(EagerBlock(tuple(o.fwd), tuple(reversed(o.bwd)), saved),
                     (BF16 + FP32) * n, 2 * FP32 * n)


def amp_cast_params(job: Job) -> tuple[float, float]:
    """(per layer, head) parameters autocast copies to bf16 every forward: the linears' weights
    and biases, and the output layer's (tied: the word table's) weight; norms and embedding
    lookups run in fp32."""
    m = job.model
    h, f = m.hidden_size, m.ffn
    qkv = (m.num_attention_heads + 2 * m.query_groups) * m.head_dim
    up = 2 * f if m.gated_mlp else f
    weights = h * qkv + h * h + h * up + f * h
    biases = (qkv + h + up + h) if m.use_bias else 0
    return float(weights + biases), float(m.vocab_size * h)


def optimizer_launches(params: float, tensors: int) -> int:
    """Fused AdamW (`torch.optim.AdamW(fused=True)`): multi-tensor launches of at most 320
    blocks of 65,536 elements (`MultiTensorApply.cuh`), at most 110 tensors per launch."""
    return int(max(params / (65536 * 320), tensors / 110)) + 1
