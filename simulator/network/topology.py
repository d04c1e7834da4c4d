"""Rank placement (Megatron order: tp fastest, then dp, then pp) and what each group spans.

A group's placement decides whether its collective runs on NVLink only or also crosses the
inter-node network, exactly as on a real cluster with `gpus_per_node` GPUs per node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.job.specs import Job


@dataclass(frozen=True)
class Placement:
    """How one communication group lies on the nodes.

    size: ranks in the group; ranks_per_node: members on one node; nodes: nodes it spans;
    sharing: GPUs of a node that drive the node's network links at the same time in this phase
    (every group of this kind runs its collective concurrently).
    """

    size: int
    ranks_per_node: int
    nodes: int
    sharing: int

    @property
    def crosses_nodes(self) -> bool:
        return self.nodes > 1


def _node_size(job: Job) -> int:
    return min(job.gpus_per_node, job.cluster.num_gpus)


def tp_placement(job: Job) -> Placement:
    tp, gpn = job.parallel.tp, _node_size(job)
    per_node = min(tp, gpn)
    nodes = math.ceil(tp / per_node)
    return Placement(tp, per_node, nodes, gpn if nodes > 1 else per_node)


def dp_placement(job: Job) -> Placement:
    tp, dp, gpn = job.parallel.tp, job.dp, _node_size(job)
    per_node = max(1, min(dp, gpn // tp)) if tp < gpn else 1
    nodes = math.ceil(dp / per_node)
    return Placement(dp, per_node, nodes, gpn)


def _stage_node(job: Job, stage: int) -> int:
    """Node of the first rank of `stage` (every rank of a stage agrees when tp*dp and the node
    size divide one another, as on real clusters)."""
    return (stage * job.parallel.tp * job.dp) // _node_size(job)


def stage_boundary_crosses_nodes(job: Job, stage: int) -> bool:
    """Whether the p2p transfer between `stage` and the next stage leaves the node; the boundary
    after the last stage leads back to stage 0 (interleaved schedules)."""
    following = (stage + 1) % job.parallel.pp
    return _stage_node(job, stage) != _stage_node(job, following)


def boundaries_crossing_nodes(job: Job) -> np.ndarray:
    """(pp,) `stage_boundary_crosses_nodes` of every boundary at once."""
    p = job.parallel.pp
    node = np.arange(p) * (job.parallel.tp * job.dp) // _node_size(job)
    return node != np.roll(node, -1)


def pp_placement(job: Job, stage: int) -> Placement:
    return p2p_placement(job, stage_boundary_crosses_nodes(job, stage))


def p2p_placement(job: Job, crosses: bool) -> Placement:
    """The two ranks of a p2p transfer, on one node or on two."""
    return Placement(2, 1 if crosses else 2, 2 if crosses else 1, _node_size(job))


def embedding_placement(job: Job) -> Placement:
    """The first and last stage, which share the tied word embedding."""
    crosses = _stage_node(job, 0) != _stage_node(job, job.parallel.pp - 1)
    return Placement(2, 1 if crosses else 2, 2 if crosses else 1, _node_size(job))


def grad_stats_placement(job: Job) -> Placement:
    """The ranks that reduce the optimizer's gradient statistics: the model-parallel group (tp x
    pp ranks; Megatron's `get_grad_stats_parallel_group`), and every rank when the distributed
    optimizer shards the gradients over dp."""
    tp, pp, dp, gpn = job.parallel.tp, job.parallel.pp, job.dp, _node_size(job)
    if job.shards_optimizer:
        size = tp * pp * dp
        return Placement(size, gpn, math.ceil(size / gpn), gpn)
    size = tp * pp
    if gpn <= tp:
        per_node = gpn
    elif gpn <= tp * dp:
        per_node = tp  # one tp slice of this dp replica per node
    else:
        per_node = tp * min(pp, gpn // (tp * dp))  # several stages share a node
    return Placement(size, per_node, math.ceil(size / per_node), gpn)
