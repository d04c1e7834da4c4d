"""The pipeline engine's recurrence op by op, compiled by numba when it is installed.

`timeline_loop` walks the ops in round order (a topological order: every op's producer and its
predecessor on the stage come earlier) and computes, per op, the same float operations as the
numpy rounds of `simulator.engine` in the same order: ``end = max(end[dep] + delay, end[pred]) +
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
    """The ops this process has timed with numpy, to decide when loading the compiled loop pays
    (a rent-or-buy rule: keep paying numpy's ~0.16 us per op until that adds up to the one-time
    cost of loading the loop)."""

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

    def load_now(self) -> bool:
        """Use the compiled loop from the next pipeline on (a caller that knows it will time
        many); True when numba is available."""
        self.ops = JIT_AFTER_OPS
        return compiled_loop() is not None


RUNS = RunCounter()
