"""The vocabulary of the execution graph: compute ops, communication ops and the block of one
micro-batch that groups them.

An op carries what any cost model needs (kind, shapes, dtype, FLOPs, bytes moved) and what the
memory model needs (activation bytes saved for the backward pass). `profile_key` identifies an op
for the profiler: two ops with the same key cost the same on a device.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from simulator.job.enums import CollectiveKind, Precision
from simulator.job.framework import MEGATRON_HOST, HostCost


class OpKind(StrEnum):
    GEMM = "gemm"  # shape (batch, M, N, K)
    BMM = "bmm"  # attention batched matmul, shape (batch, M, N, K)
    FLASH_ATTENTION = "flash_attention"  # shape (batch*heads, seq, seq, head_dim)
    SOFTMAX = "softmax"  # fused scale-mask-softmax, shape (numel,)
    DROPOUT = "dropout"
    NORM = "norm"  # variant layernorm / rmsnorm
    ACTIVATION = "activation"  # variant gelu / swiglu
    ELEMENTWISE = "elementwise"  # residual add, bias add, rope
    EMBEDDING = "embedding"
    CROSS_ENTROPY = "cross_entropy"
    OPTIMIZER = "optimizer"  # Adam step over the local parameter shard
    QUANTIZE = "quantize"  # cast / amax / transpose / Hadamard to a low-precision format


class Phase(StrEnum):
    FORWARD = "fwd"
    BACKWARD_DATA = "bwd_data"
    BACKWARD_WEIGHT = "bwd_weight"
    BACKWARD = "bwd"  # non-GEMM backward kernels
    STEP = "step"


MATMUL_KINDS = frozenset({OpKind.GEMM, OpKind.BMM, OpKind.FLASH_ATTENTION})


@dataclass(frozen=True, slots=True)
class Op:
    """One GPU kernel (or a short sequence of kernels costed together) of one micro-batch on one
    GPU. `kernels` counts the launches it stands for: each pays the GPU launch gap and the host's
    dispatch cost, which is what bounds small models (simulator.timeline.lowering)."""

    name: str
    kind: OpKind
    phase: Phase
    shape: tuple[int, ...]
    dtype_bytes: int
    flops: float
    bytes: float  # HBM traffic
    saved_bytes: float = 0.0  # activations kept for backward (forward ops only)
    variant: str = ""
    kernels: float = 1  # launches per micro-batch (fractional: runs in some micro-batches only)
    precision: Precision | None = None  # a matmul's arithmetic when the recipe runs it low

    @property
    def profile_key(self) -> tuple[str, str, str, tuple[int, ...], int]:
        return (self.kind.value, self.variant, self.phase.value, self.shape, self.dtype_bytes)


OVERLAP_BLOCK = "*"


class CommGroup(StrEnum):
    TP = "tp"
    DP = "dp"
    PP = "pp"
    EMBEDDING = "embedding"  # first and last pipeline stage


@dataclass(frozen=True, slots=True)
class CommOp:
    """A collective or point-to-point transfer; `bytes` is the buffer size per GPU (the full,
    gathered tensor for all-gather and reduce-scatter). `overlap` names the compute op of the same
    block that runs while it is in flight (Megatron launches it asynchronously and waits after
    that op): only the part of its time beyond that op is exposed. Empty: it blocks.
    `OVERLAP_BLOCK`: it runs on its own stream during the whole direction of the block (FSDP's
    prefetched all-gathers and its reduce-scatters): together such collectives cost what outlasts
    the direction's compute."""

    name: str
    kind: CollectiveKind
    bytes: float
    group: CommGroup
    overlap: str = ""


@dataclass(frozen=True)
class Block:
    """The kernels and tensor-parallel collectives of one block for one micro-batch."""

    forward: tuple[Op, ...]
    backward: tuple[Op, ...]
    recompute: tuple[Op, ...]
    forward_comm: tuple[CommOp, ...]
    backward_comm: tuple[CommOp, ...]
    recompute_comm: tuple[CommOp, ...]
    saved_bytes: float  # held from the micro-batch's forward until its backward
    working_bytes: float  # transient during its backward (e.g. the recomputed activations)
    forward_transient_bytes: float = 0.0  # alive only at the end of its forward (loss temps)
    host_cost: HostCost = MEGATRON_HOST  # the stack's host time per launch of each direction
    graph_captured: bool = False  # replayed from a CUDA graph: one launch per direction
