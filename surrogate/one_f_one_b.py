"""The 1F1B pipeline's makespan for stages of unequal time, in the surrogate's closed form.

A pipeline of stages taking S_i per micro-batch was charged sum_i S_i + (m - 1) max_i S_i
(fill, then the busiest stage's steady state: `surrogate.pipeline_terms.uneven_time_s`). That is
GPipe's chain; under 1F1B a busy first stage is never idle once it starts and hides the
others' fill: with a first stage of 19 layers and 15 stages of 5, the simulator's pipeline
engine (simulator.timeline.engine) runs 16 micro-batches in 912 layer-units where the formula
charges 1,137 (-0.22 log). Uneven rows of the MoE + cp space sat at -0.10 to -0.14 log with
8 to 32 micro-batches on 8 and 16 stages and at +0.05 with 1 or 2.

`one_f_one_b_s` times the simulator's own 1F1B order (simulator.timeline.schedule._one_f_one_b:
p - 1 - s warm-up forwards on stage s, then one forward and one backward, then the rest of the
backwards; a forward waits for the previous stage's, a backward for the next stage's) for a
first stage, p - 2 equal middle stages and a last stage, without transfer delays (the closed
form charges those apart). After 3p + 1 micro-batches every further one adds the busiest
stage's time (the steady state), so the walk stops there, at most 6p^2 + 2p ops (~10 us on 16
stages): within 0.4% of the engine on random stage times, tests/surrogate_tests/
test_one_f_one_b.py. Where the last stage is the busiest the formula is exact (the same test),
and `one_f_one_b_excess_s` walks only the other rows. The order of the ops (`_order`) depends
on p and m alone; a row is timed as the order is made (`_walk`: 1.3-1.4x faster than building the
order and walking it), and without numba a table's rows of the same p and m together along
that order (`_walk_rows`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.jit import HAVE_NUMBA, njit
from surrogate.compiled_ops import Vec

STEADY_AFTER = 3  # the walk covers min(m, STEADY_AFTER * p + 1) micro-batches


@njit
def _excess_s(first: Vec, middle: Vec, last: Vec, p: Vec, m: Vec, forward_share: Vec,
              walk: Any) -> Vec:
    """`one_f_one_b_excess_s` compiled: one row, or a table's rows one by one."""
    if isinstance(first, float):
        return _excess(first, middle, last, p, m, forward_share) if walk else 0.0
    out = np.zeros(first.shape[0])
    for i in range(first.shape[0]):
        if walk[i]:
            out[i] = _excess(first[i], middle[i], last[i], p[i], m[i], forward_share[i])
    return out


def _excess_table_s(first: Vec, middle: Vec, last: Vec, p: Vec, m: Vec, forward_share: Vec,
                    walk: Any) -> Vec:
    """`one_f_one_b_excess_s` in Python without numba: a table's walked rows grouped by their
    stages and walked micro-batches, each group walked at once over numpy columns (the order of
    a walk depends on those two alone; each row sees the IEEE operations of its own walk)."""
    if isinstance(first, float):
        return _excess(first, middle, last, p, m, forward_share) if walk else 0.0
    stages, micro = (np.asarray(p) + 0.5).astype(np.int64), (np.asarray(m) + 0.5).astype(np.int64)
    busiest = np.where(stages > 2, np.maximum(np.maximum(first, middle), last), np.maximum(first, last))
    walked = np.minimum(micro, STEADY_AFTER * stages + 1)
    todo = np.asarray(walk) & (stages >= 2) & (last < busiest)
    out = np.zeros(len(first))
    for n_stages, n_walked in sorted(set(zip(stages[todo].tolist(), walked[todo].tolist(), strict=True))):
        rows = np.flatnonzero(todo & (stages == n_stages) & (walked == n_walked))
        times = np.repeat(middle[rows, None], n_stages, axis=1)
        times[:, n_stages - 1] = last[rows]
        times[:, 0] = first[rows]
        total = (_walk_rows(times, n_walked, forward_share[rows])
                 + (micro[rows] - n_walked) * times.max(axis=1))
        formula = (first[rows] + (n_stages - 2) * middle[rows] + last[rows]
                   + (micro[rows] - 1) * busiest[rows])
        out[rows] = total - formula
    return out


def _walk_rows(times: np.ndarray, m: int, forward_share: np.ndarray) -> np.ndarray:
    """`_walk` of rows of stage times at once (rows x stages): the same order, each row's own
    IEEE operations."""
    p = times.shape[1]
    ends = np.zeros((2, p, m, times.shape[0]))  # forward, backward
    clock = np.zeros((p, times.shape[0]))
    for s, backward, j in _order(p, m).tolist():
        if backward:
            ready = ends[1, s + 1, j] if s < p - 1 else ends[0, s, j]
        else:
            ready = ends[0, s - 1, j] if s > 0 else 0.0
        share = 1.0 - forward_share if backward else forward_share
        clock[s] = ends[backward, s, j] = np.maximum(clock[s], ready) + times[:, s] * share
    return clock.max(axis=0)


# a table without numba walks its rows in groups; compiled, row by row (`_excess_s`)
one_f_one_b_excess_s: Any = _excess_s if HAVE_NUMBA else _excess_table_s
one_f_one_b_excess_s.__doc__ = """`one_f_one_b_s` less the formula sum_i S_i + (m - 1) max_i S_i
    where `walk` (one row's bool, or per row of arrays); 0 elsewhere and where the last stage is
    the busiest."""


@njit
def _excess(first: float, middle: float, last: float, p: float, m: float, forward_share: float) -> float:
    stages = int(p + 0.5)
    busiest = max(first, middle, last) if stages > 2 else max(first, last)
    if stages < 2 or last >= busiest:
        return 0.0
    micro = int(m + 0.5)
    formula = first + (stages - 2) * middle + last + (micro - 1) * busiest
    return one_f_one_b_s(first, middle, last, stages, micro, forward_share) - formula


@njit
def one_f_one_b_s(first: float, middle: float, last: float, p: int, m: int,
                  forward_share: float) -> float:
    """Seconds of `m` micro-batches through 1F1B on `p` stages: stage 0 takes `first` per
    micro-batch (forward and backward), stages 1..p-2 `middle`, stage p-1 `last`; a forward
    is `forward_share` of a stage's time."""
    times = np.full(p, middle)
    times[p - 1] = last
    times[0] = first  # one stage: the first
    walked = min(m, STEADY_AFTER * p + 1)
    return _walk(times, walked, forward_share) + (m - walked) * times.max()


@njit
def _walk(times: np.ndarray, m: int, forward_share: float) -> float:
    """The engine's 1F1B makespan of `m` micro-batches on stages taking `times` each: each op
    starts when its stage is free and its input has arrived (the previous stage's forward, the
    next stage's backward; the last stage's backward follows its own forward)."""
    return _sweep(times, m, forward_share, False)[0]


@njit
def _order(p: int, m: int) -> np.ndarray:
    """(2 p m, 3) ops as (stage, is a backward, micro-batch) in an order that runs each after
    its input and after its stage's previous op (simulator.timeline.schedule._one_f_one_b on
    every stage): `_sweep`'s order, for the table walk without numba (`_walk_rows`)."""
    return _sweep(np.zeros(p), m, 0.0, True)[1]


@njit
def _sweep(times: np.ndarray, m: int, forward_share: float, record: bool) -> tuple[float, np.ndarray]:
    """(makespan, ops in their order): round k runs each stage's k-th op, the forwards down the
    stages, then the backwards up. That order runs every op after its input: a forward's input
    (the previous stage's forward of its micro-batch) is that stage's op k or earlier, the same
    k coming first in the downward pass; a backward's (the next stage's backward, or the last
    stage's own forward) is op k or earlier there, the same k coming first in the upward pass.
    Either records the order (`record`; makespan 0) or times each op as it is reached. Until
    2026-11-28 the sweep looked for ready ops and marked each done: the same end times to the
    bit (each op's end is max(its stage's clock, its input's end) plus its time, in any order
    that runs inputs first), ~1.35x the time (16 stages, 49 micro-batches: 6.6-7.9 us against
    5.0-5.6)."""
    p = times.shape[0]
    ends = np.zeros((2, p, m))  # forward, backward
    clock = np.zeros(p)
    order = np.empty((2 * p * m if record else 0, 3), dtype=np.int64)
    warm = np.empty(p, dtype=np.int64)
    micro = np.empty(p, dtype=np.int64)  # round k's micro-batch on each stage; -1: a backward's
    for s in range(p):
        warm[s] = min(p - s - 1, m)
    n = 0
    for k in range(2 * m):
        for s in range(p):  # the forwards, down the stages
            backward, j = _op(k, warm[s], m)
            micro[s] = -1 - j if backward else j
            if backward:
                continue
            if record:
                order[n, 0], order[n, 1], order[n, 2] = s, 0, j
            else:
                end = max(clock[s], ends[0, s - 1, j] if s > 0 else 0.0) + times[s] * forward_share
                ends[0, s, j] = end
                clock[s] = end
            n += 1
        for s in range(p - 1, -1, -1):  # the backwards, up
            if micro[s] >= 0:
                continue
            j = -1 - micro[s]
            if record:
                order[n, 0], order[n, 1], order[n, 2] = s, 1, j
            else:
                ready = ends[1, s + 1, j] if s < p - 1 else ends[0, s, j]
                end = max(clock[s], ready) + times[s] * (1.0 - forward_share)
                ends[1, s, j] = end
                clock[s] = end
            n += 1
    return clock.max(), order


@njit(inline=True)
def _op(k: int, warm: int, m: int) -> tuple[bool, int]:
    """(is a backward, micro-batch) of op `k` of a stage with `warm` warm-up forwards."""
    if k < warm:
        return False, k
    i = k - warm  # >= 0: halves and parity as shifts
    if i < 2 * (m - warm):
        return (i & 1) == 1, warm + (i >> 1) if (i & 1) == 0 else i >> 1
    return True, k - m
