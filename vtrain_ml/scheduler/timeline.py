"""The cluster's future free GPUs, and ElasticFlow's minimum satisfactory share on it.

ElasticFlow (Gu et al., ASPLOS'23, Sec. 4.2; `ef_sim_allocation` in ElasticFlow's
``scheduler/scheduler.py``) admits jobs in deadline order against a piecewise-constant timeline
of free GPUs. A job's *minimum satisfactory share* is the smallest GPU level q such that, filling
the timeline backwards from its deadline with, in each interval, the largest level not above
min(q, free GPUs), the job completes its remaining iterations by the deadline. The filled
intervals are then reserved, so later-deadline jobs plan around them; filling backwards (as late
as possible) leaves the near future free for the greedy hand-out of spare GPUs.

Here a level's speed is the oracle's *predicted* seconds per iteration (`Levels`). A job whose
allocation would change pays the restart cost once (checkpoint + restart), as extra work at the
share's speed -- a conservative simplification of ElasticFlow's per-interval accounting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vtrain_ml.scheduler.curve import Levels

EPS_S = 1e-6


@dataclass(frozen=True)
class Reservation:
    """A job's share: the level q, the first reserved instant and GPUs it holds from now."""

    quota: int
    start_s: float
    gpus_now: int


class FreeTimeline:
    """Free GPUs from `now` on: segment i covers [starts[i], starts[i+1]), the last is open."""

    def __init__(self, now: float, capacity: int) -> None:
        self.starts = np.array([now], dtype=float)
        self.free = np.array([capacity], dtype=np.int64)

    @property
    def now(self) -> float:
        return float(self.starts[0])

    def split(self, t: float) -> int:
        """Index of the segment starting at `t`, inserting a breakpoint if needed."""
        i = int(np.searchsorted(self.starts, t, side="right")) - 1
        if i < 0 or abs(self.starts[i] - t) <= EPS_S:  # at (or, rounded, just before) the start
            return max(i, 0)
        # concatenation: the same arrays as np.insert, without its generic-axis overhead
        self.starts = np.concatenate((self.starts[:i + 1], (t,), self.starts[i + 1:]))
        self.free = np.concatenate((self.free[:i + 1], self.free[i:i + 1], self.free[i + 1:]))
        return i + 1

    def window(self, deadline: float) -> tuple[np.ndarray, np.ndarray]:
        """(durations, free GPUs) of the segments before `deadline`."""
        n = int(np.searchsorted(self.starts, deadline, side="left"))
        ends = np.append(self.starts[1:n], deadline)
        return ends - self.starts[:n], self.free[:n]

    def allocs(self, levels: Levels, quota: int, free: np.ndarray) -> np.ndarray:
        """Per segment, the largest level <= min(quota, free); 0 where none fits."""
        idx = np.searchsorted(levels.gpus, np.minimum(free, quota), side="right") - 1
        return np.where(idx >= 0, levels.gpus[np.maximum(idx, 0)], 0)

    def work(self, levels: Levels, quota: int, deadline: float) -> tuple[np.ndarray, np.ndarray]:
        """(iterations per segment, allocation per segment) at share `quota` before `deadline`."""
        durations, free = self.window(deadline)
        idx = np.searchsorted(levels.gpus, np.minimum(free, quota), side="right") - 1
        rate = np.where(idx >= 0, 1.0 / levels.predicted_s[np.maximum(idx, 0)], 0.0)
        return durations * rate, np.where(idx >= 0, levels.gpus[np.maximum(idx, 0)], 0)

    def reserve(self, levels: Levels, quota: int, start: float, deadline: float) -> None:
        a, b = self.split(start), self.split(deadline)
        self.free[a:b] -= self.allocs(levels, quota, self.free[a:b])
        assert (self.free >= 0).all(), "a reservation exceeded the free GPUs"


def needed_iterations(levels: Levels, quota: int, remaining: float, restart_s: float,
                      current: int, started: bool) -> float:
    """Remaining iterations, plus the restart time (at the share's speed) if the job would move."""
    moves = started and quota != current
    return remaining + (restart_s / levels.seconds(quota) if moves else 0.0)


def minimum_share(timeline: FreeTimeline, levels: Levels, remaining: float, deadline: float,
                  restart_s: float = 0.0, current: int = 0, started: bool = False) -> Reservation | None:
    """Reserve the job's minimum satisfactory share on `timeline` (None: no share meets the
    deadline, and nothing is reserved). Binary search over levels: more GPUs never do less work."""
    if deadline <= timeline.now + EPS_S or len(levels.gpus) == 0:
        return None

    # the window before the deadline and each level's speed, once for the whole search (each
    # probe computes exactly what `timeline.work(levels, q, deadline)[0]` would)
    durations, free = timeline.window(deadline)
    speed = 1.0 / levels.predicted_s

    def enough(i: int) -> bool:
        q = int(levels.gpus[i])
        need = needed_iterations(levels, q, remaining, restart_s, current, started)
        idx = levels.gpus.searchsorted(np.minimum(free, q), side="right") - 1
        rate = np.where(idx >= 0, speed[np.maximum(idx, 0)], 0.0)
        return float((durations * rate).sum()) >= need * (1 - 1e-12)

    lo, hi = 0, len(levels.gpus) - 1
    if not enough(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if enough(mid):
            hi = mid
        else:
            lo = mid + 1
    quota = int(levels.gpus[lo])
    need = needed_iterations(levels, quota, remaining, restart_s, current, started)
    work, alloc = timeline.work(levels, quota, deadline)
    suffix = np.cumsum(work[::-1])[::-1]  # iterations from segment k to the deadline
    k = int(np.nonzero(suffix >= need * (1 - 1e-12))[0][-1])
    after = float(suffix[k + 1]) if k + 1 < len(suffix) else 0.0
    inside = k + 1 < len(timeline.starts) and timeline.starts[k + 1] < deadline
    end_k = float(timeline.starts[k + 1]) if inside else deadline
    rate = work[k] / max(end_k - float(timeline.starts[k]), EPS_S)
    start = float(max(float(timeline.starts[k]), end_k - (need - after) / rate))
    gpus_now = int(alloc[0]) if k == 0 and start <= timeline.now + EPS_S else 0
    timeline.reserve(levels, quota, start, deadline)
    return Reservation(quota, start, gpus_now)
