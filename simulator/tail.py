"""After the pipeline: data-parallel gradient reduction, embedding sync, optimizer step.

Without overlap, each stage reduces its gradients once its last backward is done (all-reduce, or
reduce-scatter with the distributed optimizer). With overlap, gradients are reduced in buckets
as the last micro-batch's backward produces them (PyTorch DDP / Megatron bucketing): bucket i of
a chunk is ready at fraction (i+1)/n of that chunk's last backward, the buckets go through one
communication stream, and only what outlasts the pipeline is exposed. Then tied-embedding
gradients are all-reduced between the first and last stage, and the Adam step runs over the local
(sharded, with ZeRO-1) parameters; ZeRO-1 then all-gathers the updated parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.costs import KernelModel
from simulator.engine import Timeline
from simulator.enums import CollectiveKind
from simulator.memory import grad_bytes_per_param
from simulator.network import NetworkModel
from simulator.ops import Op, OpKind, Phase
from simulator.params import padded_vocab
from simulator.specs import Job
from simulator.topology import dp_placement, embedding_placement

ADAM_BYTES_PER_PARAM = 36  # read grad + master/m/v, write master/m/v + fp16 copy, grad-norm read


@dataclass(frozen=True)
class Tail:
    """(p,) seconds per stage after its pipeline phase."""

    dp_exposed_s: np.ndarray
    embedding_sync_s: np.ndarray
    optimizer_s: np.ndarray
    dp_comm_s: np.ndarray  # total dp communication (exposed or hidden), for the trace


def optimizer_op(params: float, job: Job) -> Op:
    n = int(params)
    return Op("adam", OpKind.OPTIMIZER, Phase.STEP, (n,), 4, 10.0 * n, ADAM_BYTES_PER_PARAM * n)


def compute_tail(job: Job, timeline: Timeline, params_per_stage: np.ndarray,
                 kernels: KernelModel, network: NetworkModel) -> Tail:
    p = job.parallel.pp
    grad_bytes = params_per_stage * grad_bytes_per_param(job.training.precision)
    dp_total = np.zeros(p)
    exposed = np.zeros(p)
    if job.dp > 1:
        where = dp_placement(job)
        kind = (CollectiveKind.REDUCE_SCATTER if job.parallel.distributed_optimizer
                else CollectiveKind.ALL_REDUCE)
        if job.parallel.overlap_grad_reduce:
            exposed, dp_total = _overlapped(job, timeline, grad_bytes, kind, network)
        else:
            dp_total = np.array([network.time(kind, b, where) for b in grad_bytes])
            exposed = dp_total.copy()
        if job.parallel.distributed_optimizer:
            gather = np.array([network.time(CollectiveKind.ALL_GATHER, 2.0 * n, where)
                               for n in params_per_stage])
            exposed = exposed + gather
            dp_total = dp_total + gather
    shard = job.dp if job.parallel.distributed_optimizer else 1
    optimizer = np.array([kernels.cost(optimizer_op(n / shard, job)).seconds
                          for n in params_per_stage])
    return Tail(exposed, _embedding_sync(job, network), optimizer, dp_total)


def _embedding_sync(job: Job, network: NetworkModel) -> np.ndarray:
    p, m, tp = job.parallel.pp, job.model, job.parallel.tp
    sync = np.zeros(p)
    if p > 1 and m.tied_embeddings:
        nbytes = padded_vocab(m, tp) * m.hidden_size / tp * grad_bytes_per_param(job.training.precision)
        t = network.time(CollectiveKind.ALL_REDUCE, nbytes, embedding_placement(job))
        sync[0] = sync[-1] = t
    return sync


def _overlapped(job: Job, timeline: Timeline, grad_bytes: np.ndarray, kind: CollectiveKind,
                network: NetworkModel) -> tuple[np.ndarray, np.ndarray]:
    plan = timeline.plan
    p, v = job.parallel.pp, job.parallel.virtual_stages
    bwd = plan.backward == 1
    last_end = np.zeros((p, v))
    np.maximum.at(last_end, (plan.stage[bwd], plan.chunk[bwd]), timeline.end[bwd])
    last_dur = np.zeros((p, v))
    key = plan.stage[bwd] * v + plan.chunk[bwd]
    ends = timeline.end[bwd]
    order = np.lexsort((ends, key))  # last op of each (stage, chunk) is the last of its key group
    last = order[np.r_[np.flatnonzero(np.diff(key[order])), key.size - 1]]
    last_dur.flat[key[last]] = timeline.duration[bwd][last]
    chunk_bytes = np.repeat(grad_bytes[:, None] / v, v, axis=1)
    bucket = job.parallel.bucket_size_mb * 1e6
    nb = max(1, math.ceil(float(chunk_bytes.max()) / bucket))
    where = dp_placement(job)
    unique = {float(b): network.time(kind, float(b) / nb, where) for b in np.unique(chunk_bytes)}
    bucket_time = np.vectorize(unique.__getitem__)(chunk_bytes)  # (p, v)
    frac = (np.arange(nb) + 1) / nb
    ready = (last_end - last_dur)[:, :, None] + last_dur[:, :, None] * frac  # (p, v, nb)
    times = np.broadcast_to(bucket_time[:, :, None], ready.shape).reshape(p, -1)
    ready = ready.reshape(p, -1)
    idx = np.argsort(ready, axis=1)
    ready = np.take_along_axis(ready, idx, axis=1)
    times = np.take_along_axis(times, idx, axis=1)
    suffix = np.cumsum(times[:, ::-1], axis=1)[:, ::-1]
    finish = (ready + suffix).max(axis=1)
    return np.clip(finish - timeline.stage_end, 0.0, None), times.sum(axis=1)
