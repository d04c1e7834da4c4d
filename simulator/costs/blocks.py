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
from simulator.graph.ops import OVERLAP_BLOCK, Block, CommOp, Op
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
    # the exposed part of `forward_comm` / `backward_comm` that FSDP's data-parallel
    # collectives add (simulator.graph.fsdp); the rest is tensor-parallel
    forward_dp_comm: float = 0.0
    backward_dp_comm: float = 0.0

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
               efficiency: Efficiency) -> BlockCost:
    """Cost a block. The host launches kernels asynchronously and runs ahead of the GPU, so a
    window of kernels takes max(GPU time, host dispatch time), not a per-kernel maximum; host
    dispatch is `host_overhead_s` per kernel launch, weighted by what the stack's Python costs for
    a forward, backward or recompute launch (`block.host_cost`, simulator.job.framework), plus
    `collective_overhead_s` per collective call."""
    by_source: dict[CostSource, float] = defaultdict(float)
    seconds: dict[str, float] = {}

    def compute(ops: tuple[Op, ...]) -> float:
        total = 0.0
        for op in ops:
            c = kernels.cost(op)
            by_source[c.source] += c.seconds
            seconds[op.name] = c.seconds
            total += c.seconds
        return total

    def comm(ops: tuple[CommOp, ...], busy: float = 0.0) -> tuple[float, float]:
        """Blocking collectives in full; asynchronous ones only beyond the op they overlap;
        those on their own stream for the whole direction (`OVERLAP_BLOCK`) together beyond
        the direction's compute `busy`. Returns (all exposed, the streamed ones' share)."""
        exposed = sum(max(0.0, comm_time(op) - seconds.get(op.overlap, 0.0)) if op.overlap
                      else comm_time(op) for op in ops if op.overlap != OVERLAP_BLOCK)
        streamed = [comm_time(op) for op in ops if op.overlap == OVERLAP_BLOCK]
        if not streamed:
            return exposed, 0.0
        beyond = max(0.0, sum(streamed) - busy)
        return exposed + beyond, beyond

    def host(ops: tuple[Op, ...], comms: tuple[CommOp, ...], weight: float) -> float:
        if block.graph_captured:  # one graph launch replays the kernels and collectives
            return efficiency.host_overhead_s if ops else 0.0
        launches = sum(op.kernels for op in ops)
        return (launches * weight * efficiency.host_overhead_s
                + len(comms) * efficiency.collective_overhead_s)

    fwd = compute(block.forward)
    fwd_c, fwd_dp = comm(block.forward_comm, fwd)
    bwd, rec = compute(block.backward), compute(block.recompute)
    (bwd_c, bwd_dp), (rec_c, _) = comm(block.backward_comm, bwd + rec), comm(block.recompute_comm)
    w = block.host_cost
    fwd_host = host(block.forward, block.forward_comm, w.forward)
    bwd_host = (host(block.backward, block.backward_comm, w.backward)
                + host(block.recompute, block.recompute_comm, w.recompute))
    return BlockCost(fwd, fwd_c, bwd, bwd_c, rec, rec_c, max(0.0, fwd_host - fwd - fwd_c),
                     max(0.0, bwd_host - bwd - bwd_c - rec - rec_c), dict(by_source), fwd_dp, bwd_dp)
