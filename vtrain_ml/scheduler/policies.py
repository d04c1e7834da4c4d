"""Scheduling policies: pure functions from the cluster's state to GPU counts per job.

- `ElasticPolicy` -- ElasticFlow (Gu et al., ASPLOS'23): admission control by minimum
  satisfactory share (`timeline.minimum_share`, jobs in deadline order), then spare GPUs to the
  jobs where they buy the most, one level at a time (``allocate_free_gpus`` / ``get_marginal``
  in ElasticFlow's ``scheduler/scheduler.py``). The gain of moving a job from a to b GPUs is
  the predicted reduction of its remaining time (a restart included) per added GPU, times its
  priority; a job that holds no GPUs is started first (deadline order), as ElasticFlow's
  infinite marginal gain does -- at its planned share (or what it held), not at one GPU, since
  growing it to its share later would cost a restart that ElasticFlow's model does not have.
  Jobs that cannot meet their deadline are rejected at arrival and never run.
- `FixedRequestPolicy` -- FIFO or EDF with fixed GPU requests, no preemption: the queue is
  served in order and stops at the first job that does not fit (ElasticFlow's
  ``one_queue_fifo_sim_jobs`` / EDF baselines). Every job is accepted.

A policy sees `JobView`s (snapshots) and returns a `Decision`; the engine applies it.
"""

from __future__ import annotations

import heapq
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from vtrain_ml.scheduler.curve import Levels
from vtrain_ml.scheduler.timeline import EPS_S, FreeTimeline, Reservation, minimum_share


class PolicyName(StrEnum):
    ELASTIC = "elastic"
    EDF = "edf"
    FIFO = "fifo"


@dataclass(frozen=True)
class JobView:
    id: int
    arrival_s: float
    deadline_s: float
    remaining: float  # iterations
    levels: Levels  # useful GPU counts and predicted seconds per iteration
    current: int  # GPUs held now
    started: bool  # has run before (a new allocation costs a restart)
    priority: float = 1.0
    request: int = 0  # fixed request of the FIFO/EDF baselines (0: cannot run)


@dataclass(frozen=True)
class Decision:
    gpus: dict[int, int]  # every admitted, unfinished job -> GPUs from now (0: waits)
    rejected: tuple[int, ...] = ()
    wake_at_s: float | None = None  # re-plan then even if nothing arrives or finishes


class Policy(ABC):
    name: PolicyName

    @abstractmethod
    def decide(self, now: float, active: Sequence[JobView], arrived: Sequence[JobView],
               capacity: int) -> Decision:
        """`active`: admitted unfinished jobs; `arrived`: jobs that arrived since the last call."""


class FixedRequestPolicy(Policy):
    def __init__(self, name: PolicyName) -> None:
        assert name in (PolicyName.FIFO, PolicyName.EDF)
        self.name = name

    def _key(self, job: JobView) -> tuple[float, float, int]:
        first = job.deadline_s if self.name is PolicyName.EDF else job.arrival_s
        return (first, job.arrival_s, job.id)

    def decide(self, now: float, active: Sequence[JobView], arrived: Sequence[JobView],
               capacity: int) -> Decision:
        rejected = tuple(j.id for j in arrived if j.request <= 0 or j.request > capacity)
        jobs = list(active) + [j for j in arrived if j.id not in rejected]
        gpus = {j.id: j.current for j in jobs}
        free = capacity - sum(gpus.values())
        for job in sorted((j for j in jobs if j.current == 0), key=self._key):
            if job.request > free:
                break  # strict queue order: no backfilling past the head
            gpus[job.id] = job.request
            free -= job.request
        return Decision(gpus, rejected)


class ElasticPolicy(Policy):
    name = PolicyName.ELASTIC

    def __init__(self, restart_s: float = 0.0, slot_s: float = 0.0) -> None:
        """`slot_s`: ElasticFlow's ``scheduling_slot`` -- the least time between re-plans that no
        arrival or completion triggers; shares are planned to end `slot_s` before the deadline,
        so that a reservation starting up to one slot late still finishes in time."""
        self.restart_s = restart_s
        self.slot_s = slot_s

    def plan(self, now: float, jobs: Sequence[JobView], capacity: int) -> dict[int, Reservation | None]:
        """Minimum satisfactory shares in deadline order on one free-GPU timeline."""
        timeline = FreeTimeline(now, capacity)
        out: dict[int, Reservation | None] = {}
        for job in sorted(jobs, key=lambda j: (j.deadline_s, j.arrival_s, j.id)):
            out[job.id] = minimum_share(timeline, job.levels, job.remaining, job.deadline_s - self.slot_s,
                                        self.restart_s, job.current, job.started)
        return out

    def decide(self, now: float, active: Sequence[JobView], arrived: Sequence[JobView],
               capacity: int) -> Decision:
        admitted = list(active)
        plan: dict[int, Reservation | None] | None = None  # of `admitted`, computed when needed
        rejected: list[int] = []
        for job in arrived:
            trial = self.plan(now, [*admitted, job], capacity)
            late = [j.id for j in admitted if trial[j.id] is None]
            if late and plan is None:
                plan = self.plan(now, admitted, capacity)
            # admit when the newcomer meets its deadline and every admitted job that could
            # meet its own still can
            if trial[job.id] is not None and all(plan is None or plan[i] is None for i in late):
                admitted.append(job)
                plan = trial
            else:
                rejected.append(job.id)
        if plan is None:
            plan = self.plan(now, admitted, capacity)
        gpus = {j.id: (r.gpus_now if (r := plan[j.id]) else 0) for j in admitted}
        spare = capacity - sum(gpus.values())
        assert spare >= 0
        targets = {j.id: j.current if j.current else (r.quota if (r := plan[j.id]) else 0) for j in admitted}
        fill_spare(gpus, admitted, spare, self.restart_s, targets)
        # re-plan when a reservation begins for a job that holds less than its share by then
        later = [r.start_s for jid, r in plan.items()
                 if r is not None and r.start_s > now + EPS_S and gpus[jid] < r.quota]
        return Decision(gpus, tuple(rejected), max(min(later), now + self.slot_s) if later else None)


def remaining_time(job: JobView, gpus: int, restart_s: float) -> float:
    """Predicted seconds to finish at `gpus` from now (inf at 0), a restart included if it moves."""
    if gpus == 0:
        return math.inf
    moves = job.started and gpus != job.current
    return job.remaining * job.levels.seconds(gpus) + (restart_s if moves else 0.0)


def _next_step(job: JobView, gpus: int, spare: int, target: int) -> int | None:
    """The next affordable GPU count. Below its `target` (what the job holds now, or the share it
    is planned to run at) a job moves as close to the target as the spare GPUs allow: starting
    below its share, or shrinking, would cost a restart later. At or above it, the next level."""
    if gpus < target:
        i = job.levels.floor(min(target, gpus + spare))
        return int(job.levels.gpus[i]) if i >= 0 and job.levels.gpus[i] > gpus else None
    i = job.levels.floor(gpus) + 1
    if i < len(job.levels.gpus) and job.levels.gpus[i] - gpus <= spare:
        return int(job.levels.gpus[i])
    return None


def fill_spare(gpus: dict[int, int], jobs: Sequence[JobView], spare: int, restart_s: float,
               targets: dict[int, int] | None = None) -> None:
    """Hand `spare` GPUs out one step at a time to the largest marginal gain (in place).

    `targets`: per job the count its first step aims at (default: the GPUs it holds now)."""
    by_id = {j.id: j for j in jobs}
    aims = {j.id: j.current for j in jobs} | dict(targets or {})
    heap: list[tuple[tuple[int, float, float, int], int, int, int]] = []

    def push(job: JobView) -> None:
        have = gpus[job.id]
        step = _next_step(job, have, spare, aims[job.id])
        if step is None:
            return
        gain = (remaining_time(job, have, restart_s) - remaining_time(job, step, restart_s)) / (step - have)
        if have == 0:
            key = (0, job.deadline_s, job.arrival_s, job.id)  # idle jobs first, in deadline order
        elif gain > 0:
            key = (1, -gain * job.priority, job.arrival_s, job.id)
        else:
            return
        heapq.heappush(heap, (key, job.id, have, step))

    for job in jobs:
        push(job)
    while heap:
        _, jid, have, planned = heapq.heappop(heap)
        job = by_id[jid]
        if gpus[jid] != have:
            continue  # stale entry: the job moved since
        step = _next_step(job, have, spare, aims[jid])
        if step != planned:  # the spare GPUs shrank: rank the job's affordable step again
            push(job)
            continue
        gpus[jid] = step
        spare -= step - have
        push(job)


def make_policy(name: str | PolicyName, restart_s: float = 0.0, slot_s: float = 0.0) -> Policy:
    policy = PolicyName(name)
    if policy is PolicyName.ELASTIC:
        return ElasticPolicy(restart_s, slot_s)
    return FixedRequestPolicy(policy)
