"""Memory per pipeline stage per GPU: weights, gradients, optimizer states, activations.

Mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, Sec. 3.1): fp16/bf16 weights (2 bytes),
gradients (2 bytes for fp16; 4 for bf16, which Megatron accumulates and reduces in fp32), and
fp32 master weights, momentum and variance (12 bytes), sharded over dp with the distributed
optimizer (ZeRO-1). Activations: per-micro-batch saved bytes of each chunk from the graph
(Korthikanti et al. 2022) times the micro-batches in flight, taken from the stage's actual
schedule order, plus the transient working set of one layer's backward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from simulator.engine import RoundPlan
from simulator.enums import Precision
from simulator.framework import semantics
from simulator.graph import JobGraph
from simulator.params import final_norm_params, layer_params, padded_vocab, position_params
from simulator.partition import stage_layers
from simulator.specs import GiB, Job

# Megatron-DeepSpeed's accounting, kept for callers that want a lower bound on Megatron stacks'
# static memory (2 + these bytes per parameter); `static_bytes_per_param` is the exact one.
OPTIMIZER_BYTES_PER_PARAM = 12  # fp32 master weights, Adam momentum and variance


def grad_bytes_per_param(precision: Precision) -> int:
    return 4 if precision is Precision.BF16 else 2


def static_bytes_per_param(job: Job) -> float:
    """Bytes per parameter of weights, gradients and optimizer states under the job's framework
    (simulator.framework), the sharded part split over dp with the distributed optimizer."""
    shard = job.dp if job.parallel.distributed_optimizer else 1
    return semantics(job.training.framework).param_bytes(job.training.precision).per_param(shard)


@dataclass(frozen=True)
class StageMemory:
    parameters_bytes: float
    gradients_bytes: float
    optimizer_states_bytes: float
    activations_bytes: float
    reserved_bytes: float

    @property
    def total_bytes(self) -> float:
        return (self.parameters_bytes + self.gradients_bytes + self.optimizer_states_bytes
                + self.activations_bytes + self.reserved_bytes)

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "total_bytes": self.total_bytes}


def stage_param_counts(job: Job) -> np.ndarray:
    """Parameters held by one GPU of each pipeline stage: its layers' tp shard plus, on the first
    stage, the word embedding's shard and the replicated position embedding, on the last the
    replicated final norm and the output layer's shard (or, with more than one stage, the tied
    word embedding's copy)."""
    p, tp, m = job.parallel.pp, job.parallel.tp, job.model
    pad = semantics(job.training.framework).pads_vocab
    table = padded_vocab(m, tp, pad) * m.hidden_size / tp
    counts = stage_layers(job) * layer_params(m).per_rank(tp)
    counts[0] += table + position_params(m)
    counts[-1] += final_norm_params(m)
    if not m.tied_embeddings or p > 1:  # an untied output layer, or the tied table's copy
        counts[-1] += table
    return counts


def chunk_activation_bytes(job: Job, graph: JobGraph) -> np.ndarray:
    """(p, v) activation bytes one micro-batch leaves saved on each stage chunk."""
    p, v = job.parallel.pp, job.parallel.virtual_stages
    act = graph.chunk_layers * graph.layer.saved_bytes
    act[0, 0] += graph.embedding.saved_bytes
    act[p - 1, v - 1] += graph.head.saved_bytes
    return act


def in_flight_peak(plan: RoundPlan, act: np.ndarray, m: int) -> np.ndarray:
    """(p,) peak of saved activations over each stage's schedule order (F adds, B frees)."""
    p, v = act.shape
    orders = plan.orders
    backward = orders // (v * p * m)
    chunk = orders // (p * m) % v
    stage = np.arange(p)[:, None]
    delta = np.where(backward == 0, act[stage, chunk], -act[stage, chunk])
    return np.cumsum(delta, axis=1).max(axis=1)


def stage_memory(job: Job, graph: JobGraph, plan: RoundPlan) -> list[StageMemory]:
    params = stage_param_counts(job)
    shard = job.dp if job.parallel.distributed_optimizer else 1
    act = in_flight_peak(plan, chunk_activation_bytes(job, graph), job.num_microbatches)
    working = graph.layer.working_bytes
    reserved = job.hardware.reserved_memory_GiB * GiB
    pb = semantics(job.training.framework).param_bytes(job.training.precision)
    return [
        StageMemory(pb.weights * n, (pb.gradients + pb.main_gradients / shard) * n,
                    (pb.master_weights + pb.optimizer_states) * n / shard, a + working, reserved)
        for n, a in zip(params, act, strict=True)
    ]
