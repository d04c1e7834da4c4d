"""Rank placement (Megatron order: tp fastest, then dp, then pp) and what each group spans.

A group's placement decides whether its collective runs on NVLink only or also crosses the
network, as on a real cluster: its members per NVLink domain (`job.nvlink_domain`: the node, or
a rack of NVL72), the domains it spans, the highest switch tier of the fat tree its traffic
climbs (simulator.network.fabric), the share of its links' bandwidth that the oversubscribed
tiers below that one leave it, and the extra latency of the switch hops.

Oversubscription: a tier-t switch whose uplinks carry 1/o of its downlinks' bandwidth passes
all traffic leaving its subtree at 1/o of the rate its GPUs could send. A ring with d of its
NVLink domains under one such switch sends one stream out of the subtree per channel, and every
group of the same kind does the same at the same time, so it keeps min(1, d / o) of its rate
(d >= o: the ring hardly leaves the subtree). A pipeline boundary whose next stage lies under
another switch sends from every GPU of the stage under that switch: min(1, S / (o F)) with S the
subtree's GPUs and F the GPUs sending out of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.job.specs import Job
from simulator.network.fabric import Fabric, fabric


@dataclass(frozen=True)
class Placement:
    """How one communication group lies on the cluster.

    size: ranks in the group; ranks_per_domain: members on one NVLink domain; domains: domains
    it spans; sharing: GPUs of a node whose NICs its traffic shares (every group of a kind runs
    its collective at the same time); tier: the highest switch tier it climbs (-1: NVLink
    only); tier_factor: the share of its network bandwidth the oversubscribed tiers below leave
    it; hop_latency_s: latency of the switch hops beyond one leaf switch.
    """

    size: int
    ranks_per_domain: int
    domains: int
    sharing: int
    tier: int = -1
    tier_factor: float = 1.0
    hop_latency_s: float = 0.0

    @property
    def crosses_domains(self) -> bool:
        return self.domains > 1


def strided_group(fab: Fabric, size: int, stride: int, sharing: int) -> Placement:
    """The group of `size` ranks `stride` GPUs apart (the first one's: every group of a kind
    lies alike when the sizes divide one another, as on real clusters)."""
    d = fab.domain
    per_domain = 1 if stride >= d else max(1, min(size, d // stride))
    domains = math.ceil(size / per_domain)
    if domains == 1:
        return Placement(size, per_domain, 1, per_domain)
    top = fab.tier_of(0, stride * (size - 1))
    factor = 1.0
    for tier in fab.tiers[:top]:
        members = min(size, max(1, tier.size // stride))
        factor = min(factor, max(1.0, members / per_domain) / tier.oversubscription)
    return Placement(size, per_domain, domains, sharing, top, min(1.0, factor),
                     fab.extra_hop_latency_s(top))


def pair(fab: Fabric, a: int, b: int, senders: int) -> Placement:
    """Two ranks, GPUs `a` and `b`, while `senders` GPUs in a row send the same way at once."""
    top = fab.tier_of(a, b)
    if top < 0:
        return Placement(2, 2, 1, 2)
    factor = 1.0
    for tier in fab.tiers[:top]:
        out = min(tier.size, senders)
        factor = min(factor, tier.size / (tier.oversubscription * out))
    return Placement(2, 1, 2, fab.gpus_per_node, top, min(1.0, factor),
                     fab.extra_hop_latency_s(top))


def tp_placement(job: Job) -> Placement:
    fab = fabric(job)
    return strided_group(fab, job.parallel.tp, 1, min(fab.gpus_per_node, job.cluster.num_gpus))


def dp_placement(job: Job) -> Placement:
    fab = fabric(job)
    return strided_group(fab, job.dp, job.parallel.tp, min(fab.gpus_per_node, job.cluster.num_gpus))


def stage_boundary_crosses_domains(job: Job, stage: int) -> bool:
    """Whether the p2p transfer between `stage` and the next stage leaves the NVLink domain; the
    boundary after the last stage leads back to stage 0 (interleaved schedules)."""
    return bool(boundaries_crossing_domains(job)[stage])


def stage_gpus(job: Job) -> int:
    """GPUs of one pipeline stage (tp x cp x dp of them: Megatron's rank order puts pp last)."""
    return job.cluster.num_gpus // job.parallel.pp


def _stage_starts(job: Job) -> np.ndarray:
    return np.arange(job.parallel.pp) * stage_gpus(job)


def boundary_tiers(job: Job) -> np.ndarray:
    """(pp,) the tier each pipeline boundary's transfer climbs (-1: inside an NVLink domain);
    index pp-1 is the last -> first stage boundary."""
    fab, start = fabric(job), _stage_starts(job)
    return np.array([fab.tier_of(int(a), int(b)) for a, b in zip(start, np.roll(start, -1),
                                                                 strict=True)])


def boundaries_crossing_domains(job: Job) -> np.ndarray:
    """(pp,) `stage_boundary_crosses_domains` of every boundary at once."""
    domain = job.nvlink_domain
    start = _stage_starts(job) // domain
    return start != np.roll(start, -1)


def pp_placement(job: Job, stage: int) -> Placement:
    start = _stage_starts(job)
    following = (stage + 1) % job.parallel.pp
    return pair(fabric(job), int(start[stage]), int(start[following]), stage_gpus(job))


def boundary_placements(job: Job) -> tuple[tuple[Placement, ...], np.ndarray]:
    """The distinct placements of the pipeline boundaries (in order of appearance) and each
    boundary's index among them."""
    fab, start, senders = fabric(job), _stage_starts(job), stage_gpus(job)
    every = [pair(fab, int(a), int(b), senders) for a, b in zip(start, np.roll(start, -1), strict=True)]
    distinct = tuple(dict.fromkeys(every))
    index = {p: i for i, p in enumerate(distinct)}
    return distinct, np.array([index[p] for p in every], dtype=np.int64)


def embedding_placement(job: Job) -> Placement:
    """The first and last stage, which share the tied word embedding."""
    start = _stage_starts(job)
    return pair(fabric(job), int(start[0]), int(start[-1]), stage_gpus(job))


def grad_stats_placement(job: Job) -> Placement:
    """The ranks that reduce the optimizer's gradient statistics: the model-parallel group (tp x
    pp ranks; Megatron's `get_grad_stats_parallel_group`), and every rank when the distributed
    optimizer shards the gradients over dp."""
    fab = fabric(job)
    tp, pp, stage = job.parallel.tp, job.parallel.pp, stage_gpus(job)
    sharing = min(fab.gpus_per_node, job.cluster.num_gpus)
    if job.shards_optimizer:
        return strided_group(fab, job.cluster.num_gpus, 1, sharing)
    if pp == 1:
        return strided_group(fab, tp, 1, sharing)
    # tp ranks of each stage, the stages `stage` GPUs apart: as many per domain as fit
    d = fab.domain
    per_domain = tp * max(1, min(pp, d // stage)) if stage < d else min(tp, d)
    domains = math.ceil(tp * pp / per_domain)
    if domains == 1:
        return Placement(tp * pp, per_domain, 1, per_domain)
    top = fab.tier_of(0, stage * (pp - 1))
    return Placement(tp * pp, per_domain, domains, sharing, top, 1.0, fab.extra_hop_latency_s(top))
