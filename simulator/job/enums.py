"""Closed choices of the domain. Dispatch on these through explicit mappings."""

from __future__ import annotations

from enum import StrEnum


class Precision(StrEnum):
    FP16 = "fp16"
    BF16 = "bf16"

    @property
    def bytes(self) -> int:
        return 2


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
