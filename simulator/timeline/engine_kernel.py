"""The pipeline engine's recurrence op by op, compiled by numba when it is installed.

`timeline_loop` walks the ops in round order (a topological order: every op's producer and its
predecessor on the stage come earlier) and computes, per op, the same float operations as the
numpy rounds of `simulator.timeline.engine` in the same order: ``end = max(end[dep] + delay, end[pred]) +
duration``, then start, idle and exposed p2p as `engine.run_pipeline` derives them. The
comparisons are written as numpy's `maximum` / `minimum` / `clip` evaluate them (the first
operand when the two are equal), so compiled, interpreted and numpy paths give bit-identical
times (tests/simulator_tests/test_engine_kernel.py).

Loading it costs a process ~0.7 s (numba's import ~0.2 s, then ~0.5 s to load the compiled
code from numba's disk cache on the first call; the first compilation on a machine ~1.2 s).
A process therefore times pipelines with numpy until that work adds up to the loading cost
(`JIT_AFTER_OPS`, a rent-or-buy rule): a loop over many jobs (a search, the scheduler, a
sample generator) switches, a single simulation from the command line never pays for numba.
`RUNS.load_now()` switches at once. Results are identical either way.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

# Ops timed with numpy before the compiled loop is loaded: ~0.7 s of numpy work at ~0.16 us per
# op (both numpy paths, measured on this project's CPU), what loading the loop costs.
JIT_AFTER_OPS = 4_000_000

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def timeline_loop(dep: np.ndarray, pred: np.ndarray, task: np.ndarray, edge: np.ndarray,
                  durations: np.ndarray, delays: np.ndarray) -> Arrays:
    """(end with the sentinel end[n] = 0, start, idle, exposed p2p, duration) of every op in
    round order. dep/pred: producer and stage predecessor (n = none); task: index into
    `durations` (forward then backward (p, v) grids, raveled); edge: index into `delays` (the
    (p,) boundary delays and a trailing zero)."""
    n = dep.size
    end = np.zeros(n + 1)
    start = np.empty(n)
    idle = np.empty(n)
    exposed = np.empty(n)
    duration = np.empty(n)
    for i in range(n):
        ready = end[dep[i]]
        before = end[pred[i]]
        delay = delays[edge[i]]
        du = durations[task[i]]
        arrival = ready + delay
        end[i] = (arrival if arrival >= before else before) + du
        s = before if before >= arrival else arrival
        x = (s if s <= arrival else arrival) - (before if before >= ready else ready)
        x = x if x >= 0.0 else 0.0
        start[i] = s
        idle[i] = s - before
        exposed[i] = x if delay > 0 else 0.0
        duration[i] = du
    return end, start, idle, exposed, duration


def levels_loop(rows: Any, deps: Any, level: Any, ptr: Any, prev: Any, p: int,
                length: int) -> int:
    """The round of every op of a generic schedule (simulator.timeline.engine._levels_by_rounds): each
    round, every stage runs its next op if that op's input ran in an earlier round, so an op's
    round is max(round of the stage's previous op, round of its input) + 1. Stage by stage,
    each runs ahead as far as its inputs are placed; the passes repeat until every op is.
    rows: (p, length) op ids in stage order; deps: each op's input (n = none); level: n + 1
    slots, -2 (not placed) and level[n] = -1; ptr / prev: p zeros / p times -1. Works on Python
    lists (interpreted) and on int64 arrays (compiled). Returns the ops placed (fewer than
    p * length: the schedule deadlocks)."""
    placed = 0
    moved = 1
    while moved and placed < p * length:
        moved = 0
        for s in range(p):
            i = ptr[s]
            last = prev[s]
            while i < length:
                d = level[deps[rows[s][i]]]
                if d == -2:
                    break
                last = (last if last > d else d) + 1
                level[rows[s][i]] = last
                i += 1
            moved += i - ptr[s]
            ptr[s] = i
            prev[s] = last
        placed += moved
    return placed


@lru_cache(maxsize=1)
def compiled_levels() -> Callable[..., int] | None:
    """`levels_loop` compiled, or None (as `compiled_loop`)."""
    from simulator import jit

    if not jit.HAVE_NUMBA:
        return None
    fn: Any = jit.njit(levels_loop)
    return fn  # type: ignore[no-any-return]


@lru_cache(maxsize=1)
def compiled_loop() -> Callable[..., Arrays] | None:
    """`timeline_loop` compiled (loaded from numba's disk cache after the first compilation),
    or None without numba / with VTRAIN_NO_JIT=1 (simulator.jit)."""
    from simulator import jit  # imports numba: deferred until a process needs the loop

    if not jit.HAVE_NUMBA:
        return None
    fn: Any = jit.njit(timeline_loop)
    return fn  # type: ignore[no-any-return]


class RunCounter:
    """The ops this process has timed (or placed in rounds) without compiled code, to decide when
    loading the compiled loops pays (a rent-or-buy rule: keep paying ~0.16 us per op until that
    adds up to the one-time cost of loading them)."""

    __slots__ = ("ops",)

    def __init__(self) -> None:
        self.ops = 0

    def loop(self, ops: int) -> Callable[..., Arrays] | None:
        """The compiled loop once `JIT_AFTER_OPS` ops have been timed without it (None before,
        or without numba); `ops`: the size of the pipeline about to be timed."""
        if self.ops < JIT_AFTER_OPS:
            self.ops += ops
            return None
        return compiled_loop()

    def levels(self, ops: int) -> Callable[..., int] | None:
        """`compiled_levels` under the same rule (building a plan counts its ops)."""
        if self.ops < JIT_AFTER_OPS:
            self.ops += ops
            return None
        return compiled_levels()

    def load_now(self) -> bool:
        """Use the compiled loop from the next pipeline on (a caller that knows it will time
        many); True when numba is available."""
        self.ops = JIT_AFTER_OPS
        return compiled_loop() is not None


RUNS = RunCounter()
