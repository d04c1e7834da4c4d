"""The building blocks every layer graph is made of: a job's per-GPU shape context and the op
constructors (GEMM with its two backward GEMMs, memory-bound pointwise kernels, norms, the fused
bias-dropout-residual-add, gradient accumulation, bursts of tiny kernels).

Shapes are per GPU: tensor parallelism (tp) splits heads, the FFN and the vocabulary; sequence
parallelism splits norms, dropouts and residuals along the sequence (Korthikanti et al. 2022).
Saved-activation bytes follow Korthikanti et al. 2022, Sec. 4 (16-bit activations, 1-byte
dropout masks). A new layer type (MoE experts, context-parallel attention) builds its ops from
these, so that FLOPs, bytes and saved activations are counted one way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.graph.ops import Op, OpKind, Phase
from simulator.job.enums import DataParallelSharding, Norm
from simulator.job.framework import FrameworkSemantics, semantics
from simulator.job.param_bytes import param_bytes
from simulator.job.precision import LowPrecisionFormat, low_precision
from simulator.job.specs import Job

MASK_BYTES = 1  # dropout masks are stored as bytes
FP32 = 4


@dataclass(frozen=True)
class ShapeContext:
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
    cp: int = 1  # context parallelism: `s` is this rank's share of the sequence
    low: LowPrecisionFormat | None = None  # the recipe of the linear layers' GEMMs (None: 16 bit)
    weight_casts: float = 0.0  # quantizations of each weight per micro-batch (simulator.graph.quantize)
    quantized_params: bool = False  # fp8_param_gather: the weights are kept quantized
    fp8_attention: bool = False  # fp8_dot_product_attention
    tp_comm_overlap: bool = False  # TE's userbuffers overlap tp collectives with their GEMMs

    @property
    def full_s(self) -> int:
        """The whole sequence (what attention spans across the cp ranks)."""
        return self.s * self.cp

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
    return param_bytes(job).gradients


def gemm(name: str, m: int, n: int, k: int, dt: int, saved: float, batch: int = 1,
          kind: OpKind = OpKind.GEMM, accumulate_bytes: int = 0,
          low: LowPrecisionFormat | None = None) -> tuple[Op, list[Op]]:
    """A matmul Y[m,n] = X[m,k] W[k,n] and its backward (data- and weight-gradient GEMMs).
    `accumulate_bytes` > 0: the weight gradient is accumulated in place into a gradient buffer of
    that dtype (Megatron's `wgrad_gemm_accum_fp32`): the GEMM reads and writes it. `low`: the
    three GEMMs run in that recipe's format (operands of its element and scale bytes, 16-bit
    outputs; the variant names the recipe, so a measured 16-bit GEMM never stands for it)."""
    flops = 2.0 * batch * m * n * k
    operand = dt if low is None else low.bytes_per_element
    variant, precision = ("", None) if low is None else (low.name, low.precision)

    def op(nm: str, phase: Phase, mm: int, nn: int, kk: int, save: float = 0.0,
           out_bytes: float = dt) -> Op:
        traffic = batch * ((mm * kk + kk * nn) * operand + mm * nn * out_bytes)
        return Op(nm, kind, phase, (batch, mm, nn, kk), dt, flops, traffic, save, variant,
                  precision=precision)

    fwd = op(name, Phase.FORWARD, m, n, k, saved)
    dgrad = op(f"{name}.dgrad", Phase.BACKWARD_DATA, m, k, n)
    if kind is OpKind.BMM:  # attention bmms have no weights: the second gradient is data
        wgrad = op(f"{name}.dgrad2", Phase.BACKWARD_DATA, n, k, m)
    else:
        out = 2 * accumulate_bytes if accumulate_bytes else dt
        wgrad = op(f"{name}.wgrad", Phase.BACKWARD_WEIGHT, n, k, m, out_bytes=out)
    return fwd, [dgrad, wgrad]


def pointwise(name: str, kind: OpKind, numel: float, dt: int, reads: float, writes: float,
               saved: float = 0.0, variant: str = "", bwd_traffic: float = 3.0,
               flops_per_elem: float = 1.0) -> tuple[Op, Op]:
    """A memory-bound kernel and its backward (reads y/x and dy, writes dx by default)."""
    n = int(numel)
    fwd = Op(name, kind, Phase.FORWARD, (n,), dt, flops_per_elem * n, (reads + writes) * n * dt,
             saved, variant)
    bwd = Op(f"{name}.bwd", kind, Phase.BACKWARD, (n,), dt, 2 * flops_per_elem * n,
             bwd_traffic * n * dt, 0.0, variant)
    return fwd, bwd


def norm_op(c: ShapeContext, name: str, variant: Norm, saved: bool = True,
            writes: float = 1) -> tuple[Op, Op]:
    """A norm of the sequence-split residual; `writes`: its output's size in 16-bit elements
    (less when a fused kernel writes the next GEMM's quantized input instead)."""
    numel = c.sp_tokens * c.h
    return pointwise(name, OpKind.NORM, numel, c.dt, 1, writes, 2 * numel if saved else 0.0,
                      variant.value, bwd_traffic=3.0, flops_per_elem=5.0)


def dropout_add(c: ShapeContext, name: str) -> tuple[Op, Op]:
    """Megatron's fused bias-dropout-residual-add; saves the dropout mask. With hidden dropout 0
    PyTorch's dropout returns its input (`at::native::dropout`, p == 0): the kernel only adds
    the bias and the residual, and no mask is kept."""
    numel = c.sp_tokens * c.h
    if not c.hidden_dropout:
        return pointwise(name, OpKind.ELEMENTWISE, numel, c.dt, 2, 1, 0.0, "bias_add",
                          bwd_traffic=2.0)
    return pointwise(name, OpKind.DROPOUT, numel, c.dt, 2, 1, MASK_BYTES * numel,
                      "bias_dropout_add", bwd_traffic=2.5)


def norm_weight_grad(job: Job, c: ShapeContext, name: str) -> tuple[Op, list[int]]:
    """A norm's weight (and bias) gradient: a reduction over the tokens; and its tensors' sizes."""
    norm = job.model.norm
    numel = int(c.sp_tokens * c.h)
    op = Op(f"{name}.wgrad", OpKind.NORM, Phase.BACKWARD_WEIGHT, (numel,), c.dt, 2 * numel,
            2 * numel * c.dt, 0.0, f"{norm.value}_wgrad")
    return op, [c.h] * (2 if norm is Norm.LAYERNORM else 1)


def small_kernels(name: str, phase: Phase, kernels: int, numel: float, nbytes: float) -> Op:
    """A burst of tiny index/mask/scalar kernels: negligible traffic, `kernels` launches."""
    return Op(name, OpKind.ELEMENTWISE, phase, (int(numel),), 8, numel, nbytes, 0.0, "small",
              kernels)


def grad_accum_op(name: str, numel: float, nbytes: int) -> Op:
    """grad += this micro-batch's gradient (one pass: read both, write one)."""
    return Op(name, OpKind.ELEMENTWISE, Phase.BACKWARD_WEIGHT, (int(numel),), nbytes, numel,
              3 * numel * nbytes, 0.0, "grad_accum")


def shape_context(job: Job) -> ShapeContext:
    """Per-GPU shapes: with context parallelism every rank holds seq_length / cp tokens of each
    sequence outside the attention core (Megatron-Core splits the input sequence over cp). A
    low-precision job's context carries its recipe (simulator.job.precision)."""
    m, t, cp = job.model, job.training, job.parallel.cp
    low = low_precision(job)
    return ShapeContext(t.micro_batch_size, m.seq_length // cp, m.hidden_size, job.parallel.tp,
                job.parallel.sequence_parallel and job.parallel.tp > 1, t.precision.bytes,
                m.hidden_dropout > 0, m.attention_dropout > 0, gradient_accumulation_fused(job),
                grad_bytes(job), semantics(t.framework), cp, low,
                weight_casts_per_microbatch(job) if low else 0.0,
                bool(low) and t.fp8_param_gather, bool(low) and t.fp8_dot_product_attention,
                job.parallel.tp_comm_overlap)


def layer_context(job: Job, high_precision: bool = False) -> ShapeContext:
    """The shape context of a layer: the job's, or for a low-precision run's layer kept in 16
    bits (simulator.job.layer_pattern.LayerKind.high_precision) the same without the recipe."""
    c = shape_context(job)
    if not high_precision or c.low is None:
        return c
    return replace(c, low=None, weight_casts=0.0, quantized_params=False, fp8_attention=False)


def weight_casts_per_microbatch(job: Job) -> float:
    """How often a linear layer's weight is quantized per micro-batch. Transformer Engine caches
    the quantized weight from the first micro-batch of an iteration (`is_first_microbatch`,
    which Megatron-Core's TE linears pass on; `module/linear.py`): 1/m per micro-batch. Under
    FSDP (ZeRO-3) every micro-batch gathers the 16-bit weight again and re-quantizes it
    (Megatron-FSDP releases the quantized copies after each pass), unless the weights are
    gathered already quantized (`fp8_param_gather`)."""
    zero3 = job.sharding is DataParallelSharding.OPTIM_GRADS_PARAMS
    if zero3 and not job.training.fp8_param_gather:
        return 1.0
    return 1.0 / job.num_microbatches
