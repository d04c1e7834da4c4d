"""Typed, frozen descriptions of a training job: model, training, parallel plan, cluster, hardware.

Validated once at the edge (`validate_job`); the core trusts them afterwards. Units are SI
inside; fields that carry a user-facing unit say so in their name (``_GBps``, ``_Gbps``, ``_GiB``).
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
)

from simulator.errors import ConfigError
from simulator.job.enums import (
    Activation,
    CpCommType,
    CrossEntropyFusion,
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
    RecomputeModule,
    RouterScore,
    Schedule,
    SoftmaxType,
    StateDtype,
    TokenDispatcher,
)

# re-exported: callers parse configs with the specs they parse into
from simulator.job.parsing import parse as parse

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
    kv_channels: PositiveInt | None = None  # head size (Megatron's --kv-channels); None = h/heads
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
    published_active_params: float | None = None  # MoE presets: parameters active per token
    # Mixture of experts, in Megatron-Core's argument names (core/transformer/moe/README.md):
    num_experts: PositiveInt | None = None  # routed experts per MoE layer; None = dense model
    moe_router_topk: PositiveInt = 2
    moe_ffn_hidden_size: PositiveInt | None = None  # one expert's FFN; None = ffn_hidden_size
    moe_shared_expert_intermediate_size: PositiveInt | None = None  # all shared experts' FFN
    moe_layer_freq: PositiveInt | tuple[int, ...] = 1  # every k-th layer MoE, or 0/1 per layer
    moe_router_score_function: RouterScore = RouterScore.SOFTMAX
    # Multi-latent attention (DeepSeek-V2/V3; Megatron-Core's MLASelfAttention):
    multi_latent_attention: bool = False
    q_lora_rank: PositiveInt | None = None  # None: queries projected directly from the hidden
    kv_lora_rank: PositiveInt = 512
    qk_head_dim: PositiveInt = 128  # the non-rotary part of a query/key head
    qk_pos_emb_head_dim: PositiveInt = 64  # the rotary part
    v_head_dim: PositiveInt = 128
    qk_layernorm: bool = False  # norms on queries and keys (Qwen3; --qk-layernorm)
    mtp_num_layers: NonNegativeInt = 0  # multi-token prediction depth (DeepSeek-V3: 1)
    window_size: PositiveInt | None = None  # sliding-window attention: keys per query (left)
    window_attn_skip_freq: PositiveInt | None = None  # every k-th layer full attention (GPT-OSS 2)
    softmax_type: SoftmaxType = SoftmaxType.VANILLA  # learnable = attention sinks (GPT-OSS)

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def moe_ffn(self) -> int:
        """One routed expert's FFN hidden size."""
        return self.moe_ffn_hidden_size or self.ffn


class TrainingSpec(Frozen):
    global_batch_size: PositiveInt
    micro_batch_size: PositiveInt = 1
    precision: Precision = Precision.BF16
    recompute: Recompute = Recompute.NONE
    flash_attention: bool = False
    optimizer: Optimizer = Optimizer.ADAM
    framework: Framework = Framework.MEGATRON_LM
    fused_softmax: bool = True  # the stack has Megatron's compiled scale-mask-softmax kernels
    # the loss's cross-entropy (enums.CrossEntropyFusion; memory only: simulator.graph.head)
    cross_entropy_fusion: CrossEntropyFusion = CrossEntropyFusion.NONE
    gradient_accumulation_fusion: bool | None = None  # None: the framework's default
    train_tokens: PositiveFloat | None = None  # token budget for time/cost to train
    # Mixture of experts (Megatron-Core's argument names):
    moe_token_dispatcher: TokenDispatcher = TokenDispatcher.ALLTOALL
    moe_expert_capacity_factor: PositiveFloat | None = None  # None: dropless
    moe_pad_expert_input_to_capacity: bool = False
    moe_grouped_gemm: bool = True  # TE's grouped GEMM over the local experts (else one per expert)
    moe_overlap_ep_comm: bool = False  # --overlap-moe-expert-parallel-comm (combined 1F1B)
    # The busiest expert rank receives this many times the mean tokens (1 = balanced, the
    # force-balanced benchmark setting); a stated assumption, not a prediction of routing.
    moe_load_imbalance: float = Field(1.0, ge=1.0)
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
    # Megatron's --recompute-modules with recompute: selective (None: ["core_attn"], its default;
    # simulator.graph.recompute)
    recompute_modules: tuple[RecomputeModule, ...] | None = None
    # DDP's grad_reduce_in_fp32 (Megatron-LM: --accumulate-allreduce-grads-in-fp32 /
    # --grad-reduce-in-bf16). None: Megatron's default, fp32 gradient buffers for bf16 / fp8 /
    # fp4 training and 16-bit ones for fp16. False: gradients accumulated and reduced in 16 bits.
    grad_reduce_in_fp32: bool | None = None
    # The precision-aware optimizer (--use-precision-aware-optimizer, Transformer Engine's
    # FusedAdam; simulator.job.param_bytes): Adam's moments and the master weights
    exp_avg_dtype: StateDtype = StateDtype.FP32
    exp_avg_sq_dtype: StateDtype = StateDtype.FP32
    main_params_dtype: StateDtype = StateDtype.FP32


class ParallelPlan(Frozen):
    """Megatron-style layout. Rank order: tp fastest, then cp, (ep,) dp, then pp (Megatron's
    default `tp-cp-ep-dp-pp`); experts fold onto their own grid expert_tp x ep x expert_dp x pp
    (MoE parallel folding, core/transformer/moe/README.md)."""

    tp: PositiveInt = 1
    pp: PositiveInt = 1
    dp: PositiveInt | None = None  # None = num_gpus / (tp * cp * pp)
    cp: PositiveInt = 1  # context parallelism: the sequence split over cp ranks
    cp_comm_type: CpCommType = CpCommType.P2P
    hierarchical_context_parallel_sizes: tuple[PositiveInt, ...] | None = None  # a2a+p2p: (a2a, p2p)
    ep: PositiveInt = 1  # expert parallelism
    expert_tp: PositiveInt | None = None  # tensor parallelism of the experts; None = tp
    virtual_stages: PositiveInt = 1
    schedule: Schedule = Schedule.ONE_F_ONE_B
    # Megatron-Core's --microbatch-group-size-per-virtual-pipeline-stage (core_r0.10.0 on): the
    # interleaved schedule runs this many micro-batches on a model chunk before the next chunk
    # (simulator.timeline.schedule); None: pp, Megatron's default (a pp equal to it reads as None)
    microbatch_group_size_per_vp_stage: PositiveInt | None = None
    sequence_parallel: bool = False
    distributed_optimizer: bool = False  # ZeRO-1: optimizer states sharded over dp
    overlap_grad_reduce: bool = False  # bucketed dp reduction overlapped with backward
    # Megatron-Core's --overlap-param-gather: the distributed optimizer's parameter all-gather
    # waits for the next iteration's forward instead of ending this one
    # (simulator.timeline.param_gather)
    overlap_param_gather: bool = False
    # MB of gradients per data-parallel bucket; None: the framework's default
    # (simulator.job.buckets: Megatron-Core's max(40M, 1M x dp) parameters, else 25 MB)
    bucket_size_mb: PositiveFloat | None = None
    first_stage_layers: PositiveInt | None = None  # Megatron's --decoder-first-pipeline-num-layers
    last_stage_layers: PositiveInt | None = None  # --decoder-last-pipeline-num-layers
    # Megatron-FSDP's --data-parallel-sharding-strategy (None: `optim` with the distributed
    # optimizer, else `no_shard`)
    data_parallel_sharding: DataParallelSharding | None = None
    tp_comm_overlap: bool = False  # TE userbuffers: tp all-gather / reduce-scatter under GEMMs

    @field_validator("microbatch_group_size_per_vp_stage")
    @classmethod
    def _group_of_pp_is_the_default(cls, group: int | None, info: ValidationInfo) -> int | None:
        """Megatron's default group is pp: a job that states it is the job that does not."""
        return None if group == info.data.get("pp") else group


class TopologyTier(Frozen):
    """One switch tier of a fat tree. `size`: GPUs under one switch (group) of this tier, e.g. a
    rail-optimized leaf unit of R/2 nodes, a pod; traffic between GPUs under different switches
    of this tier climbs to the next one. `oversubscription`: downlink / uplink bandwidth of this
    tier's switches (1: full bisection; Meta's aggregation layer 7). `hop_latency_us`: added per
    switch of this tier a message traverses."""

    name: str = ""
    size: PositiveInt
    oversubscription: float = Field(1.0, ge=1.0)
    hop_latency_us: float = Field(0.5, ge=0)


class TopologySpec(Frozen):
    """`cluster.topology`: the scale-out network as data (simulator.network.fabric reads it).

    A fat tree with one NIC per GPU on its rail (rail-optimized, NVIDIA's DGX SuperPOD design;
    NCCL's PXN moves cross-rail traffic over NVLink first, so a rail unit acts as one leaf).
    Without `tiers`, non-blocking tiers follow from the switch radix R: R/2 nodes per leaf unit,
    R^2/2 GPUs under one spine layer, R^3/4 under a core layer (three tiers; a job smaller than
    a tier never climbs it). `collnet`: the switches reduce in the network (SHARP), which
    enables NCCL's CollNet algorithms."""

    nic_bandwidth_Gbps: PositiveFloat | None = None  # per NIC; None: the node bandwidth / NICs
    nics_per_node: PositiveInt | None = None  # None: one per GPU
    switch_radix: PositiveInt = 64  # ports per switch (NVIDIA Quantum-2: 64 x 400 Gb/s)
    tiers: tuple[TopologyTier, ...] | None = None
    collnet: bool = False

    def tier_list(self, gpus_per_node: int) -> tuple[TopologyTier, ...]:
        """`tiers`, or the non-blocking three-tier tree of `switch_radix`-port switches."""
        if self.tiers is not None:
            return self.tiers
        r = self.switch_radix
        leaf = r // 2 * gpus_per_node
        spine = max(r * r // 2, leaf)
        return (TopologyTier(name="leaf", size=leaf), TopologyTier(name="spine", size=spine),
                TopologyTier(name="core", size=max(r ** 3 // 4, spine)))


class JitterSpec(Frozen):
    """`cluster.jitter`: variation of per-rank compute time, which a synchronous step pays as the
    expected maximum over ranks (simulator.timeline.stragglers). Unset fields take the hardware
    file's `efficiency.gpu_speed_cv` / `kernel_time_cv`; 0 turns a term off."""

    gpu_speed_cv: float | None = Field(None, ge=0, le=0.5)  # persistent, between GPUs (clock/power)
    kernel_time_cv: float | None = Field(None, ge=0, le=0.5)  # transient, one kernel's duration


class ClusterSpec(Frozen):
    gpu: str = "a100-80gb"
    num_gpus: PositiveInt
    gpus_per_node: PositiveInt | None = None
    intra_node_bandwidth_GBps: PositiveFloat | None = None  # per GPU, per direction
    inter_node_bandwidth_Gbps: PositiveFloat | None = None  # per node
    price_per_gpu_hour_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # GPUs sharing one NVLink fabric (an NVL72 rack: 72 over 18 nodes of 4); None: the hardware
    # file's, else gpus_per_node. Collectives and placement use the domain, not the node.
    nvlink_domain: PositiveInt | None = None
    topology: TopologySpec | None = None  # None: TopologySpec() (non-blocking, radix 64)
    jitter: JitterSpec | None = None  # None: the hardware file's efficiency defaults


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
    # NCCL's all-to-all inside the NVLink domain where it was measured apart from the other
    # collectives (B200: 0.64, bench/fit_b200_kernels.py); None: intra_bus_efficiency
    all_to_all_bus_efficiency: float | None = Field(None, gt=0, le=1)
    # per ring step (NCCL's Ring/Simple hardware latencies, src/graph/tuning.cc: NVLink 3.4 us,
    # network 14 us); every NCCL latency of that link type scales with them
    intra_latency_s: float = Field(3.4e-6, ge=0)
    inter_latency_s: float = Field(1.4e-5, ge=0)
    p2p_efficiency: float = Field(0.8, gt=0, le=1)
    collective_overhead_s: float = Field(2.4e-5, ge=0)  # host time per collective call
    collective_table_scale: float = Field(1.0, gt=0)  # measured nccl-tests time -> in training
    microbatch_overhead_s: float = Field(0.0, ge=0)  # framework work per micro-batch step
    # cuBLAS's fallback for a GEMM with a dimension not a multiple of 8 (16 bytes: no aligned
    # tensor-core kernel, e.g. an unpadded 50,257-token vocabulary): fraction of peak. Measured
    # from kernel durations in the H100 traces (../shared/data/traces/h100, mgpt_h2048 logits
    # GEMMs, `cutlass_75_..._align1`: 0.10 forward, 0.14-0.15 backward).
    unaligned_gemm_efficiency: float = Field(0.12, gt=0, le=1)
    # Fused attention's best fraction of peak where it was measured apart from GEMMs (B200:
    # bench/fit_b200_kernels.py); None: the GEMM's (gemm_max_efficiency).
    attention_max_efficiency: float | None = Field(None, gt=0, le=1)
    # ... and its depth half-point in keys per query block: a fused attention kernel's softmax
    # and rescaling per key block cost more, relative to its two matmuls, than a GEMM's epilogue
    # per K step (Hopper: 713 keys, fitted with the ceiling; None: gemm_k_half)
    attention_k_half: float | None = Field(None, gt=0)
    # Per-rank compute-time variation (simulator.timeline.stragglers), fitted by `calibrate
    # --rank-times` from a user's per-rank step times. gpu_speed_cv: standard deviation of one
    # GPU's speed around the fleet's (manufacturing and power management; Sinha et al., SC'22:
    # "8% average performance variation" between same-SKU GPUs, outliers removed, which is about
    # 5.4 standard deviations between Tukey's fences of a normal fleet: 1.5%). kernel_time_cv:
    # one kernel's duration around its shape's mean, measured in the 17 shared H100 traces
    # (bench/measure_kernel_jitter.py: time-weighted CV 0.52-2.47%, mean 1.36%).
    gpu_speed_cv: float = Field(0.015, ge=0, le=0.5)
    kernel_time_cv: float = Field(0.0136, ge=0, le=0.5)
    # SMs an NCCL collective holds while it runs beside compute (one CTA per channel): an FSDP
    # all-gather's ncclAllGather launched 24 blocks beside a 132-block GEMM on an H100 (NVIDIA
    # developer forum, 2025: "Compute-Communication Overlap Causes Severe GEMM Performance
    # Degradation because of Tail Effect"). The compute it overlaps runs on the other SMs
    # (simulator.timeline.contention): 22% slower on an H100, against the 18.9% mean (40% at
    # most) slowdown of overlapped compute measured on A100, H100 and MI250 (Lee et al. 2025,
    # arXiv 2507.03114). 0 turns the term off.
    overlap_comm_sms: float = Field(24.0, ge=0)
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
    architecture: GpuArchitecture | None = None  # decides the low-precision formats it runs
    inter_node_bandwidth_Gbps: PositiveFloat = 800.0  # per node
    price_per_gpu_hour_usd: float = Field(0.0, ge=0, allow_inf_nan=False)
    reserved_memory_GiB: float = Field(2.0, ge=0)  # CUDA context and NCCL buffers (not allocator)
    supports_flash_attention: bool = True
    nccl_tables: str | None = None  # folder of nccl-tests all-reduce tables, relative to data/
    # GPUs that share one NVLink fabric: 8 on HGX/DGX, 72 on GB200/GB300 NVL72 (a compute tray
    # holds 4); None: the node
    nvlink_domain: int | None = None
    # NVSwitch with NVLink SHARP (multicast and in-switch reduction, Hopper and later): enables
    # NCCL's NVLS algorithms inside the domain (src/graph/tuning.cc, nvlsEfficiency)
    nvlink_sharp: bool = False
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
        p = self.parallel
        return p.dp or self.cluster.num_gpus // (p.tp * p.cp * p.pp)

    @property
    def expert_tp(self) -> int:
        return self.parallel.expert_tp or self.parallel.tp

    @property
    def expert_dp(self) -> int:
        """Data-parallel size of the experts: the ranks of a pipeline stage (tp x cp x dp) over
        the expert grid's expert_tp x ep (MoE parallel folding)."""
        p = self.parallel
        return max(1, p.tp * p.cp * self.dp // (self.expert_tp * p.ep))

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
    def shards_gradients(self) -> bool:
        """Gradients sharded over dp too: ZeRO-2 and above (Megatron-FSDP's buffers), where a
        rank no longer holds its whole gradient buffer."""
        return self.sharding.level > DataParallelSharding.OPTIM.level

    @property
    def num_microbatches(self) -> int:
        return self.training.global_batch_size // (self.dp * self.training.micro_batch_size)

    @property
    def gpus_per_node(self) -> int:
        return self.cluster.gpus_per_node or self.hardware.gpus_per_node

    @property
    def nvlink_domain(self) -> int:
        """GPUs sharing one NVLink fabric, at most the cluster."""
        domain = self.cluster.nvlink_domain or self.hardware.nvlink_domain or self.gpus_per_node
        return min(domain, self.cluster.num_gpus)

    @property
    def intra_node_bandwidth_Bps(self) -> float:
        return (self.cluster.intra_node_bandwidth_GBps or self.hardware.nvlink_bandwidth_GBps) * 1e9

    @property
    def inter_node_bandwidth_Bps(self) -> float:
        """Network bytes/s per node: the topology's NICs when it names their bandwidth, else the
        cluster's, else the hardware file's."""
        topo = self.cluster.topology
        if topo is not None and topo.nic_bandwidth_Gbps is not None:
            return topo.nic_bandwidth_Gbps * (topo.nics_per_node or self.gpus_per_node) * 1e9 / 8
        gbps = self.cluster.inter_node_bandwidth_Gbps or self.hardware.inter_node_bandwidth_Gbps
        return gbps * 1e9 / 8

    @property
    def price_per_gpu_hour_usd(self) -> float:
        price = self.cluster.price_per_gpu_hour_usd
        return self.hardware.price_per_gpu_hour_usd if price is None else price
