"""Gradient reduction and the optimizer step of a job with experts or context parallelism.

The attention's and other dense parameters' gradients are reduced over dp x cp ranks (Megatron's
data-parallel group with context parallelism: every cp rank saw a part of each sequence), the
routed experts' over the expert_dp ranks (`parallel_state.get_expert_data_parallel_group`); the
distributed optimizer reduce-scatters each over its group, steps on its shard and all-gathers the
updated parameters (Megatron-Core `distributed/distributed_data_parallel.py` keeps dense and
expert buffers apart; with `fp8_param_gather` the quantized linear weights travel in their
format, simulator.graph.fsdp.param_gather_bytes). Bucketed overlap with the last backwards
(simulator.timeline.tail) sends each bucket's dense part over the one group and its expert part
over the other.
"""

from __future__ import annotations

import numpy as np

from simulator.graph.fsdp import param_gather_bytes
from simulator.graph.params import (
    optimizer_shards,
    stage_expert_param_counts,
    stage_quantized_linear_counts,
)
from simulator.job.enums import CollectiveKind
from simulator.job.param_bytes import param_bytes
from simulator.job.specs import Job
from simulator.network.collectives import NetworkModel
from simulator.network.groups import data_parallel_placement, expert_data_parallel_placement


def _split(job: Job, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    experts = stage_expert_param_counts(job)
    return params - experts, experts


def reduction_s(job: Job, params: np.ndarray, network: NetworkModel,
                fraction: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(p,) seconds of the gradient reduction of `fraction` of every stage's gradients, and of
    the distributed optimizer's parameter all-gather (zero without it)."""
    pb = param_bytes(job)
    dense, experts = _split(job, params)
    shard = job.shards_optimizer
    kind = CollectiveKind.REDUCE_SCATTER if shard else CollectiveKind.ALL_REDUCE
    q_dense, q_experts = stage_quantized_linear_counts(job)
    groups = ((dense, param_gather_bytes(job, dense, q_dense, pb.weights),
               data_parallel_placement(job)),
              (experts, param_gather_bytes(job, experts, q_experts, pb.weights),
               expert_data_parallel_placement(job)))
    reduce = np.zeros(job.parallel.pp)
    gather = np.zeros(job.parallel.pp)
    for counts, gathered, where in groups:
        for s, (n, g) in enumerate(zip(counts.tolist(), gathered.tolist(), strict=True)):
            if n <= 0 or where.size <= 1:
                continue
            reduce[s] += network.time(kind, fraction * n * pb.gradients, where)
            if shard:
                gather[s] += network.time(CollectiveKind.ALL_GATHER, fraction * g, where)
    return reduce, gather


def optimizer_params(job: Job, params: np.ndarray) -> np.ndarray:
    """(p,) parameters one GPU's optimizer steps on: the dense ones over dp x cp, the experts
    over expert_dp, with the distributed optimizer."""
    dense, experts = _split(job, params)
    dense_shard, expert_shard = optimizer_shards(job)
    return dense / dense_shard + experts / expert_shard
