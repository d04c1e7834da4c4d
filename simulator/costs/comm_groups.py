"""The placement of every communication group a block's collectives run on (tensor, expert and
context parallelism, simulator.network.groups; FSDP's data-parallel group with context
parallelism, simulator.network.groups.data_parallel_placement), keyed by the graph's `CommGroup`."""

from __future__ import annotations

from simulator.graph.fsdp import shards_units
from simulator.graph.ops import CommGroup
from simulator.job.specs import Job
from simulator.network.groups import data_parallel_placement, ring_placement, strided_placement
from simulator.network.topology import Placement, tp_placement


def uses_group_placements(job: Job) -> bool:
    """Whether a block's collectives run on groups other than tp."""
    return job.model.is_moe or job.parallel.cp > 1 or shards_units(job)


def group_placements(job: Job) -> dict[CommGroup, Placement]:
    """Each block-level group's placement (tp only for a job without experts, cp or FSDP)."""
    p, etp = job.parallel, job.expert_tp
    out = {CommGroup.TP: tp_placement(job)}
    if shards_units(job):  # dp x cp ranks (validation: FSDP without experts)
        out[CommGroup.DP] = data_parallel_placement(job)
    if job.model.is_moe:
        out[CommGroup.EXPERT_TP] = strided_placement(job, etp, 1)
        out[CommGroup.EP] = strided_placement(job, p.ep, etp)
        out[CommGroup.EXPERT_TP_EP] = strided_placement(job, etp * p.ep, 1)
    if p.cp > 1:
        hier = p.hierarchical_context_parallel_sizes
        inner = hier[0] if hier else 1
        out[CommGroup.CP] = strided_placement(job, p.cp, p.tp)
        out[CommGroup.CP_INNER] = strided_placement(job, inner, p.tp)
        out[CommGroup.CP_RING] = ring_placement(job, p.cp // inner, p.tp * inner)
    return out
