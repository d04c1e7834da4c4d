"""The dependency-driven timeline of one iteration's pipeline phase.

Each stage runs its ops in schedule order on one compute stream (tensor-parallel collectives
block it and are part of each op's duration); an op starts when its stage is free and its input
from the neighbouring stage has arrived (producer end + p2p transfer).

Speed: the ops are grouped into *rounds* -- round r holds the ops whose longest chain of
predecessors has r ops -- so that every op's inputs lie in earlier rounds. The rounds depend only
on (schedule, p, m, v) and are cached; timing a job is then one vectorized numpy step per round
(about 2(m + p) rounds), independent of layers and kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from simulator.enums import Schedule
from simulator.schedule import OpIndex, dependencies, stage_orders


@dataclass(frozen=True)
class RoundPlan:
    """Ops renumbered in round order; `dep` and arrays below use the new numbering."""

    offsets: np.ndarray  # round r holds ops [offsets[r], offsets[r+1])
    stage: np.ndarray
    chunk: np.ndarray
    backward: np.ndarray
    microbatch: np.ndarray
    dep: np.ndarray  # producer op on another stage, or n (a sentinel that ended at t=0)
    edge: np.ndarray  # pipeline boundary crossed by the input, or -1
    orders: np.ndarray  # (p, ops per stage) original op ids in stage order (for memory)
    original: np.ndarray  # original id of each renumbered op


@lru_cache(maxsize=256)
def round_plan(schedule: Schedule, p: int, m: int, v: int, all_warmup: bool = False) -> RoundPlan:
    """The cached round plan of a pipeline shape."""
    return build_round_plan(schedule, p, m, v, all_warmup=all_warmup)


def build_round_plan(schedule: Schedule, p: int, m: int, v: int, closed_form: bool = True,
                     all_warmup: bool = False) -> RoundPlan:
    """Rounds from the closed form (1F1B, GPipe) or, otherwise or when asked, from the generic
    construction that walks the stage orders (`all_warmup`: see `schedule.stage_orders`)."""
    idx = OpIndex(p, v, m)
    n = idx.count
    dep, edge = dependencies(p, m, v)
    dep_s = np.where(dep < 0, n, dep)
    if closed_form and schedule in CLOSED_FORM and v == 1:
        level = CLOSED_FORM[schedule](idx)
        per_stage = _stage_ops(idx)
        orders = np.take_along_axis(per_stage, np.argsort(level[per_stage], axis=1), axis=1)
    else:
        orders = stage_orders(schedule, p, m, v, all_warmup)
        level = _levels_by_rounds(orders, dep_s, n)
    backward, chunk, stage, mb = idx.decode()
    original = np.lexsort((stage, level))
    new_id = np.empty(n + 1, dtype=np.int64)
    new_id[original] = np.arange(n)
    new_id[n] = n
    offsets = np.concatenate(([0], np.cumsum(np.bincount(level, minlength=int(level.max()) + 1))))
    return RoundPlan(offsets, stage[original], chunk[original], backward[original], mb[original],
                     new_id[dep_s[original]], edge[original], orders, original)


def _stage_ops(idx: OpIndex) -> np.ndarray:
    """(p, 2m) op ids of each stage (forwards then backwards, v = 1)."""
    stage = np.arange(idx.p)[:, None]
    mb = np.arange(idx.m)[None, :]
    return np.concatenate([stage * idx.m + mb, (idx.p + stage) * idx.m + mb], axis=1)


def _gpipe_levels(idx: OpIndex) -> np.ndarray:
    """A valid round for every op of GPipe: forward (s, j) at s + j; backward (s, j) after the
    last stage's last forward, one round per stage back and per micro-batch."""
    backward, _, s, j = idx.decode()
    p, m = idx.p, idx.m
    return np.where(backward == 0, s + j, (p + m - 1) + (p - 1 - s) + j)


def _one_f_one_b_levels(idx: OpIndex) -> np.ndarray:
    """A valid round for every op of 1F1B (unit-time ASAP rounds): with w = p - s - 1 warm-up
    forwards, forward (s, j) runs at s + j while j <= w and at s + 2j after; backward (s, j) at
    s + 2w + 1 + 2j. Every op's inputs and its predecessor on the stage lie in earlier rounds
    (checked against the generic construction in the tests)."""
    backward, _, s, j = idx.decode()
    w = idx.p - s - 1
    forward = np.where(j <= w, s + j, s + 2 * j)
    return np.where(backward == 0, forward, s + 2 * w + 1 + 2 * j)


CLOSED_FORM = {Schedule.GPIPE: _gpipe_levels, Schedule.ONE_F_ONE_B: _one_f_one_b_levels}


def _levels_by_rounds(orders: np.ndarray, dep: np.ndarray, n: int) -> np.ndarray:
    """Generic rounds: each round, every stage runs its next op if that op's input is done."""
    p, length = orders.shape
    done = np.zeros(n + 1, dtype=bool)
    done[n] = True
    level = np.empty(n, dtype=np.int64)
    ptr = np.zeros(p, dtype=np.int64)
    stages = np.arange(p)
    r = 0
    while True:
        active = stages[ptr < length]
        if active.size == 0:
            return level
        ops = orders[active, ptr[active]]
        ready = done[dep[ops]]
        assert ready.any(), "pipeline schedule deadlocked"
        ops = ops[ready]
        done[ops] = True
        level[ops] = r
        ptr[active[ready]] += 1
        r += 1


@dataclass(frozen=True)
class Timeline:
    """Start/end (s) of every op in round order, plus what delayed it."""

    plan: RoundPlan
    start: np.ndarray
    end: np.ndarray
    duration: np.ndarray
    stage_end: np.ndarray  # (p,) when each stage finishes its last pipeline op
    idle: np.ndarray  # per op: wait before it on its stage
    p2p_exposed: np.ndarray  # per op: part of that wait spent on the input transfer


def run_pipeline(plan: RoundPlan, forward_s: np.ndarray, backward_s: np.ndarray,
                 edge_delay_s: np.ndarray) -> Timeline:
    """Time the plan. forward_s/backward_s: (p, v) durations per stage and chunk;
    edge_delay_s: (p,) p2p transfer time per boundary (index p-1 = last -> first stage)."""
    n = plan.stage.size
    p = forward_s.shape[0]
    dur = np.where(plan.backward == 1, backward_s[plan.stage, plan.chunk],
                   forward_s[plan.stage, plan.chunk])
    delay = np.where(plan.edge >= 0, edge_delay_s[np.maximum(plan.edge, 0)], 0.0)
    start = np.empty(n)
    end = np.zeros(n + 1)
    prev = np.empty(n)
    free = np.zeros(p)
    dep, stage, off = plan.dep, plan.stage, plan.offsets
    for r in range(off.size - 1):
        a, b = off[r], off[r + 1]
        st = stage[a:b]
        before = free[st]
        s0 = np.maximum(before, end[dep[a:b]] + delay[a:b])
        prev[a:b] = before
        start[a:b] = s0
        e = s0 + dur[a:b]
        end[a:b] = e
        free[st] = e
    ready = end[dep]
    arrival = ready + delay
    exposed = np.clip(np.minimum(start, arrival) - np.maximum(prev, ready), 0.0, None)
    exposed = np.where(delay > 0, exposed, 0.0)
    return Timeline(plan, start, end[:n], dur, free, start - prev, exposed)
