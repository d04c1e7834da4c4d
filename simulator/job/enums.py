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
