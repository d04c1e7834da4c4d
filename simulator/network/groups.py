"""Where the ranks of the expert-parallel and context-parallel groups sit (Megatron-Core's rank
order `tp-cp-ep-dp-pp`, `core/parallel_state.py::RankGenerator`, with MoE parallel folding: the
attention's grid tp x cp x dp x pp and the experts' grid expert_tp x ep x expert_dp x pp over the
same ranks, core/transformer/moe/README.md).

Inside a pipeline stage ranks are numbered tp fastest, then cp, then dp for the attention, and
expert_tp fastest, then ep, then expert_dp for the experts; a group is `size` ranks `stride`
apart. Megatron's order keeps expert_tp x ep consecutive, so the all-to-all stays inside the
NVLink domain whenever expert_tp x ep fits in it. The domain is the node's GPUs (the NVLink
domain field of issue 22/24's topology, once the hardware or cluster has one, is read here).
"""

from __future__ import annotations

import math

from simulator.job.specs import Job
from simulator.network.topology import Placement, dp_placement


def nvlink_domain(job: Job) -> int:
    """GPUs that reach each other over NVLink: the node, or a larger domain (NVL72) where the
    cluster or hardware description states one."""
    domain = getattr(job.cluster, "nvlink_domain", None) or getattr(job.hardware, "nvlink_domain", None)
    return min(int(domain or job.gpus_per_node), job.cluster.num_gpus)


def strided_placement(job: Job, size: int, stride: int) -> Placement:
    """`size` ranks `stride` apart, every group of its kind communicating at the same time."""
    domain = nvlink_domain(job)
    per_node = 1 if stride >= domain else max(1, min(size, domain // stride))
    nodes = math.ceil(size / per_node)
    return Placement(size, per_node, nodes, domain if nodes > 1 else per_node)


def ring_placement(job: Job, size: int, stride: int) -> Placement:
    """A neighbour exchange on a ring of `size` ranks `stride` apart: between two ranks of one
    domain, or, when the ring spans domains, across the network, where every ring of the domain
    crosses at the same time."""
    group = strided_placement(job, size, stride)
    if not group.crosses_nodes:
        return Placement(2, 2, 1, 2)
    return Placement(2, 1, 2, max(1, nvlink_domain(job) // group.ranks_per_node))


def data_parallel_placement(job: Job) -> Placement:
    """The ranks that reduce the attention's (dense) gradients: dp x cp of them (Megatron's
    data-parallel group with context parallelism), tp apart."""
    if job.parallel.cp == 1:
        return dp_placement(job)
    return strided_placement(job, job.dp * job.parallel.cp, job.parallel.tp)


def expert_data_parallel_placement(job: Job) -> Placement:
    """The ranks that reduce the experts' gradients: expert_dp of them, expert_tp x ep apart."""
    return strided_placement(job, job.expert_dp, job.expert_tp * job.parallel.ep)
