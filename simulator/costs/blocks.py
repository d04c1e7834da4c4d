"""A block's cost for one micro-batch: its ops' kernel costs, its tensor-parallel collectives and
the host's dispatch window.

The host launches kernels asynchronously and runs ahead of the GPU, so a window of kernels takes
max(GPU time, host dispatch time), not a per-kernel maximum. `BlockCost` is what every kernel
model's blocks come to (op by op here, or phase by phase from a trace in `simulator.costs.traced`);
the timeline composes it over layers, micro-batches and stages (simulator.timeline.lowering).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from simulator.costs.analytic import CostSource, KernelModel
from simulator.graph.ops import (
    CP_GROUPS,
    EP_GROUPS,
    HOST_SYNC,
    OTHER_DIRECTION,
    OVERLAP_BLOCK,
    Block,
    CommOp,
    Op,
)
from simulator.job.specs import Efficiency

CommTime = Callable[[CommOp], float]  # seconds of one tensor-parallel collective on the job's group


@dataclass(frozen=True)
class BlockCost:
    """Seconds of one block for one micro-batch: GPU compute, blocking tp comm, and the time the
    host needs beyond that to dispatch the kernels (zero when the GPU is the bottleneck)."""

    forward: float
    forward_comm: float
    backward: float
    backward_comm: float
    recompute: float
    recompute_comm: float
    forward_host_excess: float
    backward_host_excess: float  # window of recompute + backward
    by_source: dict[CostSource, float]  # compute seconds by where the cost came from
    # the exposed expert-parallel and context-parallel communication of each direction (part
    # of its *_comm field above, reported apart from tensor parallelism's)
    forward_ep_comm: float = 0.0
    backward_ep_comm: float = 0.0
    recompute_ep_comm: float = 0.0
    forward_cp_comm: float = 0.0
    backward_cp_comm: float = 0.0
    recompute_cp_comm: float = 0.0
    host_sync: float = 0.0  # GPU idle after host synchronizations (part of the host excess)
    # sum over the block's kernels of their squared durations (s^2): how much a kernel-time
    # variation adds up to over the block (simulator.timeline.stragglers)
    kernel_square_s2: float = 0.0
    # the exposed part of `forward_comm` / `backward_comm` that FSDP's data-parallel
    # collectives add (simulator.graph.fsdp)
    forward_dp_comm: float = 0.0
    backward_dp_comm: float = 0.0
    recompute_dp_comm: float = 0.0

    @property
    def ep_comm(self) -> float:
        return self.forward_ep_comm + self.backward_ep_comm + self.recompute_ep_comm

    @property
    def cp_comm(self) -> float:
        return self.forward_cp_comm + self.backward_cp_comm + self.recompute_cp_comm

    @property
    def forward_total(self) -> float:
        return self.forward + self.forward_comm + self.forward_host_excess

    @property
    def backward_total(self) -> float:
        return (self.backward + self.backward_comm + self.recompute + self.recompute_comm
                + self.backward_host_excess)

    @property
    def host_excess(self) -> float:
        return self.forward_host_excess + self.backward_host_excess


def cost_block(block: Block, kernels: KernelModel, comm_time: CommTime,
               efficiency: Efficiency, slowdown: float = 0.0) -> BlockCost:
    """Cost a block. The host launches kernels asynchronously and runs ahead of the GPU, so a
    window of kernels takes max(GPU time, host dispatch time), not a per-kernel maximum; host
    dispatch is `host_overhead_s` per kernel launch, weighted by what the stack's Python costs for
    a forward, backward or recompute launch (`block.host_cost`, simulator.job.framework), plus
    `collective_overhead_s` per collective call."""
    by_source: dict[CostSource, float] = defaultdict(float)
    seconds: dict[str, float] = {}
    exposed: dict[str, float] = defaultdict(float)  # "<direction>_<ep|cp|dp>" -> seconds

    square = [0.0]

    def compute(ops: tuple[Op, ...]) -> float:
        total = 0.0
        for op in ops:
            c = kernels.cost(op)
            by_source[c.source] += c.seconds
            seconds[op.name] = c.seconds
            total += c.seconds
            square[0] += c.seconds * c.seconds / max(1, op.kernels)
        return total

    def host(ops: tuple[Op, ...], comms: tuple[CommOp, ...], weight: float) -> float:
        return _host_s(block, ops, comms, weight, efficiency)

    def sync_idle(ops: tuple[Op, ...], weight: float) -> float:
        """After each host synchronization the GPU waits for the host's next launch."""
        syncs = sum(1 for op in ops if op.variant == HOST_SYNC)
        return syncs * weight * efficiency.host_overhead_s

    fwd, bwd, rec = compute(block.forward), compute(block.backward), compute(block.recompute)
    fwd_c = _exposed_s(block.forward_comm, comm_time, seconds, exposed, bwd, "forward", fwd,
                       slowdown)
    bwd_c = _exposed_s(block.backward_comm, comm_time, seconds, exposed, fwd, "backward", bwd + rec,
                       slowdown)
    rec_c = _exposed_s(block.recompute_comm, comm_time, seconds, exposed, bwd, "recompute",
                       slowdown=slowdown)
    w = block.host_cost
    fwd_host = host(block.forward, block.forward_comm, w.forward)
    bwd_host = (host(block.backward, block.backward_comm, w.backward)
                + host(block.recompute, block.recompute_comm, w.recompute))
    fwd_sync = sync_idle(block.forward, w.forward)
    rec_sync = sync_idle(block.recompute, w.recompute)
    return BlockCost(fwd, fwd_c, bwd, bwd_c, rec, rec_c,
                     max(0.0, fwd_host - fwd - fwd_c) + fwd_sync,
                     max(0.0, bwd_host - bwd - bwd_c - rec - rec_c) + rec_sync, dict(by_source),
                     exposed["forward_ep"], exposed["backward_ep"], exposed["recompute_ep"],
                     exposed["forward_cp"], exposed["backward_cp"], exposed["recompute_cp"],
                     fwd_sync + rec_sync, square[0], exposed["forward_dp"], exposed["backward_dp"],
                     exposed["recompute_dp"])


def _exposed_s(ops: tuple[CommOp, ...], comm_time: CommTime, seconds: dict[str, float],
               exposed: dict[str, float], other_direction: float, direction: str,
               busy: float = 0.0, slowdown: float = 0.0) -> float:
    """Seconds the collectives of one direction add to it: blocking ones in full; asynchronous
    ones only beyond the op they overlap (`seconds` of the block's ops); those overlapping the
    other direction (combined 1F1B) beyond its whole compute; those on their own stream for the
    whole direction (`OVERLAP_BLOCK`: FSDP's) together beyond the direction's compute `busy`.
    The expert-, context- and data-parallel parts are added to `exposed` as well."""
    parts = []
    hidden = streamed = 0.0
    for op in ops:
        t = comm_time(op)
        if op.overlap == OVERLAP_BLOCK:
            streamed += t
            continue
        if op.overlap == OTHER_DIRECTION:
            hidden += t
            t = 0.0
        elif op.overlap:  # beyond its GEMM, or what it slows the GEMM (timeline.contention)
            beside = seconds.get(op.overlap, 0.0)
            t = max(slowdown * min(t, beside), t - beside)
        parts.append(t)
        if op.group in EP_GROUPS:
            exposed[f"{direction}_ep"] += t
        elif op.group in CP_GROUPS:
            exposed[f"{direction}_cp"] += t
    total = sum(parts)
    if hidden:
        left = max(slowdown * min(hidden, other_direction), hidden - other_direction)
        exposed[f"{direction}_ep"] += left
        total += left
    if streamed:
        beyond = max(slowdown * min(streamed, busy), streamed - busy)
        exposed[f"{direction}_dp"] += beyond
        total += beyond
    return total


def _host_s(block: Block, ops: tuple[Op, ...], comms: tuple[CommOp, ...], weight: float,
            efficiency: Efficiency) -> float:
    """Host dispatch time of one direction's ops and collectives; a block replayed from a CUDA
    graph is one graph launch."""
    if block.graph_captured:
        return efficiency.host_overhead_s if ops else 0.0
    launches = sum(op.kernels if op.host_launches is None else op.host_launches for op in ops)
    return (launches * weight * efficiency.host_overhead_s
            + len(comms) * efficiency.collective_overhead_s)
