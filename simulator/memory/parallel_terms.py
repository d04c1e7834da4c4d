"""The memory terms of mixture of experts and context parallelism, per pipeline stage.

- Expert weights, gradients and optimizer states: the stage's routed experts held by one GPU
  (split over ep x expert_tp, simulator.memory.states.stage_expert_param_counts), at the
  framework's bytes per parameter; the distributed optimizer shards their states over expert_dp
  (Megatron's expert data-parallel group), the dense states over dp x cp (both when
  `data_parallel_sharding` shards the optimizer: ZeRO-1).
- MoE activations: of the stage's saved activations at its peak, the part the routers, the
  dispatched token copies (top-k of them per token) and the experts keep
  (`Block.moe_saved_bytes`).
- Transient buffers while one layer runs: the all-to-all's send and receive buffers of a MoE
  layer's token copies (`Block.dispatch_buffer_bytes`), or context parallelism's K/V received
  from other ranks (`Block.kv_buffer_bytes`); the larger of the stage's layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.graph.blocks import JobGraph
from simulator.graph.params import optimizer_shards, stage_expert_param_counts
from simulator.job.param_bytes import param_bytes
from simulator.job.specs import Job


@dataclass(frozen=True)
class ParallelTerms:
    """(p,) arrays of one GPU per stage."""

    expert_weights: np.ndarray
    expert_gradients: np.ndarray
    expert_main_gradients: np.ndarray
    expert_optimizer_states: np.ndarray
    dispatch_buffers: np.ndarray
    kv_buffers: np.ndarray


def uses_parallel_terms(job: Job) -> bool:
    return job.model.is_moe or job.parallel.cp > 1 or job.model.mtp_num_layers > 0


def expert_and_dense_counts(job: Job, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters per GPU of each stage, from the stage's total."""
    experts = stage_expert_param_counts(job)
    return total - experts, experts


def parallel_terms(job: Job, graph: JobGraph, held_quantized: np.ndarray | float = 0.0
                   ) -> ParallelTerms:
    """The terms of the module docstring; `held_quantized`: expert parameters held in a
    low-precision format instead of 16 bits (`fp8_param_gather`; their bytes are counted with
    the quantized weight copies, simulator.memory.states.quantized_weights)."""
    pb = param_bytes(job)
    _, expert_shard = optimizer_shards(job)
    n = stage_expert_param_counts(job)
    present = graph.layer_counts.sum(axis=2) > 0  # (k, pp) the stage runs blocks of kind k
    blocks = graph.layer_blocks
    dispatch = np.array([b.dispatch_buffer_bytes for b in blocks])[:, None] * present
    kv = np.array([b.kv_buffer_bytes for b in blocks])[:, None] * present
    return ParallelTerms(
        expert_weights=pb.weights * (n - held_quantized) if np.any(held_quantized) else pb.weights * n,
        expert_gradients=pb.gradients * n,
        expert_main_gradients=pb.main_gradients * n / expert_shard,
        expert_optimizer_states=(pb.master_weights + pb.optimizer_states) * n / expert_shard,
        dispatch_buffers=dispatch.max(axis=0),
        kv_buffers=kv.max(axis=0))


def chunk_moe_activation_bytes(job: Job, graph: JobGraph) -> np.ndarray:
    """(p, v) the MoE part of the activations one micro-batch leaves saved on each chunk."""
    per_block = np.array([b.moe_saved_bytes for b in graph.layer_blocks])
    return np.tensordot(per_block, graph.layer_counts.astype(float), axes=1)
