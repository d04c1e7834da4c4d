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


# The variant of the framework's own per-iteration kernels of the step besides the optimizer
# (Megatron-Core's DDP zeroing its gradient buffer and taking its NaN-check norm,
# simulator.timeline.tail.grad_buffer_op): a traced iteration's phases already hold them.
FRAMEWORK_STEP = "framework_step"

# The variant of a small copy the host waits for (MoE's tokens-per-expert counts): after it the
# host has lost its lead over the GPU (simulator.costs.blocks).
HOST_SYNC = "host_sync"


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
    host_launches: float | None = None  # the host's dispatches when fewer than `kernels` (one
    # call launching several kernels from C++, e.g. a grouped GEMM's per-expert GEMMs)
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
    EP = "ep"  # expert-parallel ranks (token dispatch and combine)
    EXPERT_TP = "etp"  # expert tensor-parallel ranks
    EXPERT_TP_EP = "etp_ep"  # expert_tp x ep ranks (the allgather dispatcher)
    CP = "cp"  # context-parallel ranks (a2a, all-gather of K/V)
    CP_RING = "cp_ring"  # neighbours on the context-parallel ring (p2p K/V exchange)
    CP_INNER = "cp_inner"  # the a2a group of hierarchical (a2a+p2p) context parallelism


# The collectives of these groups are reported apart from tensor parallelism's.
EP_GROUPS = frozenset({CommGroup.EP, CommGroup.EXPERT_TP, CommGroup.EXPERT_TP_EP})
CP_GROUPS = frozenset({CommGroup.CP, CommGroup.CP_RING, CommGroup.CP_INNER})
# `CommOp.overlap` naming no op of the block but the other direction's compute of the same
# layer: Megatron's combined 1F1B schedule runs one micro-batch's forward beside another's
# backward, so a forward all-to-all hides behind backward compute and vice versa.
OTHER_DIRECTION = "<other direction>"


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
    # transient communication buffers alive while the block runs (simulator.memory.stages)
    dispatch_buffer_bytes: float = 0.0  # MoE: permuted and received tokens of one layer
    kv_buffer_bytes: float = 0.0  # context parallelism: K/V received from other cp ranks
    moe_saved_bytes: float = 0.0  # the part of saved_bytes the MoE (router, experts) keeps
    graph_captured: bool = False  # replayed from a CUDA graph: one launch per direction
