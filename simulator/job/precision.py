"""Low-precision recipes as data: which format a recipe quantizes to on which GPU generation,
and the job's resolved recipe.

Transformer Engine runs the fprop, dgrad and wgrad GEMMs of every TE linear layer (QKV,
attention projection, MLP up and down; MLA's projections, the routed and shared experts) in the
recipe's format; core attention, the router, the embedding, the output layer, norms, activations
and softmax stay in bf16 (`docs/features/low_precision_training/speedups.rst` and
`gemm_profiling.rst`, "What GEMMs do not cover"). Which ops of the graph run low is
`simulator.graph.quantize.LOW_PRECISION_LINEARS`, and which layers a run keeps in bf16
(`first_last_layers_bf16`) `simulator.job.layer_pattern.job_layer_kinds`;
what each recipe costs in quantization kernels and bytes follows from the format fields below,
all from Transformer Engine's `docs/features/low_precision_training/`:

- per-tensor FP8 (`delayed`, `tensorwise`): one FP32 scale per tensor. Current scaling
  (`tensorwise`) reads the tensor twice (amax, then cast); delayed scaling once, from an amax
  history. On Hopper the columnwise operand must be physically transposed (a second FP8 copy,
  `cast_transpose`); Blackwell reads FP8 columnwise natively, so one copy serves both usages.
- `blockwise` (DeepSeek-V3's scheme): FP32 scales per 1x128 (activations, gradients) or
  128x128 (weights) block; rowwise and columnwise copies are quantized separately. Native on
  Hopper; on Blackwell Transformer Engine emulates it with MXFP8.
- `mxfp8`: one E8M0 scale per 32 elements, rowwise and columnwise copies (different blocks),
  Blackwell only.
- `nvfp4`: E2M1 elements (half a byte), one E4M3 scale per 16 elements and a global FP32 scale
  (an amax pass), a 16x16 random Hadamard transform on the wgrad operands' columnwise copy,
  stochastic rounding on gradients; Blackwell only.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.job.enums import CpCommType, Fp4Recipe, Fp8Recipe, GpuArchitecture, Precision
from simulator.job.specs import Job

HOPPER, BLACKWELL = GpuArchitecture.HOPPER, GpuArchitecture.BLACKWELL


@dataclass(frozen=True)
class LowPrecisionFormat:
    """What one recipe's quantized tensors are, on one GPU generation."""

    name: str  # the recipe
    precision: Precision  # the GEMMs' arithmetic (peak FLOP/s of the hardware file)
    element_bytes: float  # 1 (FP8) or 0.5 (FP4)
    scale_bytes_per_element: float  # block scales: 4/128 (FP32 per 128), 1/32 (E8M0), 1/16 (E4M3)
    amax_pass: bool  # the scale needs this tensor's amax first: one more read of the source
    separate_columnwise: bool  # the columnwise operand is a second quantized copy
    hadamard_wgrad: bool  # a 16x16 Hadamard transform on the wgrad operands' columnwise copy
    gemm_kernel: str  # key of `Efficiency.low_precision_gemm_efficiency`

    @property
    def bytes_per_element(self) -> float:
        """Bytes of one quantized copy per element: data plus its block scales."""
        return self.element_bytes + self.scale_bytes_per_element

    @property
    def copies(self) -> int:
        """Quantized copies of an operand that needs both usages (rowwise and columnwise)."""
        return 2 if self.separate_columnwise else 1

    @property
    def transposes(self) -> bool:
        """The columnwise copy is a plain transpose of the rowwise one (per-tensor FP8 on Hopper:
        one scale serves both); block formats quantize each copy from the 16-bit source."""
        return self.separate_columnwise and self.scale_bytes_per_element == 0


def _fp8(name: str, amax: bool, columnwise: bool, scales: float = 0.0,
         kernel: str = "fp8_tensor") -> LowPrecisionFormat:
    return LowPrecisionFormat(name, Precision.FP8, 1.0, scales, amax, columnwise, False, kernel)


MXFP8 = _fp8("mxfp8", False, True, 1 / 32, "mxfp8")
NVFP4 = LowPrecisionFormat("nvfp4", Precision.FP4, 0.5, 1 / 16, True, True, True, "nvfp4")

# (recipe, GPU generation) -> format. A pair not listed is refused by validation.
FORMATS: dict[tuple[str, GpuArchitecture], LowPrecisionFormat] = {
    ("delayed", HOPPER): _fp8("delayed", False, True),
    ("delayed", BLACKWELL): _fp8("delayed", False, False),
    ("tensorwise", HOPPER): _fp8("tensorwise", True, True),
    ("tensorwise", BLACKWELL): _fp8("tensorwise", True, False),
    ("blockwise", HOPPER): _fp8("blockwise", False, True, 4 / 128, "fp8_block"),
    ("blockwise", BLACKWELL): MXFP8,  # emulated with MXFP8 (fp8_blockwise_scaling.rst)
    ("mxfp8", BLACKWELL): MXFP8,
    ("nvfp4", BLACKWELL): NVFP4,
}

# GEMM kernel family of each format (an op's variant names its format) and of FP8 attention
# (cuDNN's fused attention with per-tensor FP8 scales).
FP8_ATTENTION = "fp8_attention"
GEMM_KERNELS: dict[str, str] = {**{f.name: f.gemm_kernel for f in FORMATS.values()},
                                FP8_ATTENTION: "fp8_tensor"}

# Megatron-LM's default `--fp8-recipe` is `delayed`; on Blackwell the default (and
# Transformer Engine's preferred recipe there, mxfp8.rst) is MXFP8.
DEFAULT_FP8 = {HOPPER: Fp8Recipe.DELAYED, BLACKWELL: Fp8Recipe.MXFP8}


def recipe_name(job: Job) -> str | None:
    """The job's low-precision recipe (`training.fp8_recipe` / `fp4_recipe` or the GPU's
    default), or None for a 16-bit job."""
    t = job.training
    if t.precision is Precision.FP4:
        return (t.fp4_recipe or Fp4Recipe.NVFP4).value
    if t.precision is Precision.FP8:
        if t.fp8_recipe is not None:
            return t.fp8_recipe.value
        arch = job.hardware.architecture
        return DEFAULT_FP8[arch].value if arch in DEFAULT_FP8 else Fp8Recipe.DELAYED.value
    return None


def low_precision(job: Job) -> LowPrecisionFormat | None:
    """The job's format (assumes a validated job: the pair exists), or None for 16 bits."""
    name = recipe_name(job)
    arch = job.hardware.architecture
    if name is None or arch is None:
        return None
    return FORMATS.get((name, arch))


def precision_problems(job: Job) -> list[str]:
    """Every combination this model does not cover, with the field and the fix."""
    t, hw = job.training, job.hardware
    problems: list[str] = []
    name = recipe_name(job)
    if t.fp8_recipe is not None and t.precision is not Precision.FP8:
        problems.append(f"training.fp8_recipe={t.fp8_recipe.value} needs training.precision=fp8 "
                        f"(got {t.precision.value}); set precision fp8 or remove fp8_recipe")
    if t.fp4_recipe is not None and t.precision is not Precision.FP4:
        problems.append(f"training.fp4_recipe={t.fp4_recipe.value} needs training.precision=fp4 "
                        f"(got {t.precision.value}); set precision fp4 or remove fp4_recipe")
    low_only = [k for k in ("fp8_param_gather", "first_last_layers_bf16", "fp8_dot_product_attention")
                if getattr(t, k)]
    if name is None:
        problems += [f"training.{k}=true needs training.precision fp8 or fp4 (got "
                     f"{t.precision.value}); remove it" for k in low_only]
        return problems
    if t.precision not in hw.peak_tflops:
        return problems  # job_problems names the precision the GPU lacks
    if hw.architecture is None:
        return [*problems, f"training.precision={t.precision.value} needs the hardware file's "
                           f"'architecture' (hopper or blackwell) for {hw.name}; add it"]
    fmt = FORMATS.get((name, hw.architecture))
    if fmt is None:
        where = "fp4_recipe" if t.precision is Precision.FP4 else "fp8_recipe"
        ok = sorted({r for r, a in FORMATS if a is hw.architecture and r in set(Fp8Recipe)})
        what = f"training.{where}={name}" if t.precision is Precision.FP8 else "training.precision=fp4"
        fix = f"use one of {', '.join(ok)}" if t.precision is Precision.FP8 and ok else \
            "use fp8 or bf16, or a Blackwell GPU (b200, gb200, b300, gb300)"
        return [*problems, f"{what} is not supported on {hw.name} ({hw.architecture.value}); {fix}"]
    if fmt.gemm_kernel not in hw.efficiency.low_precision_gemm_efficiency:
        problems.append(f"{hw.name} has no efficiency.low_precision_gemm_efficiency."
                        f"{fmt.gemm_kernel} for recipe {name}; add a measured value to the "
                        f"hardware file")
    return problems + _option_problems(job, name)


def _option_problems(job: Job, name: str) -> list[str]:
    t, m = job.training, job.model
    problems = []
    if t.fp8_param_gather and not job.shards_optimizer:
        problems.append("training.fp8_param_gather=true needs sharded parameters or optimizer "
                        "states (Megatron: --use-distributed-optimizer or FSDP); set "
                        "parallel.distributed_optimizer or parallel.data_parallel_sharding")
    if t.first_last_layers_bf16:
        if name == Fp8Recipe.DELAYED.value:
            problems.append("training.first_last_layers_bf16 is refused with fp8_recipe=delayed "
                            "(Megatron: delayed scaling needs one fp8 context per pass); use "
                            "tensorwise, blockwise or mxfp8")
        per_stage = m.num_layers // job.parallel.pp
        for key in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
            if getattr(t, key) > per_stage:
                problems.append(f"training.{key}={getattr(t, key)} exceeds the layers per "
                                f"pipeline stage ({per_stage}); use at most {per_stage}")
    if t.fp8_dot_product_attention and not t.flash_attention:
        # (an fp4 run may keep FP8 attention too: MLPerf's NVFP4 Llama 3.1 runs do)
        problems.append("training.fp8_dot_product_attention=true needs flash_attention=true "
                        "(cuDNN's fused FP8 attention); set it")
    p = job.parallel
    apart = {"model.multi_latent_attention": m.multi_latent_attention,
             f"parallel.cp_comm_type={p.cp_comm_type.value}":
                 p.cp > 1 and p.cp_comm_type is not CpCommType.P2P}
    if t.fp8_dot_product_attention:
        problems += [f"training.fp8_dot_product_attention with {k} is not modelled together yet "
                     f"(FP8 attention is costed for the fused core, with context parallelism "
                     f"for TE's p2p ring, and equal query/value head sizes); remove one of them"
                     for k, on in apart.items() if on]
    return problems
