"""Closed choices of the domain. Dispatch on these through explicit mappings."""

from __future__ import annotations

from enum import StrEnum


class Precision(StrEnum):
    """`training.precision`: the job's arithmetic. fp8 and fp4 run the linear layers' GEMMs low
    (the recipe's table, simulator.job.precision) and keep weights, activations and every other
    op in bf16, as Megatron's `--bf16 --fp8-format` / `--fp4-format` do."""

    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    FP4 = "fp4"

    @property
    def base(self) -> Precision:
        """The 16-bit dtype of weights, activations and every op that does not run low."""
        return Precision.FP16 if self is Precision.FP16 else Precision.BF16

    @property
    def bytes(self) -> int:
        """Bytes of one element of the 16-bit training dtype (`base`): the activation and weight
        dtype. A low-precision GEMM's operand bytes come from its recipe's format."""
        return 2

    @property
    def is_low(self) -> bool:
        return self in (Precision.FP8, Precision.FP4)


class Fp8Recipe(StrEnum):
    """Megatron-LM's `--fp8-recipe` (Transformer Engine's recipes)."""

    DELAYED = "delayed"  # DelayedScaling: per-tensor scale from an amax history
    TENSORWISE = "tensorwise"  # Float8CurrentScaling: per-tensor scale from this tensor's amax
    BLOCKWISE = "blockwise"  # Float8BlockScaling: 1x128 / 128x128 FP32 block scales
    MXFP8 = "mxfp8"  # MXFP8BlockScaling: 1x32 E8M0 block scales (Blackwell)


class Fp4Recipe(StrEnum):
    """Megatron-LM's `--fp4-recipe`."""

    NVFP4 = "nvfp4"  # NVFP4BlockScaling: 16-element E4M3 block scales, RHT on wgrad operands


class DataParallelSharding(StrEnum):
    """Megatron-FSDP's `--data-parallel-sharding-strategy`: which model states are sharded over
    the data-parallel ranks (ZeRO-0 to ZeRO-3)."""

    NO_SHARD = "no_shard"
    OPTIM = "optim"  # ZeRO-1: the distributed optimizer
    OPTIM_GRADS = "optim_grads"  # ZeRO-2
    OPTIM_GRADS_PARAMS = "optim_grads_params"  # ZeRO-3 / FSDP

    @property
    def level(self) -> int:
        """0 (none sharded) to 3 (everything): the enum's order."""
        return _SHARDING_LEVEL[self]


_SHARDING_LEVEL = {s: i for i, s in enumerate(DataParallelSharding)}


class CudaGraphs(StrEnum):
    """`training.cuda_graphs`: which launches are captured in CUDA graphs (Megatron-LM's
    `--cuda-graph-impl`): none, each transformer layer's forward and backward (`local` /
    `transformer_engine` per-layer graphs), or the whole forward-backward (`full_iteration`)."""

    NONE = "none"
    PER_LAYER = "per_layer"
    FULL_ITERATION = "full_iteration"


class GpuArchitecture(StrEnum):
    """The GPU generation, which decides the low-precision formats its tensor cores run."""

    VOLTA = "volta"
    AMPERE = "ampere"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"


class Recompute(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022)."""

    NONE = "none"
    SELECTIVE = "selective"  # recompute the attention core only
    FULL = "full"  # store only each layer's input; recompute the whole layer


class Schedule(StrEnum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED_1F1B = "interleaved_1f1b"


class Norm(StrEnum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class Activation(StrEnum):
    """The MLP activation of a non-gated model (a gated MLP is SwiGLU)."""

    GELU = "gelu"  # one kernel (Megatron's fused bias-GeLU, torch.nn.functional.gelu)
    GELU_NEW = "gelu_new"  # Hugging Face GPT-2's tanh approximation written as eager PyTorch ops


class PositionEmbedding(StrEnum):
    LEARNED = "learned"
    ROPE = "rope"


class Framework(StrEnum):
    """The training software whose semantics the graph and memory model follow. The differences
    are one table (`simulator.job.framework`), not conditions spread through the graph."""

    MEGATRON_LM = "megatron-lm"  # NVIDIA Megatron-LM / Megatron-Core
    MEGATRON_DEEPSPEED = "megatron-deepspeed"  # vTrain's measured runs
    PYTORCH = "pytorch"  # plain PyTorch / Hugging Face eager with torch.autocast


class Optimizer(StrEnum):
    ADAM = "adam"


class CollectiveKind(StrEnum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    SEND_RECV = "send_recv"
    ALL_TO_ALL = "all_to_all"  # personalized exchange (MoE token dispatch, Ulysses attention)
    DEEPEP_ALL_TO_ALL = "deepep_all_to_all"  # DeepEP's fused dispatch / combine kernels (flex)


class TokenDispatcher(StrEnum):
    """Megatron-Core's `--moe-token-dispatcher-type` (core/transformer/moe/token_dispatcher.py)."""

    ALLTOALL = "alltoall"  # permute -> all-to-all over ep -> (all-gather over expert tp) -> experts
    ALLGATHER = "allgather"  # all-gather every token over tp x ep, keep the local experts' ones
    FLEX = "flex"  # DeepEP / HybridEP: each token sent once per destination rank, fused permute


class CrossEntropyFusion(StrEnum):
    """Megatron-Core's `--cross-entropy-loss-fusion` with `--cross-entropy-fusion-impl`
    (`models/common/language_module/language_module.py::compute_language_model_loss`).
    Megatron's `native` fusion keeps the fp32 softmax for the backward as the unfused loss does
    (`fusions/fused_cross_entropy.py`, `save_for_backward(exp_logits, ...)`): state `none`."""

    NONE = "none"  # tensor_parallel.vocab_parallel_cross_entropy on an fp32 copy of the logits
    TE = "te"  # Transformer Engine's parallel_cross_entropy: the gradient in the 16-bit logits


class RouterScore(StrEnum):
    """Megatron-Core's `--moe-router-score-function`."""

    SOFTMAX = "softmax"
    SIGMOID = "sigmoid"  # DeepSeek-V3


class SoftmaxType(StrEnum):
    """Megatron-Core's `--softmax-type` of the attention (Transformer Engine's fused attention)."""

    VANILLA = "vanilla"
    OFF_BY_ONE = "off-by-one"  # a constant extra logit of 0 in every softmax denominator
    LEARNABLE = "learnable"  # attention sinks: one learned logit per head (GPT-OSS)


class CpCommType(StrEnum):
    """Megatron-Core's `--cp-comm-type`: how context-parallel attention exchanges K and V
    (Transformer Engine, `attention/dot_product_attention/context_parallel.py`)."""

    P2P = "p2p"  # ring attention: K/V passed around the cp ring, overlapped with each step
    A2A = "a2a"  # Ulysses: all-to-all from sequence to head sharding and back
    ALL_GATHER = "all_gather"  # K/V all-gathered (exposed), Llama 3's long-context recipe
    A2A_P2P = "a2a+p2p"  # a2a inside the inner group, ring across the outer groups


class RecomputeModule(StrEnum):
    """Megatron-Core's `--recompute-modules` under `--recompute-granularity selective`
    (core/transformer/transformer_config.py, `recompute_modules`; default ["core_attn"]).
    Output-discarding checkpoints (`tensor_parallel.CheckpointWithoutOutput`) free a module's
    output after its consumers ran and re-run the module before their backward; the others are
    ordinary checkpoints that keep only the module's input (simulator.graph.recompute)."""

    CORE_ATTN = "core_attn"  # the attention core (checkpoint; inputs Q, K, V kept)
    MOE_ACT = "moe_act"  # the experts' activation function (output discarded)
    LAYERNORM = "layernorm"  # input_layernorm and pre_mlp_layernorm when separate (discarded)
    MLA_UP_PROJ = "mla_up_proj"  # MLA's up projections and rope (output discarded)
    MLP = "mlp"  # the dense MLP (checkpoint)
    MOE = "moe"  # the whole MoE layer: router, dispatch, experts (checkpoint)
    SHARED_EXPERTS = "shared_experts"  # the MoE layer's shared experts (checkpoint)


class StateDtype(StrEnum):
    """The dtype of an optimizer tensor under Megatron's precision-aware optimizer
    (`--exp-avg-dtype`, `--exp-avg-sq-dtype`, `--main-params-dtype`; megatron/training/
    arguments.py, Transformer Engine's FusedAdam)."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"

    @property
    def bytes(self) -> int:
        return {StateDtype.FP32: 4, StateDtype.BF16: 2, StateDtype.FP16: 2, StateDtype.FP8: 1}[self]
