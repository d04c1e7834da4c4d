"""Which ops run in the recipe's low precision, and a linear layer as Transformer Engine runs it
there: the quantize kernels with their bytes, the three GEMMs in the format, the quantized copy
of its input saved for the weight gradient, the weight's cast, and its tensor-parallel
collectives with quantized all-gathers.

The recipe's table (`LOW_PRECISION_LINEARS`): every linear layer Megatron-Core builds from
Transformer Engine runs fprop, dgrad and wgrad in the format inside the fp8 / fp4 autocast
(`TELayerNormColumnParallelLinear`, `TEColumnParallelLinear`, `TERowParallelLinear`, `TELinear`
in `core/extensions/transformer_engine.py`): QKV and the attention projection, the dense MLP's
up and down projections and the shared experts' (`moe/shared_experts.py` builds them as a dense
MLP), multi-latent attention's down (`TELinear`, "duplicated" on the tp ranks) and up
projections (`multi_latent_attention.py`), the routed experts' fc1 and fc2 grouped GEMMs
(`moe/experts.py::TEGroupedMLP` over TE's `GroupedLinear`, which quantizes each expert's input,
weight and output gradient with its own quantizers, `module/grouped_linear.py`; under fp8 / fp4
Megatron pads each expert's tokens to the format's alignment, `Fp8Padding`, not modelled: at
most 31 rows per expert) and the multi-token-prediction projection `eh_proj`. Core attention
(unless `fp8_dot_product_attention`), the router (a plain `torch` linear in `moe/router.py`),
the embedding, the output layer, norms, activations and softmax stay 16-bit. The MoE token
dispatch moves 16-bit tokens: Megatron-Core quantizes the dispatched payload only when
`moe_dispatch_fwd_dtype` is set (`transformer_config.py`, default 'bf16'; ncclep flex backend
only), which this model does not offer.

Quantization (Transformer Engine, `docs/features/low_precision_training/`): a memory-bound
kernel reads the 16-bit source (twice with current scaling: amax, then cast) and writes each
quantized copy the GEMMs need: the rowwise one for fprop / dgrad and the columnwise one for
wgrad / dgrad's weight (`performance_considerations.rst`, "tensor usages"). Per-tensor FP8 on
Hopper writes a transpose as the second copy (`cast_transpose`); on Blackwell one copy serves
both; block formats (blockwise, MXFP8, NVFP4) quantize the two copies separately, each with its
scales. NVFP4 also applies a 16x16 Hadamard transform to the wgrad operands' columnwise copy.
- Inputs: quantized in the forward; the columnwise copy is kept for wgrad instead of the 16-bit
  input (the rowwise one is freed after fprop). A norm right before the linear writes the
  quantized input itself (TE's fused norm + cast) unless the scale needs the tensor's amax first.
  The attention output is also kept in 16 bits, for the attention's own backward.
- Output gradients: quantized in the backward (both copies), never saved.
- Weights: quantized on the first micro-batch of an iteration and cached
  (`simulator.graph.primitives.weight_casts_per_microbatch`).
- Sequence parallelism: TE quantizes the local shard and all-gathers the quantized tensor
  (halving or quartering the all-gather); per-tensor FP8 on Hopper cannot gather a transposed
  copy, so it gathers rowwise data and transposes after the gather.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.graph.ops import Op, OpKind, Phase
from simulator.graph.primitives import ShapeContext, gemm
from simulator.graph.tp_comm import TpComm, column_parallel, row_parallel
from simulator.job.precision import LowPrecisionFormat

LOW_PRECISION_LINEARS = frozenset({
    "qkv", "attn.proj", "mlp.up", "mlp.down", "shared_expert.up", "shared_expert.down",
    "mla.q_down", "mla.kv_down", "mla.q_up", "mla.kv_up", "moe.fc1", "moe.fc2", "mtp.eh_proj"})
HADAMARD_FLOPS_PER_ELEMENT = 32.0  # a 16x16 transform: 16 multiply-adds per element


@dataclass(frozen=True)
class LinearSpec:
    """One linear layer of a transformer layer, per GPU: Y[tokens, n] = X[tokens, k] W[k, n]
    (`batch` of them side by side: the local experts' grouped GEMM)."""

    name: str
    tokens: int  # rows of the GEMMs (all tokens of the micro-batch; SP gathers them)
    n: int
    k: int
    column_parallel: bool  # its input is all-gathered under SP (else its output is scattered)
    fused_norm: bool  # a norm kernel writes its input
    keeps_input: bool  # the 16-bit input stays saved anyway (the attention output)
    accumulate_bytes: int
    batch: int = 1
    # no tensor-parallel communication of its own: TE's "duplicated" linear (MLA's down
    # projections) or an expert's (the token dispatch moves its rows)
    local: bool = False

    @property
    def input_gathered(self) -> bool:
        """Under SP its input is all-gathered (a column-parallel linear)."""
        return self.column_parallel and not self.local

    @property
    def grad_gathered(self) -> bool:
        """Under SP its output gradient is all-gathered (a row-parallel linear)."""
        return not self.column_parallel and not self.local


def runs_low(c: ShapeContext, name: str) -> LowPrecisionFormat | None:
    """The format `name` runs in under the job's recipe (None: 16 bits)."""
    return c.low if c.low is not None and name in LOW_PRECISION_LINEARS else None


def quantize_op(name: str, phase: Phase, numel: float, fmt: LowPrecisionFormat, copies: int,
                hadamard: bool = False, kernels: float = 1.0, source_bytes: float = 2.0) -> Op:
    """Quantize `numel` elements of a 16-bit tensor into `copies` quantized copies: read the
    source (once more for its amax with current scaling), write data and scales; `kernels` < 1
    spreads a once-per-iteration cast over the micro-batches."""
    reads = source_bytes * (1 + fmt.amax_pass)
    writes = fmt.bytes_per_element * copies
    flops = numel * (HADAMARD_FLOPS_PER_ELEMENT if hadamard else 1.0)
    return Op(name, OpKind.QUANTIZE, phase, (int(numel),), 2, flops * kernels,
              (reads + writes) * numel * kernels, 0.0, fmt.name, kernels)


def transpose_op(name: str, phase: Phase, numel: float, fmt: LowPrecisionFormat,
                 kernels: float = 1.0) -> Op:
    """Transpose a quantized tensor (Hopper's columnwise copy of a per-tensor FP8 tensor)."""
    return Op(name, OpKind.QUANTIZE, phase, (int(numel),), 2, 0.0,
              2 * fmt.bytes_per_element * numel * kernels, 0.0, f"{fmt.name}_transpose", kernels)


def input_copies(c: ShapeContext, fmt: LowPrecisionFormat, spec: LinearSpec) -> int:
    """Quantized copies of the input the forward writes: both usages, except a per-tensor FP8
    input that Hopper all-gathers (rowwise only; transposed after the backward's gather)."""
    gathered = c.sp and spec.input_gathered
    return 1 if gathered and fmt.transposes else fmt.copies


def norm_writes(c: ShapeContext, spec: LinearSpec) -> float:
    """The 16-bit elements a norm before `spec` writes per element: 1, or the quantized copies
    when it writes the linear's input itself (fused norm + cast, no amax pass)."""
    fmt = runs_low(c, spec.name)
    if fmt is None or not spec.fused_norm or fmt.amax_pass:
        return 1
    return fmt.bytes_per_element * input_copies(c, fmt, spec) / c.dt


def linear(c: ShapeContext, spec: LinearSpec, saved_16bit: float) -> tuple[list[Op], list[Op]]:
    """Forward ops and backward ops (in forward order, as `dense` collects them) of one linear.
    `saved_16bit`: what the 16-bit layer saves for it."""
    fmt = runs_low(c, spec.name)
    m, n, k = spec.tokens, spec.n, spec.k
    if fmt is None:
        fwd, bwd = gemm(spec.name, m, n, k, c.dt, saved_16bit, batch=spec.batch,
                        accumulate_bytes=spec.accumulate_bytes)
        return [fwd], bwd
    rows = c.sp_tokens if c.sp and spec.input_gathered else m
    local_in = spec.batch * rows * k
    saved = local_in * fmt.bytes_per_element + (saved_16bit if spec.keeps_input else 0.0)
    g_fwd, g_bwd = gemm(spec.name, m, n, k, c.dt, saved, batch=spec.batch,
                        accumulate_bytes=spec.accumulate_bytes, low=fmt)
    ops = _weight_ops(c, fmt, spec)
    if norm_writes(c, spec) == 1:  # not written by a fused norm
        ops.append(quantize_op(f"{spec.name}.quantize_input", Phase.FORWARD, local_in, fmt,
                               input_copies(c, fmt, spec), hadamard=fmt.hadamard_wgrad))
    ops.append(g_fwd)
    return ops, g_bwd + _grad_ops(c, fmt, spec)


def _weight_ops(c: ShapeContext, fmt: LowPrecisionFormat, spec: LinearSpec) -> list[Op]:
    """The weight's quantization, `c.weight_casts` times per micro-batch; with quantized
    parameters (fp8_param_gather) only Hopper's transpose cache is rebuilt."""
    numel = spec.batch * spec.k * spec.n
    name = f"{spec.name}.quantize_weight"
    if c.quantized_params:
        return [transpose_op(name, Phase.FORWARD, numel, fmt, c.weight_casts)] if fmt.transposes else []
    return [quantize_op(name, Phase.FORWARD, numel, fmt, fmt.copies, kernels=c.weight_casts)]


def _grad_ops(c: ShapeContext, fmt: LowPrecisionFormat, spec: LinearSpec) -> list[Op]:
    """Backward quantization (listed in forward order, so the reversed backward runs them
    first): the output gradient into both copies (a row-parallel linear's gradient is quantized
    on the local shard and all-gathered under SP), and on Hopper the transposes of what was
    gathered rowwise."""
    m, n, k = spec.batch * spec.tokens, spec.n, spec.k
    grad_gathered = c.sp and spec.grad_gathered
    grad_numel = m * n / c.t if grad_gathered else m * n
    copies = 1 if grad_gathered and fmt.transposes else fmt.copies
    ops = [quantize_op(f"{spec.name}.quantize_grad", Phase.BACKWARD, grad_numel, fmt, copies,
                       hadamard=fmt.hadamard_wgrad)]
    if fmt.transposes and grad_gathered:
        ops.insert(0, transpose_op(f"{spec.name}.grad_transpose", Phase.BACKWARD, m * n, fmt))
    if fmt.transposes and c.sp and spec.input_gathered:
        ops.insert(0, transpose_op(f"{spec.name}.input_transpose", Phase.BACKWARD, m * k, fmt))
    return ops


def gathered_bytes(c: ShapeContext, name: str, numel: float, copies_needed: int) -> float:
    """Bytes of an all-gathered linear input or output gradient: quantized when `name` runs low
    (Hopper's per-tensor FP8 gathers one rowwise copy and transposes it locally)."""
    fmt = runs_low(c, name)
    if fmt is None:
        return numel * c.dt
    copies = 1 if fmt.transposes else min(copies_needed, fmt.copies)
    return numel * fmt.bytes_per_element * copies


def linear_comm(c: ShapeContext, spec: LinearSpec) -> TpComm:
    """The tensor-parallel collectives of a column- or row-parallel linear (simulator.graph.
    tp_comm): the 16-bit ones, or where it runs low TE's quantized all-gathers (and the amax
    all-reduce of a current-scaling recipe); with `tp_comm_overlap` TE's userbuffers overlap
    them with the linear's GEMMs."""
    fmt = runs_low(c, spec.name)
    ub, amax = c.tp_comm_overlap, bool(fmt and fmt.amax_pass)
    if spec.column_parallel:
        nbytes = c.tokens * spec.k * c.dt
        moved = None if fmt is None else gathered_bytes(c, spec.name, c.tokens * spec.k, 1)
        return column_parallel(spec.name, nbytes, c.t, c.sp, c.fw.async_tp_grad_allreduce,
                               gathered=moved, overlap_gemm=ub, amax=amax)
    nbytes = c.tokens * spec.n * c.dt
    moved = None if fmt is None else gathered_bytes(c, spec.name, c.tokens * spec.n, 2)
    return row_parallel(spec.name, nbytes, c.t, c.sp, gathered=moved, overlap_gemm=ub, amax=amax)
