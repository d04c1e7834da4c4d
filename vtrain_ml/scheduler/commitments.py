"""Deadline commitments of the elastic policy: one GPU level held over one window per job.

ElasticFlow (Gu et al., ASPLOS'23, Sec. 4.2) admits a job only if every admitted job can still
meet its deadline. Its minimum satisfactory share re-plans every job at every event on a
piecewise timeline of free GPUs, and a job's allocation may change at each piece; with a restart
cost per change (checkpoint + restart) that the plan does not count, admitted jobs missed their
deadlines (19 of 38 on a 60-job trace, issue 26). Here the promise is kept by construction:

- a *commitment* is a level q held on [start, end), end <= deadline, long enough for the job's
  remaining iterations at q's time per iteration, plus one restart where the job may move into
  it (it has run before, or may run on spare GPUs before its window opens);
- commitments are kept between decisions (never re-planned against the job), so the GPUs of
  every window are free of other commitments: the committed levels never exceed the cluster;
- a newcomer is admitted only if a window fits in the GPUs no commitment holds; the smallest
  level that fits wins (ElasticFlow's minimum share), placed as late as possible so that the near
  future stays free for the spare-GPU hand-out; a window not yet open is shortened from its start
  when the job got ahead on spare GPUs (its GPUs go back to the pool for later newcomers);
- inside its window a job holds at least q; it runs on more (spare GPUs) only when it could still
  finish by `end` after moving there and back to q (`may_leave_quota`), so a restart the policy
  causes never costs a promise.

With an exact oracle (predicted time per iteration = the time the job runs at) no admitted job
misses its deadline; a miss means the oracle was wrong (tests/schedule_tests/
test_admission_guarantee.py checks this on random traces).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from vtrain_ml.scheduler.curve import Levels
from vtrain_ml.scheduler.timeline import EPS_S, FreeTimeline


class JobView(Protocol):
    """What a commitment needs of a job (policies.JobView has it)."""

    @property
    def remaining(self) -> float: ...  # iterations
    @property
    def levels(self) -> Levels: ...
    @property
    def current(self) -> int: ...  # GPUs held now
    @property
    def started(self) -> bool: ...
    @property
    def restart_until_s(self) -> float: ...

# a window is this much longer than the work it holds (and may end this much after the deadline,
# the work itself never does), so that the job's completion, at a float-rounded instant, always
# lands inside its window. Absolute, so that a window shortened as its job gets ahead keeps the
# same allowance past the deadline.
MARGIN_S = 1e-3


@dataclass(frozen=True)
class Commitment:
    quota: int  # GPUs (a level of the job's curve) held on [start_s, end_s)
    start_s: float
    end_s: float
    entered: bool = False  # the job has been given its quota inside the window

    def open_at(self, now: float) -> bool:
        return self.start_s <= now + EPS_S < self.end_s

    def over_at(self, now: float) -> bool:
        return self.end_s <= now + EPS_S


def work_s(job: JobView, quota: int) -> float:
    """Seconds the job's remaining iterations take at `quota`, plus the margin."""
    return job.remaining * job.levels.seconds(quota) + MARGIN_S


def ledger(now: float, capacity: int, commitments: Iterable[Commitment]) -> FreeTimeline:
    """The GPUs no commitment holds, from `now` on."""
    timeline = FreeTimeline(now, capacity)
    for c in commitments:
        if c.end_s > now + EPS_S:
            start = max(c.start_s, now)
            a, b = timeline.split(start), timeline.split(c.end_s)
            timeline.free[a:b] -= c.quota
            assert (timeline.free >= 0).all(), "commitments exceed the cluster"
    return timeline


def _segments(timeline: FreeTimeline, end_by: float) -> list[tuple[float, float, int]]:
    """(start, end, free GPUs) of each segment before `end_by`."""
    starts, free = timeline.starts.tolist(), timeline.free.tolist()
    ends = [*starts[1:], math.inf]
    return [(a, min(b, end_by), f) for a, b, f in zip(starts, ends, free, strict=True) if a < end_by]


def latest_window(timeline: FreeTimeline, quota: int, length_s: float, end_by: float
                  ) -> tuple[float, float] | None:
    """The latest [start, start + length) before `end_by` in which `quota` GPUs are free."""
    run_end: float | None = None
    for a, b, f in reversed(_segments(timeline, end_by)):
        if f < quota:
            run_end = None
            continue
        run_end = b if run_end is None else run_end
        if run_end - a >= length_s:
            return max(a, run_end - length_s), run_end
    return None


def window_now(timeline: FreeTimeline, quota: int, length_s: float, end_by: float
               ) -> tuple[float, float] | None:
    """[now, now + length) if `quota` GPUs are free all along and it ends by `end_by`."""
    now = timeline.now
    if now + length_s > end_by:
        return None
    for a, _, f in _segments(timeline, now + length_s):
        if f < quota and a < now + length_s:
            return None
    return now, now + length_s


def find_commitment(timeline: FreeTimeline, job: JobView, end_by: float, restart_s: float
                    ) -> Commitment | None:
    """The job's commitment on `timeline` (the smallest level with a window), or None."""
    for quota in job.levels.gpus.tolist():
        work = work_s(job, quota)
        late = end_by + MARGIN_S
        window = latest_window(timeline, quota, work + restart_s, late)
        if window is None:  # starting now at the quota, a job that does not move pays no restart
            window = window_now(timeline, quota, work + _delay_now(job, quota, restart_s, timeline.now), late)
        if window is not None:
            return Commitment(quota, window[0], window[1])
    return None


def _delay_now(job: JobView, quota: int, restart_s: float, now: float) -> float:
    """Seconds before the job makes progress at `quota` from `now`: a restart if it moves
    there, else what is left of a restart under way."""
    if job.started and job.current != quota:
        return restart_s
    return max(0.0, job.restart_until_s - now)


def trimmed(c: Commitment, job: JobView, now: float, restart_s: float) -> Commitment:
    """A window shortened to the job's remaining work (never lengthened: the GPUs it gives back
    may be promised to another job at once). A window not yet open starts later; an open one
    ends once the job would be done even after a move to other GPUs and back to its quota
    (`may_leave_quota`): the room for two restarts keeps the spare GPUs usable by the job."""
    if c.entered or c.start_s <= now + EPS_S:
        end = now + 2 * restart_s + work_s(job, c.quota)
        return replace(c, end_s=end) if end < c.end_s else c
    start = c.end_s - (work_s(job, c.quota) + restart_s)
    return replace(c, start_s=start) if start > c.start_s else c


def may_leave_quota(c: Commitment, job: JobView, now: float, restart_s: float) -> bool:
    """Whether a job inside its window may run on another level than its quota now: it must
    still finish by the window's end after this move (or a restart under way: a job can enter
    its window in the middle of one) and a later move back to the quota."""
    return now + 2 * restart_s + work_s(job, c.quota) <= c.end_s + EPS_S
