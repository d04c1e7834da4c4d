"""The cluster as a discrete-event simulation on SimPy.

Processes (SimPy's model, https://simpy.readthedocs.io): one *arrivals* process that releases
jobs at their arrival times, one *scheduler* process that re-plans at every arrival and
completion (and at the instants its policy asks for), and one process per started job that
runs until it completes or is interrupted by a re-allocation. Events at the same instant are
batched: the scheduler yields one zero-delay timeout so that every arrival and completion of
that instant is seen by one decision. SimPy processes same-time events in the order they were
scheduled, so a run is deterministic.

A job progresses at the *exact* simulator's time of the plan it runs (`LevelPlan
.iteration_time_s`), whatever its policy's oracle predicted. Changing the GPU count of a job
that has run before costs `restart_s` seconds (checkpoint + restart) on its new GPUs, during
which it makes no progress.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from vtrain_ml.scheduler.curve import LevelPlan, Levels, ScalingCurve
from vtrain_ml.scheduler.policies import Decision, JobView, Policy
from vtrain_ml.scheduler.workload import Workload

DONE_ITERATIONS = 1e-9  # remaining iterations below which a job is complete (float rounding)


@dataclass
class JobRun:
    """Mutable state of one job inside one simulation (never shared between runs)."""

    id: int
    work: Workload
    curve: ScalingCurve
    levels: Levels
    request: int
    remaining: float = 0.0
    gpus: int = 0
    plan: LevelPlan | None = None
    started: bool = False
    status: str = "waiting"  # waiting -> admitted -> done | rejected
    restart_until: float = 0.0
    last_update: float = 0.0
    finish_s: float | None = None
    restarts: int = 0
    history: list[tuple[float, int, str]] = field(default_factory=list)
    process: Any = None

    def advance(self, now: float) -> None:
        """Account the progress since the last update at the current plan's exact speed."""
        if self.plan is not None and self.gpus > 0:
            busy = now - max(self.last_update, self.restart_until)
            if busy > 0:
                self.remaining = max(0.0, self.remaining - busy / self.plan.iteration_time_s)
        self.last_update = now

    def finish_time(self, now: float) -> float:
        assert self.plan is not None
        return max(now, self.restart_until) + self.remaining * self.plan.iteration_time_s

    def view(self) -> JobView:
        return JobView(self.id, self.work.arrival_s, self.work.deadline_s, self.remaining, self.levels,
                       self.gpus, self.started, self.work.priority, self.request, self.restart_until)


class ClusterSimulation:
    """One policy on one cluster over one set of jobs; `run()` once."""

    def __init__(self, runs: Sequence[JobRun], policy: Policy, capacity: int, restart_s: float,
                 on_job_done: Callable[[], None] | None = None) -> None:
        self.runs = list(runs)
        self.policy = policy
        self.capacity = capacity
        self.restart_s = restart_s
        self.on_job_done = on_job_done
        self.env = simpy.Environment()
        self.arrived: list[JobRun] = []
        self.wake_at: float | None = None
        self.decisions = 0
        self._wake = self.env.event()

    def run(self) -> list[JobRun]:
        for r in self.runs:
            r.remaining = float(r.work.iterations)
        self.env.process(self._arrivals())
        self.env.process(self._scheduler())
        self.env.run()
        return self.runs

    # -- processes ----------------------------------------------------------------------------
    def _signal(self) -> None:
        if not self._wake.triggered:
            self._wake.succeed()

    def _arrivals(self) -> Generator[simpy.Event, Any, None]:
        for r in sorted(self.runs, key=lambda r: (r.work.arrival_s, r.id)):
            yield self.env.timeout(max(0.0, r.work.arrival_s - self.env.now))
            self.arrived.append(r)
            self._signal()

    def _pending(self) -> bool:
        return any(r.status in ("waiting", "admitted") for r in self.runs)

    def _scheduler(self) -> Generator[simpy.Event, Any, None]:
        while self._pending():
            events = [self._wake]
            if self.wake_at is not None and self.wake_at > self.env.now:
                events.append(self.env.timeout(float(self.wake_at) - self.env.now))
            yield self.env.any_of(events)
            yield self.env.timeout(0)  # let the other events of this instant land first
            if self._wake.triggered:
                self._wake = self.env.event()
            self._reschedule()

    def _job(self, r: JobRun) -> Generator[simpy.Event, Any, None]:
        while True:
            try:
                if r.gpus == 0:
                    yield self.env.event()  # preempted: wait for the scheduler
                else:
                    yield self.env.timeout(max(0.0, float(r.finish_time(self.env.now)) - self.env.now))
                    r.advance(self.env.now)
                    self._complete(r)
                    return
            except simpy.Interrupt:
                continue  # re-allocated: the scheduler already updated r

    # -- decisions ----------------------------------------------------------------------------
    def _complete(self, r: JobRun) -> None:
        now = float(self.env.now)
        r.remaining = 0.0
        r.status, r.finish_s, r.gpus, r.plan = "done", now, 0, None
        r.history.append((now, 0, ""))
        if self.on_job_done:
            self.on_job_done()
        self._signal()

    def _reschedule(self) -> None:
        now = float(self.env.now)
        active = [r for r in self.runs if r.status == "admitted"]
        for r in active:
            r.advance(now)
        arrived, self.arrived = self.arrived, []
        decision = self.policy.decide(now, [r.view() for r in active], [r.view() for r in arrived],
                                      self.capacity)
        self.decisions += 1
        by_id = {r.id: r for r in self.runs}
        for jid in decision.rejected:
            by_id[jid].status = "rejected"
            if self.on_job_done:
                self.on_job_done()
        for r in arrived:
            if r.status == "waiting":
                r.status = "admitted"
                r.last_update = now
        self._check(decision, by_id)
        for jid, gpus in sorted(decision.gpus.items()):
            self._allocate(by_id[jid], gpus, now)
        self.wake_at = decision.wake_at_s

    def _check(self, decision: Decision, by_id: dict[int, JobRun]) -> None:
        """Internal invariants of every policy: capacity, and only counts where the job fits."""
        assert sum(decision.gpus.values()) <= self.capacity, "a policy allocated more GPUs than exist"
        for jid, gpus in decision.gpus.items():
            assert gpus == 0 or gpus in set(by_id[jid].levels.gpus.tolist()), \
                f"a policy gave job {jid} {gpus} GPUs, where it has no plan"

    def _allocate(self, r: JobRun, gpus: int, now: float) -> None:
        if gpus == r.gpus:
            return
        if gpus > 0 and r.started:
            r.restart_until = now + self.restart_s
            r.restarts += 1
        r.gpus = gpus
        r.plan = r.curve.at(gpus) if gpus > 0 else None
        r.history.append((now, gpus, r.plan.layout.label if r.plan else ""))
        if gpus > 0:
            r.started = True
        if r.process is None:
            if gpus > 0:
                r.process = self.env.process(self._job(r))
        elif r.process.is_alive:
            r.process.interrupt()


def new_runs(workloads: Sequence[Workload], curves: Sequence[ScalingCurve],
             requests: Sequence[int]) -> list[JobRun]:
    return [JobRun(i, w, c, Levels.of(c), q)
            for i, (w, c, q) in enumerate(zip(workloads, curves, requests, strict=True))]


def is_finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
