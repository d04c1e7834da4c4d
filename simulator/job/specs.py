"""Typed, frozen descriptions of a training job: model, training, parallel plan, cluster, hardware.

Validated once at the edge (`validate_job`); the core trusts them afterwards. Units are SI
inside; fields that carry a user-facing unit say so in their name (``_GBps``, ``_Gbps``, ``_GiB``).
"""

from __future__ import annotations

import difflib
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
)

from simulator.errors import ConfigError
from simulator.job.enums import (
    Activation,
    CudaGraphs,
    DataParallelSharding,
    Fp4Recipe,
    Fp8Recipe,
    Framework,
    GpuArchitecture,
    Norm,
    Optimizer,
    PositionEmbedding,
    Precision,
    Recompute,
    Schedule,
)

GiB = 1024**3


class Frozen(BaseModel):
    """Base of every config: immutable, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(Frozen):
    """A decoder-only transformer (GPT / Llama family)."""

    name: str = "custom"
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_query_groups: PositiveInt | None = None  # GQA/MQA; None = multi-head (= heads)
    ffn_hidden_size: PositiveInt | None = None  # None = 4 * hidden_size
    gated_mlp: bool = False  # SwiGLU: gate and up projections
    activation_function: Activation = Activation.GELU  # of a non-gated MLP (HF's name)
    vocab_size: PositiveInt
    seq_length: PositiveInt
    norm: Norm = Norm.LAYERNORM
    use_bias: bool = True
    tied_embeddings: bool = True
    position_embedding: PositionEmbedding = PositionEmbedding.LEARNED
    hidden_dropout: float = Field(0.1, ge=0, lt=1)  # Megatron's --hidden-dropout (Llama recipes: 0)
    attention_dropout: float = Field(0.1, ge=0, lt=1)  # Megatron's --attention-dropout
    published_params: float | None = None  # documentation of presets, parameters as published

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


class TrainingSpec(Frozen):
    global_batch_size: PositiveInt
    micro_batch_size: PositiveInt = 1
    precision: Precision = Precision.BF16
    recompute: Recompute = Recompute.NONE
    flash_attention: bool = False
    optimizer: Optimizer = Optimizer.ADAM
    framework: Framework = Framework.MEGATRON_LM
    fused_softmax: bool = True  # the stack has Megatron's compiled scale-mask-softmax kernels
    gradient_accumulation_fusion: bool | None = None  # None: the framework's default
    train_tokens: PositiveFloat | None = None  # token budget for time/cost to train
    # Low precision (simulator.job.precision): Megatron-LM's --fp8-recipe / --fp4-recipe (None:
    # the GPU's default recipe), --fp8-param-gather, --first-last-layers-bf16 with
    # --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16, --fp8-dot-product-attention
    fp8_recipe: Fp8Recipe | None = None
    fp4_recipe: Fp4Recipe | None = None
    fp8_param_gather: bool = False
    first_last_layers_bf16: bool = False
    num_layers_at_start_in_bf16: NonNegativeInt = 1
    num_layers_at_end_in_bf16: NonNegativeInt = 1
    fp8_dot_product_attention: bool = False
    cuda_graphs: CudaGraphs = CudaGraphs.NONE  # launches captured in CUDA graphs


class ParallelPlan(Frozen):
    """Megatron-style 3D layout. Rank order: tp fastest, then dp, then pp."""

    tp: PositiveInt = 1
    pp: PositiveInt = 1
    dp: PositiveInt | None = None  # None = num_gpus / (tp * pp)
    virtual_stages: PositiveInt = 1
    schedule: Schedule = Schedule.ONE_F_ONE_B
    sequence_parallel: bool = False
    distributed_optimizer: bool = False  # ZeRO-1: optimizer states sharded over dp
    overlap_grad_reduce: bool = False  # bucketed dp reduction overlapped with backward
    bucket_size_mb: PositiveFloat = 25.0
    first_stage_layers: PositiveInt | None = None  # Megatron's --decoder-first-pipeline-num-layers
    last_stage_layers: PositiveInt | None = None  # --decoder-last-pipeline-num-layers
    # Megatron-FSDP's --data-parallel-sharding-strategy (None: `optim` with the distributed
    # optimizer, else `no_shard`)
    data_parallel_sharding: DataParallelSharding | None = None
    tp_comm_overlap: bool = False  # TE userbuffers: tp all-gather / reduce-scatter under GEMMs


class ClusterSpec(Frozen):
    gpu: str = "a100-80gb"
    num_gpus: PositiveInt
    gpus_per_node: PositiveInt | None = None
    intra_node_bandwidth_GBps: PositiveFloat | None = None  # per GPU, per direction
    inter_node_bandwidth_Gbps: PositiveFloat | None = None  # per node
    price_per_gpu_hour_usd: float | None = Field(default=None, ge=0)


class Efficiency(Frozen):
    """The few physical parameters of the analytic hardware model; `calibrate` fits them.

    Defaults (used where a hardware file gives none) are A100 values from independent
    measurements, not from the iteration times we validate against: GEMM efficiency, its depth
    dependence and the launch gap fitted to Vidur's measured A100 GEMMs
    (bench/fit_kernel_defaults.py); host dispatch per kernel launch measured on a Megatron-style
    layer on a GPU host (bench/measure_host_overhead.py --device cuda: 4040 us of host time for the
    layer's forward + recompute + backward on an H100 host, torch 2.11, over the 77 launches the
    graph counts for that layer: 52.5 us; a stack's Python weights it per direction,
    simulator.job.framework) and per collective call on this project's CPU; the rest are typical
    published values
    (achievable HBM and NCCL bus bandwidth about 80% of nominal, microsecond-scale latencies).
    """

    gemm_max_efficiency: float = Field(0.835, gt=0, le=1)  # best achievable fraction of peak
    gemm_k_half: float = Field(85.0, ge=0)  # reduction depth at which GEMM efficiency halves
    memory_efficiency: float = Field(0.8, gt=0, le=1)  # achievable fraction of HBM bandwidth
    kernel_launch_s: float = Field(3.1e-6, ge=0)  # GPU-side gap between kernels
    host_overhead_s: float = Field(5.25e-5, ge=0)  # host dispatch per launch, measured on a GPU host
    intra_bus_efficiency: float = Field(0.8, gt=0, le=1)
    inter_bus_efficiency: float = Field(0.8, gt=0, le=1)
    intra_latency_s: float = Field(8e-6, ge=0)  # per ring step
    inter_latency_s: float = Field(2e-5, ge=0)  # per ring step
    p2p_efficiency: float = Field(0.8, gt=0, le=1)
    collective_overhead_s: float = Field(2.4e-5, ge=0)  # host time per collective call
    collective_table_scale: float = Field(1.0, gt=0)  # measured nccl-tests time -> in training
    microbatch_overhead_s: float = Field(0.0, ge=0)  # framework work per micro-batch step
    # cuBLAS's fallback for a GEMM with a dimension not a multiple of 8 (16 bytes: no aligned
    # tensor-core kernel, e.g. an unpadded 50,257-token vocabulary): fraction of peak. Measured
    # from kernel durations in the H100 traces (../shared/data/traces/h100, mgpt_h2048 logits
    # GEMMs, `cutlass_75_..._align1`: 0.10 forward, 0.14-0.15 backward).
    unaligned_gemm_efficiency: float = Field(0.12, gt=0, le=1)
    # A low-precision GEMM kernel family's best fraction of ITS peak, relative to
    # `gemm_max_efficiency` of the 16-bit GEMMs (keys: simulator.job.precision's `gemm_kernel`:
    # fp8_tensor, fp8_block, mxfp8, nvfp4), from public micro-benchmarks cited in the hardware
    # file. A family missing here is refused for this GPU.
    low_precision_gemm_efficiency: dict[str, float] = Field(default_factory=dict)
    # Achievable fraction of HBM bandwidth of the quantize kernels (cast, amax, transpose,
    # Hadamard; simulator.graph.quantize): they reach far less than a streaming kernel (amax
    # reductions, transposed and block-scale writes). From Transformer Engine's published GEMM
    # benchmark (autocast minus pre-quantized time), cited in the hardware file; None: as
    # `memory_efficiency`.
    quantize_memory_efficiency: float | None = Field(None, gt=0, le=1)


class HardwareSpec(Frozen):
    """A GPU type from the catalog in data/hardware (datasheet values, cited in the file)."""

    name: str
    description: str = ""
    source: str = ""
    peak_tflops: dict[Precision, PositiveFloat]  # dense tensor-core FLOP/s, 1e12
    hbm_bandwidth_GBps: PositiveFloat
    memory_GiB: PositiveFloat
    num_sms: PositiveInt
    nvlink_bandwidth_GBps: PositiveFloat  # per GPU, per direction
    gpus_per_node: PositiveInt = 8
    # GPUs that share one NVLink fabric: 8 on HGX/DGX, 72 on GB200/GB300 NVL72 (a compute tray
    # holds 4); None: the node
    nvlink_domain: int | None = None
    architecture: GpuArchitecture | None = None  # decides the low-precision formats it runs
    inter_node_bandwidth_Gbps: PositiveFloat = 800.0  # per node
    price_per_gpu_hour_usd: float = Field(0.0, ge=0)
    reserved_memory_GiB: float = Field(2.0, ge=0)  # CUDA context and NCCL buffers (not allocator)
    supports_flash_attention: bool = True
    nccl_tables: str | None = None  # folder of nccl-tests all-reduce tables, relative to data/
    efficiency: Efficiency = Efficiency()
    calibration: dict[str, Any] | None = None  # provenance written by `calibrate`

    def peak_flops(self, precision: Precision) -> float:
        if precision not in self.peak_tflops:
            known = ", ".join(p.value for p in self.peak_tflops)
            raise ConfigError(
                f"training.precision={precision.value} is not supported by {self.name} "
                f"(supports {known}); choose one of those"
            )
        return self.peak_tflops[precision] * 1e12

    @property
    def memory_bytes(self) -> float:
        return self.memory_GiB * GiB


class Job(Frozen):
    """One training job: everything the simulator needs, hardware resolved."""

    model: ModelSpec
    training: TrainingSpec
    parallel: ParallelPlan
    cluster: ClusterSpec
    hardware: HardwareSpec

    @property
    def dp(self) -> int:
        return self.parallel.dp or self.cluster.num_gpus // (self.parallel.tp * self.parallel.pp)

    @property
    def sharding(self) -> DataParallelSharding:
        """The data-parallel sharding of model states: `parallel.data_parallel_sharding`, or
        Megatron's `--use-distributed-optimizer` (ZeRO-1) / plain data parallelism."""
        chosen = self.parallel.data_parallel_sharding
        if chosen is not None:
            return chosen
        return (DataParallelSharding.OPTIM if self.parallel.distributed_optimizer
                else DataParallelSharding.NO_SHARD)

    @property
    def shards_optimizer(self) -> bool:
        """Optimizer states (and fp32 master weights) sharded over dp: ZeRO-1 and above."""
        return self.sharding.level >= DataParallelSharding.OPTIM.level

    @property
    def num_microbatches(self) -> int:
        return self.training.global_batch_size // (self.dp * self.training.micro_batch_size)

    @property
    def gpus_per_node(self) -> int:
        return self.cluster.gpus_per_node or self.hardware.gpus_per_node

    @property
    def intra_node_bandwidth_Bps(self) -> float:
        return (self.cluster.intra_node_bandwidth_GBps or self.hardware.nvlink_bandwidth_GBps) * 1e9

    @property
    def inter_node_bandwidth_Bps(self) -> float:
        gbps = self.cluster.inter_node_bandwidth_Gbps or self.hardware.inter_node_bandwidth_Gbps
        return gbps * 1e9 / 8

    @property
    def price_per_gpu_hour_usd(self) -> float:
        price = self.cluster.price_per_gpu_hour_usd
        return self.hardware.price_per_gpu_hour_usd if price is None else price


M = TypeVar("M", bound=BaseModel)


def parse(cls: type[M], data: Any, where: str) -> M:
    """Validate `data` into `cls`, turning pydantic's report into one `ConfigError` line.

    Unknown keys get the closest known key as a suggestion.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping of keys to values, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("; ".join(_describe(e, cls, where) for e in exc.errors())) from None


def _describe(err: Any, cls: type[BaseModel], where: str) -> str:
    loc = ".".join(str(part) for part in err["loc"])
    field = f"{where}.{loc}" if loc else where
    if err["type"] == "extra_forbidden":
        key = str(err["loc"][-1])
        close = difflib.get_close_matches(key, list(cls.model_fields), n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(cls.model_fields)}"
        return f"unknown key '{field}'{hint}"
    if err["type"] == "missing":
        return f"missing required key '{field}'"
    value = err.get("input")
    return f"{field}={value!r}: {err['msg']}"
