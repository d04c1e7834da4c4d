"""Graph -> timed tasks: cost each block once, then compose stage-chunk durations.

Identical layers are costed once; a chunk's forward is `layers * layer forward` plus the
embedding on the first model chunk and the head on the last. Tensor-parallel collectives block
the compute stream and are kept separately for the breakdown.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from simulator.costs import CostSource, KernelModel
from simulator.graph import Block, JobGraph
from simulator.network import NetworkModel
from simulator.ops import CommOp, Op
from simulator.specs import Job
from simulator.topology import tp_placement


@dataclass(frozen=True)
class BlockCost:
    """Seconds of one block for one micro-batch, split into compute and blocking tp comm."""

    forward: float
    forward_comm: float
    backward: float
    backward_comm: float
    recompute: float
    recompute_comm: float
    by_source: dict[CostSource, float]  # compute seconds by where the cost came from

    @property
    def forward_total(self) -> float:
        return self.forward + self.forward_comm

    @property
    def backward_total(self) -> float:
        return self.backward + self.backward_comm + self.recompute + self.recompute_comm


def cost_block(block: Block, kernels: KernelModel, comm_time: CommTimer) -> BlockCost:
    by_source: dict[CostSource, float] = defaultdict(float)

    def compute(ops: tuple[Op, ...]) -> float:
        total = 0.0
        for op in ops:
            c = kernels.cost(op)
            by_source[c.source] += c.seconds
            total += c.seconds
        return total

    def comm(ops: tuple[CommOp, ...]) -> float:
        return sum(comm_time(op) for op in ops)

    return BlockCost(compute(block.forward), comm(block.forward_comm), compute(block.backward),
                     comm(block.backward_comm), compute(block.recompute),
                     comm(block.recompute_comm), dict(by_source))


class CommTimer:
    """Times tensor-parallel collectives on the job's tp placement."""

    def __init__(self, job: Job, network: NetworkModel) -> None:
        self._network = network
        self._where = tp_placement(job)

    def __call__(self, op: CommOp) -> float:
        return self._network.time(op.kind, op.bytes, self._where)


@dataclass(frozen=True)
class StageCosts:
    """(p, v) per-micro-batch durations of every stage chunk, and their parts."""

    forward_s: np.ndarray  # compute + tp comm, what the engine schedules
    backward_s: np.ndarray  # recompute + backward + their tp comm
    parts: dict[str, np.ndarray]  # forward, backward, recompute, tp_comm (each (p, v))
    layer: BlockCost
    embedding: BlockCost
    head: BlockCost


def lower(job: Job, graph: JobGraph, kernels: KernelModel, network: NetworkModel) -> StageCosts:
    timer = CommTimer(job, network)
    layer = cost_block(graph.layer, kernels, timer)
    emb = cost_block(graph.embedding, kernels, timer)
    head = cost_block(graph.head, kernels, timer)
    p, v, n = job.parallel.pp, job.parallel.virtual_stages, graph.layers_per_chunk

    def grid(attr: str) -> np.ndarray:
        g = np.full((p, v), n * getattr(layer, attr))
        g[0, 0] += getattr(emb, attr)
        g[p - 1, v - 1] += getattr(head, attr)
        return g

    parts = {
        "forward": grid("forward"),
        "backward": grid("backward"),
        "recompute": grid("recompute"),
        "tp_comm": grid("forward_comm") + grid("backward_comm") + grid("recompute_comm"),
    }
    return StageCosts(grid("forward_total"), grid("backward_total"), parts, layer, emb, head)
