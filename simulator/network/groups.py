"""Where the ranks of the expert-parallel and context-parallel groups sit (Megatron-Core's rank
order `tp-cp-ep-dp-pp`, `core/parallel_state.py::RankGenerator`, with MoE parallel folding: the
attention's grid tp x cp x dp x pp and the experts' grid expert_tp x ep x expert_dp x pp over the
same ranks, core/transformer/moe/README.md).

Inside a pipeline stage ranks are numbered tp fastest, then cp, then dp for the attention, and
expert_tp fastest, then ep, then expert_dp for the experts; a group is `size` ranks `stride`
apart. Megatron's order keeps expert_tp x ep consecutive, so the all-to-all stays inside the
NVLink domain whenever expert_tp x ep fits in it (`job.nvlink_domain`: the node, or a larger
NVLink domain such as NVL72's 72 GPUs).
"""

from __future__ import annotations

from simulator.job.specs import Job
from simulator.network.fabric import fabric
from simulator.network.topology import Placement, dp_placement, pair, strided_group


def _sharing(job: Job) -> int:
    return min(fabric(job).gpus_per_node, job.cluster.num_gpus)


def strided_placement(job: Job, size: int, stride: int) -> Placement:
    """`size` ranks `stride` apart, every group of its kind communicating at the same time
    (NVLink domain, switch tiers and their oversubscription from simulator.network.topology)."""
    return strided_group(fabric(job), size, stride, _sharing(job))


def ring_placement(job: Job, size: int, stride: int) -> Placement:
    """A neighbour exchange on a ring of `size` ranks `stride` apart: between two ranks of one
    domain, or, when the ring spans domains, across the network, where every ring of the domain
    crosses at the same time (the widest hop of the ring: its first and last rank)."""
    group = strided_placement(job, size, stride)
    if not group.crosses_domains:
        return Placement(2, 2, 1, 2)
    senders = max(1, job.nvlink_domain // group.ranks_per_domain)
    return pair(fabric(job), 0, stride * (size - 1), senders)


def data_parallel_placement(job: Job) -> Placement:
    """The ranks that reduce the attention's (dense) gradients: dp x cp of them (Megatron's
    data-parallel group with context parallelism), tp apart."""
    if job.parallel.cp == 1:
        return dp_placement(job)
    return strided_placement(job, job.dp * job.parallel.cp, job.parallel.tp)


def expert_data_parallel_placement(job: Job) -> Placement:
    """The ranks that reduce the experts' gradients: expert_dp of them, expert_tp x ep apart."""
    return strided_placement(job, job.expert_dp, job.expert_tp * job.parallel.ep)
