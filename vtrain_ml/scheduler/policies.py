"""Scheduling policies: from the cluster's state to GPU counts per job.

- `ElasticPolicy` -- ElasticFlow (Gu et al., ASPLOS'23): admission control that keeps its
  promises (`commitments`: a newcomer is admitted only if a window of its minimum share fits in
  the GPUs no admitted job's window holds, a restart included), then spare GPUs to the jobs where
  they buy the most, one level at a time (``allocate_free_gpus`` / ``get_marginal`` in
  ElasticFlow's ``scheduler/scheduler.py``). The gain of moving a job from a to b GPUs is the
  predicted reduction of its remaining time (a restart included) per added GPU, times its
  priority; a job that holds no GPUs is started first (deadline order), as ElasticFlow's
  infinite marginal gain does -- at its committed share, not at one GPU, since growing it to its
  share later would cost a restart. Jobs that cannot meet their deadline are rejected at arrival
  and never run; with an exact oracle, no admitted job misses its deadline.
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
from dataclasses import dataclass, replace
from enum import StrEnum

from vtrain_ml.scheduler.commitments import (
    Commitment,
    find_commitment,
    ledger,
    may_leave_quota,
    trimmed,
)
from vtrain_ml.scheduler.curve import Levels
from vtrain_ml.scheduler.timeline import EPS_S, FreeTimeline


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
    restart_until_s: float = 0.0  # a restart under way ends then (no progress before)


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
    """ElasticFlow's admission control with kept promises (`commitments`), then the spare GPUs
    by marginal gain. One instance per simulation: it remembers its commitments."""

    name = PolicyName.ELASTIC

    def __init__(self, restart_s: float = 0.0, slot_s: float = 0.0) -> None:
        """`slot_s`: ElasticFlow's ``scheduling_slot``, kept as a safety margin: every window
        ends `slot_s` before its job's deadline."""
        self.restart_s = restart_s
        self.slot_s = slot_s
        self.commitments: dict[int, Commitment] = {}

    def _commit(self, timeline: FreeTimeline, job: JobView) -> bool:
        found = find_commitment(timeline, job, job.deadline_s - self.slot_s, self.restart_s)
        if found is None:
            return False
        self.commitments[job.id] = found
        a, b = timeline.split(found.start_s), timeline.split(found.end_s)
        timeline.free[a:b] -= found.quota
        return True

    def _replan_with(self, now: float, capacity: int, admitted: Sequence[JobView], newcomer: JobView
                     ) -> bool:
        """Admit `newcomer` by moving other windows: first those not yet open, then all. The
        moved jobs and the newcomer get new windows in deadline order, from their state now
        (a move they would make is a restart in their new window), around the windows that stay;
        all of them must fit, else nothing changes. A window is a promise about its job's
        deadline, not about its place."""
        for movable in (lambda c: not c.entered and not c.open_at(now), lambda c: True):
            moved = [j for j in admitted if (c := self.commitments.get(j.id)) is not None and movable(c)]
            if not moved:
                continue
            ids = {j.id for j in moved}
            before = self.commitments
            self.commitments = {jid: c for jid, c in before.items() if jid not in ids}
            timeline = ledger(now, capacity, self.commitments.values())
            order = sorted([*moved, newcomer], key=lambda j: (j.deadline_s, j.arrival_s, j.id))
            if all(self._commit(timeline, job) for job in order):
                return True
            self.commitments = before
        return False

    def _renew(self, now: float, active: Sequence[JobView]) -> None:
        """Forget finished jobs and expired windows, shorten windows not yet open."""
        kept: dict[int, Commitment] = {}
        for job in active:
            c = self.commitments.get(job.id)
            if c is not None and not c.over_at(now):
                kept[job.id] = trimmed(c, job, now, self.restart_s)
        self.commitments = kept

    def decide(self, now: float, active: Sequence[JobView], arrived: Sequence[JobView],
               capacity: int) -> Decision:
        self._renew(now, active)
        timeline = ledger(now, capacity, self.commitments.values())
        # an admitted job without a window (given to this policy running, or whose window ended
        # unfinished because the oracle was wrong) gets a new one if it can, else spare GPUs only
        for job in sorted((j for j in active if j.id not in self.commitments),
                          key=lambda j: (j.deadline_s, j.arrival_s, j.id)):
            self._commit(timeline, job)
        admitted, rejected = list(active), []
        for job in arrived:
            if self._commit(timeline, job) or self._replan_with(now, capacity, admitted, job):
                admitted.append(job)
                timeline = ledger(now, capacity, self.commitments.values())
            else:
                rejected.append(job.id)
        gpus = self._allocate(now, admitted, capacity)
        starts = [c.start_s for c in self.commitments.values() if c.start_s > now + EPS_S]
        return Decision(gpus, tuple(rejected), min(starts) if starts else None)

    def _allocate(self, now: float, jobs: Sequence[JobView], capacity: int) -> dict[int, int]:
        """Quotas of the open windows first, then what jobs hold beyond them where the spare
        GPUs allow (no restart), then the rest of the spare GPUs by marginal gain."""
        windows = {j.id: c for j in jobs if (c := self.commitments.get(j.id)) and c.open_at(now)}
        gpus = {j.id: windows[j.id].quota if j.id in windows else 0 for j in jobs}
        spare = capacity - sum(gpus.values())
        assert spare >= 0, "open windows exceed the cluster"

        def may_leave(job: JobView) -> bool:
            c = windows.get(job.id)
            return c is None or may_leave_quota(c, job, now, self.restart_s)

        def may_keep(job: JobView) -> bool:  # holding more than the quota, with no move now
            c = windows.get(job.id)
            return c is None or c.entered or may_leave(job)

        for job in sorted(jobs, key=lambda j: (j.deadline_s, j.arrival_s, j.id)):
            extra = job.current - gpus[job.id]
            if 0 < extra <= spare and may_keep(job) and job.levels.floor(job.current) >= 0 \
                    and int(job.levels.gpus[job.levels.floor(job.current)]) == job.current:
                gpus[job.id] = job.current
                spare -= extra
        growing = [j for j in jobs if may_leave(j)]
        targets = {j.id: (c.quota if (c := self.commitments.get(j.id)) else 0) for j in growing
                   if j.current == 0}
        fill_spare(gpus, growing, spare, self.restart_s, targets)
        for jid, c in windows.items():
            self.commitments[jid] = replace(c, entered=True)
        return gpus


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
