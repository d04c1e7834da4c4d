"""Megatron-Core's `--overlap-param-gather`: the distributed optimizer's parameter all-gather,
moved from the end of one iteration to the forward passes of the next.

Without it the optimizer step all-gathers the updated parameters synchronously, and the
simulator charges that gather at the end of the tail (simulator.timeline.tail). With it the
step gathers nothing; each model chunk's parameter buckets are gathered when the next forward
needs them, and a forward waits only for what has not arrived. Megatron-Core
(`core/distributed/param_and_grad_buffer.py::finish_param_sync`,
`distributed_data_parallel.py::_make_forward_pre_hook`, `pipeline_parallel/schedules.py`,
`training/arguments.py`) has two ways of dispatching the buckets:

- *Unaligned* (the non-interleaved schedules: arguments.py turns `align_param_gather` off
  there): nothing is dispatched before the forward. The forward pre-hook of a bucket's first
  module dispatches that bucket's all-gather if it has not been, waits for it, and then
  dispatches the next bucket's (a prefetch chain one bucket deep). A chunk of n buckets whose
  forward spends f = F/n per bucket waits g + (n - 1) max(0, g - f) for buckets of g seconds.
  A chunk of one bucket waits for all of it: Megatron buckets only the first stage's first
  chunk (simulator.job.buckets), so every later stage waits for its whole gather at its first
  forward, and in the 1F1B warm-up those waits add up along the pipeline.
- *Aligned* (the interleaved schedule, `align_param_gather` on by default): the schedule
  dispatches every bucket of chunks 0 and 1 when the iteration starts, and those of chunk
  k + 1 with the first micro-batch of chunk k, at the same moment on every pipeline rank.
  The buckets queue on the stage's one communication stream; bucket i of a chunk is needed
  after i buckets' worth of its first forward.

Either way the gathers are the same bytes over the same group as the synchronous gather
(simulator.timeline.grad_sync, simulator.graph.fsdp.gathered_after_step_bytes). The waits are
computed on the pipeline timed without them, with what the gather's time beside compute slows
that compute (simulator.timeline.contention), and then added to each chunk's first forward; the
pipeline is timed again, so a wait on one stage delays the stages that depend on it. A
shift of the second timing does not move the dispatch times of the first (one pass, not a
fixed point). `overlap_param_gather_with_optimizer_step` (a gather started inside the optimizer
step of a single-chunk model) is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simulator.graph.fsdp import gathered_after_step_bytes
from simulator.job.buckets import bucket_count, bucketed_chunks
from simulator.job.enums import CollectiveKind
from simulator.job.param_bytes import param_bytes
from simulator.job.specs import Job
from simulator.network.collectives import NetworkModel
from simulator.network.topology import dp_placement
from simulator.timeline import grad_sync
from simulator.timeline.contention import compute_slowdown
from simulator.timeline.engine import RoundPlan, Timeline, run_durations
from simulator.timeline.tail import uses_parallel_groups


@dataclass(frozen=True)
class GatherBuckets:
    """The parameter all-gathers of every model chunk, as the next forward meets them."""

    seconds: np.ndarray  # (p, v) one bucket's all-gather
    count: np.ndarray  # (p, v) buckets per chunk (1: the chunk is gathered in one collective)


def overlaps_param_gather(job: Job) -> bool:
    """Whether the job gathers its parameters under the next forward (the tail then leaves the
    gather out, simulator.timeline.tail; a group of one rank gathers in no time)."""
    return job.parallel.overlap_param_gather and job.shards_optimizer


def gather_buckets(job: Job, params_per_stage: np.ndarray, network: NetworkModel) -> GatherBuckets:
    """Each chunk's buckets: a chunk holds 1/v of its stage's parameters (the simulator's chunks
    are equal), the bucketed ones in as many buckets as their gradients fill
    (simulator.job.buckets)."""
    p, v = job.parallel.pp, job.parallel.virtual_stages
    pb = param_bytes(job)
    bucketed = bucketed_chunks(job)
    nb = bucket_count(job, params_per_stage * pb.gradients)
    count = np.where(bucketed, nb, 1)
    seconds = np.zeros((p, v))
    if uses_parallel_groups(job):  # dense over dp x cp, experts over expert_dp
        for s in range(p):
            share = np.zeros(p)
            share[s] = params_per_stage[s]
            for c in range(v):
                fraction = 1.0 / (v * int(count[s, c]))
                seconds[s, c] = grad_sync.reduction_s(job, share, network, fraction)[1][s]
        return GatherBuckets(seconds, count)
    if job.dp == 1:
        return GatherBuckets(seconds, count)
    where = dp_placement(job)
    gathered = gathered_after_step_bytes(job, params_per_stage, pb.weights)
    unique: dict[float, float] = {}
    for s in range(p):
        for c in range(v):
            nbytes = float(gathered[s]) / (v * int(count[s, c]))
            if nbytes not in unique:
                unique[nbytes] = network.time(CollectiveKind.ALL_GATHER, nbytes, where)
            seconds[s, c] = unique[nbytes]
    return GatherBuckets(seconds, count)


def chunk_wait(start: float, need: float, buckets: int, bucket_s: float, forward_s: float,
               aligned: bool) -> tuple[float, float]:
    """(seconds the chunk's first forward waits, when its last bucket arrives).

    `start`: when the stream can begin the chunk's first bucket; `need`: when the forward would
    begin without waiting. Bucket i arrives at a_i and its share of the forward (f = F / n)
    begins at c_i = max(a_i, c_{i-1} + f). Aligned: a_i = start + (i + 1) g (all dispatched
    at once, queued on one stream). Unaligned: a_i = c_{i-1} + g (dispatched when the
    previous bucket's wait ends). The wait is c_{n-1} + f - (need + F), in closed form below."""
    n, g = buckets, bucket_s
    f = forward_s / n
    first = max(need, start + g)  # c_0
    if aligned:
        last = max(need + (n - 1) * f, start + g + (n - 1) * f, start + n * g)
        return max(0.0, last - need - (n - 1) * f), start + n * g
    # c_i = c_{i-1} + max(g, f); the last bucket arrives at c_{n-2} + g
    arrived = first + (n - 2) * max(g, f) + g if n > 1 else start + g
    return first - need + (n - 1) * max(0.0, g - f), arrived


def first_forward_waits(job: Job, timeline: Timeline, forward_s: np.ndarray,
                        buckets: GatherBuckets) -> np.ndarray:
    """(p, v) seconds each chunk's first forward waits for its parameters, on `timeline` (the
    pipeline timed without the waits); a stage's earlier waits shift its later chunks."""
    p, v = job.parallel.pp, job.parallel.virtual_stages
    first = timeline.start[first_forward_ops(timeline.plan, p, v)]
    aligned = v > 1
    slowdown = compute_slowdown(job.hardware)
    waits = np.zeros((p, v))
    for s in range(p):
        shift, stream, previous = 0.0, 0.0, 0.0
        computing = float(first[s, 0])  # the stage computes from its first forward on
        for c in range(v):
            need = float(first[s, c]) + shift
            # aligned: chunk c + 1 is dispatched as chunk c's first micro-batch is scheduled
            issue = (0.0 if c < 2 else previous) if aligned else need
            n, g, f = int(buckets.count[s, c]), float(buckets.seconds[s, c]), float(forward_s[s, c])
            start = max(issue, stream)
            wait, stream = chunk_wait(start, need, n, g, f, aligned)
            # the gather's time beside compute slows it (simulator.timeline.contention)
            beside = (max(0.0, stream - max(start, computing) - wait) if aligned
                      else (n - 1) * min(g, f / n))
            waits[s, c] = wait + slowdown * beside
            shift += waits[s, c]
            previous = need
    return waits


def first_forward_ops(plan: RoundPlan, p: int, v: int) -> np.ndarray:
    """(p, v) the op that runs each chunk's first micro-batch forward (its lowest micro-batch:
    every schedule runs a chunk's micro-batches in order)."""
    fwd = np.flatnonzero(plan.backward == 0)
    key = plan.stage[fwd] * v + plan.chunk[fwd]
    order = np.lexsort((plan.microbatch[fwd], key))
    firsts = order[np.r_[0, np.flatnonzero(np.diff(key[order])) + 1]]
    out = np.empty(p * v, dtype=np.intp)
    out[key[firsts]] = fwd[firsts]
    return out.reshape(p, v)


def time_with_waits(plan: RoundPlan, forward_s: np.ndarray, backward_s: np.ndarray,
                    edge_delay_s: np.ndarray, waits: np.ndarray) -> Timeline:
    """The pipeline timed with each chunk's first forward lengthened by its wait: the first
    forward of (stage, chunk) takes its duration from a third (p, v) grid, forward + wait."""
    p, v = forward_s.shape
    task = plan.task.copy()
    task[first_forward_ops(plan, p, v).ravel()] = 2 * p * v + np.arange(p * v)
    durations = np.concatenate((forward_s.ravel(), backward_s.ravel(), (forward_s + waits).ravel()))
    return run_durations(replace(plan, task=task), durations, edge_delay_s)
