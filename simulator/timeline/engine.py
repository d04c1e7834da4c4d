"""The dependency-driven timeline of one iteration's pipeline phase.

Each stage runs its ops in schedule order on one compute stream (tensor-parallel collectives
block it and are part of each op's duration); an op starts when its stage is free and its input
from the neighbouring stage has arrived (producer end + p2p transfer):
``end[i] = max(end[pred[i]], end[dep[i]] + delay[i]) + duration[i]``.

Speed: the ops are grouped into *rounds* -- round r holds the ops whose longest chain of
predecessors has r ops -- so that every op's inputs lie in earlier rounds. The rounds depend only
on (schedule, p, m, v) and are cached with every index the timing needs; timing a job is then
one vectorized numpy step per round (about 2(m + p) rounds, independent of layers and kernels),
or, when rounds hold few ops (small pipelines), one pass of plain Python floats over the ops in
round order, which costs less than a numpy call per round. Both compute the same operations in
the same order, so they give bit-identical times; everything else (start, idle, exposed p2p) is
derived from the end times in a few whole-array steps. With numba, a process that runs many
pipelines switches to one compiled pass over the ops in round order that computes all of it
(simulator.timeline.engine_kernel; the same operations again, so the same bits): the numpy rounds cost
~6 numpy calls per round, the compiled pass a few nanoseconds per op.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from simulator.job.enums import Schedule
from simulator.timeline.engine_kernel import RUNS, Arrays, levels_loop
from simulator.timeline.schedule import OpIndex, dependencies, stage_orders

# Plain Python beats a numpy step per round when rounds hold fewer ops than this (measured on
# this project's CPU: ~0.15 us per op in Python vs ~3 us per numpy round).
SCALAR_OPS_PER_ROUND = 12


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
    pred: np.ndarray  # the previous op on the same stage, or n (the stage is free at t=0)
    last: np.ndarray  # (p,) each stage's last op
    task: np.ndarray  # index of each op's duration in concat(forward_s.ravel(), backward_s.ravel())
    edge_or_none: np.ndarray  # `edge`, with p (a zero-delay slot) where the input crosses none

    @cached_property
    def rounds(self) -> tuple[tuple[slice, np.ndarray, np.ndarray], ...]:
        """Per round: its ops, their dep, their pred (built when the numpy rounds first run:
        the compiled loop does not need them)."""
        return tuple((slice(a, b), self.dep[a:b], self.pred[a:b])
                     for a, b in itertools.pairwise(self.offsets.tolist()))

    @property
    def scalar(self) -> bool:
        """Time op by op in Python (few ops per round) rather than round by round in numpy."""
        return self.stage.size < SCALAR_OPS_PER_ROUND * (self.offsets.size - 1)


@lru_cache(maxsize=256)
def round_plan(schedule: Schedule, p: int, m: int, v: int, all_warmup: bool = False,
               group: int | None = None) -> RoundPlan:
    """The cached round plan of a pipeline shape."""
    return build_round_plan(schedule, p, m, v, all_warmup=all_warmup, group=group)


def build_round_plan(schedule: Schedule, p: int, m: int, v: int, closed_form: bool = True,
                     all_warmup: bool = False, group: int | None = None) -> RoundPlan:
    """Rounds from the closed form (1F1B, GPipe) or, otherwise or when asked, from the generic
    construction that walks the stage orders (`all_warmup`, `group`: see
    `schedule.stage_orders`)."""
    idx = OpIndex(p, v, m)
    n = idx.count
    backward, chunk, stage, mb = idx.decode()
    dep, edge = dependencies(p, m, v, (backward, chunk, stage, mb))
    dep_s = np.where(dep < 0, n, dep)
    if closed_form and schedule in CLOSED_FORM and v == 1:
        level = CLOSED_FORM[schedule](idx, backward, stage, mb)
        slots = _slots(level, stage, p)
        by_stage = slots.T  # each stage's ops in round order: its schedule order
        orders = by_stage[by_stage >= 0].reshape(p, -1)
    else:
        orders = stage_orders(schedule, p, m, v, all_warmup, group)
        level = _levels_by_rounds(orders, dep_s, n)
        slots = _slots(level, stage, p)
    original = slots[slots >= 0]
    assert original.size == n, "two ops of one stage in one round"
    new_id = np.empty(n + 1, dtype=np.int64)
    new_id[original] = np.arange(n)
    new_id[n] = n
    in_order = new_id[orders]  # (p, ops per stage) new ids in stage order
    pred = np.empty(n, dtype=np.int64)
    pred[in_order[:, 1:]] = in_order[:, :-1]
    pred[in_order[:, 0]] = n
    offsets = np.concatenate(([0], np.cumsum(np.bincount(level, minlength=int(level.max()) + 1))))
    st, ch, bw, e = stage[original], chunk[original], backward[original], edge[original]
    dep_new = new_id[dep_s[original]]
    return RoundPlan(offsets, st, ch, bw, mb[original], dep_new, e, orders, original, pred,
                     in_order[:, -1].copy(), (bw * p + st) * v + ch, np.where(e >= 0, e, p))


def _slots(level: np.ndarray, stage: np.ndarray, p: int) -> np.ndarray:
    """(rounds, p) the op of each (round, stage) slot, -1 where the stage runs none. A stage runs
    at most one op per round, so the slots are unique: a scatter replaces a sort by (round,
    stage), and read column by column they give each stage's ops in round order."""
    slots = np.full((int(level.max()) + 1, p), -1, dtype=np.int64)
    slots[level, stage] = np.arange(level.size)
    return slots


def _gpipe_levels(idx: OpIndex, backward: np.ndarray, s: np.ndarray, j: np.ndarray) -> np.ndarray:
    """A valid round for every op of GPipe: forward (s, j) at s + j; backward (s, j) after the
    last stage's last forward, one round per stage back and per micro-batch."""
    p, m = idx.p, idx.m
    return np.where(backward == 0, s + j, (p + m - 1) + (p - 1 - s) + j)


def _one_f_one_b_levels(idx: OpIndex, backward: np.ndarray, s: np.ndarray, j: np.ndarray
                        ) -> np.ndarray:
    """A valid round for every op of 1F1B (unit-time ASAP rounds): with w = p - s - 1 warm-up
    forwards, forward (s, j) runs at s + j while j <= w and at s + 2j after; backward (s, j) at
    s + 2w + 1 + 2j. Every op's inputs and its predecessor on the stage lie in earlier rounds
    (checked against the generic construction in the tests)."""
    w = idx.p - s - 1
    forward = np.where(j <= w, s + j, s + 2 * j)
    return np.where(backward == 0, forward, s + 2 * w + 1 + 2 * j)


CLOSED_FORM = {Schedule.GPIPE: _gpipe_levels, Schedule.ONE_F_ONE_B: _one_f_one_b_levels}


def _levels_by_rounds(orders: np.ndarray, dep: np.ndarray, n: int) -> np.ndarray:
    """Generic rounds: each round, every stage runs its next op if that op's input is done
    (`engine_kernel.levels_loop`: one step per op, on Python ints or compiled)."""
    p, length = orders.shape
    compiled = RUNS.levels(n)
    if compiled is None:
        level = [-2] * (n + 1)
        level[n] = -1
        placed = levels_loop(orders.tolist(), dep.tolist(), level, [0] * p, [-1] * p, p, length)
        out = np.array(level[:n], dtype=np.int64)
    else:
        buffer = np.full(n + 1, -2, dtype=np.int64)
        buffer[n] = -1
        placed = compiled(np.ascontiguousarray(orders, dtype=np.int64),
                          np.ascontiguousarray(dep, dtype=np.int64), buffer,
                          np.zeros(p, dtype=np.int64), np.full(p, -1, dtype=np.int64), p, length)
        out = buffer[:n].copy()
    assert placed == p * length, "pipeline schedule deadlocked"
    return out


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
    edge_delay_s: (p,) p2p transfer time per boundary (index p-1 = last -> first stage).
    The compiled loop (simulator.timeline.engine_kernel) once the process has run a few pipelines and
    numba is available, numpy otherwise: bit-identical times either way."""
    return run_durations(plan, np.concatenate((forward_s.ravel(), backward_s.ravel())),
                         edge_delay_s)


def run_durations(plan: RoundPlan, durations: np.ndarray, edge_delay_s: np.ndarray) -> Timeline:
    """Time the plan with op i taking durations[plan.task[i]] (`run_pipeline`'s forward and
    backward grids raveled, or more grids where a caller gives some ops their own durations)."""
    delays = np.append(edge_delay_s, 0.0)
    loop = RUNS.loop(plan.stage.size)
    if loop is not None:
        return run_loop(plan, loop, durations, delays)
    return run_numpy(plan, durations, delays)


def run_loop(plan: RoundPlan, loop: Callable[..., Arrays], durations: np.ndarray,
             delays: np.ndarray) -> Timeline:
    """Time the plan with `engine_kernel.timeline_loop` (compiled or not). durations: forward
    then backward (p, v) grids raveled; delays: the (p,) boundary delays and a trailing 0."""
    end, start, idle, exposed, dur = loop(plan.dep, plan.pred, plan.task, plan.edge_or_none,
                                          durations, delays)
    return Timeline(plan, start, end[:-1], dur, end[plan.last], idle, exposed)


def run_numpy(plan: RoundPlan, durations: np.ndarray, delays: np.ndarray) -> Timeline:
    """Time the plan without compiled code: Python floats op by op for small pipelines, one
    numpy step per round otherwise (see the module docstring)."""
    n = plan.stage.size
    dur = durations[plan.task]
    delay = delays[plan.edge_or_none]
    end = _ends_scalar(plan, dur, delay) if plan.scalar else _ends_by_round(plan, dur, delay)
    ready = end[plan.dep]
    before = end[plan.pred]
    arrival = ready + delay
    start = np.maximum(before, arrival)
    exposed = np.clip(np.minimum(start, arrival) - np.maximum(before, ready), 0.0, None)
    exposed = np.where(delay > 0, exposed, 0.0)
    return Timeline(plan, start, end[:n], dur, end[plan.last], start - before, exposed)


def _ends_by_round(plan: RoundPlan, dur: np.ndarray, delay: np.ndarray) -> np.ndarray:
    """End of every op (and end[n] = 0, the sentinel), one numpy step per round."""
    end = np.zeros(plan.stage.size + 1)
    for ops, dep, pred in plan.rounds:
        e = end[dep]
        e += delay[ops]
        np.maximum(e, end[pred], out=e)
        e += dur[ops]
        end[ops] = e
    return end


def _ends_scalar(plan: RoundPlan, dur: np.ndarray, delay: np.ndarray) -> np.ndarray:
    """The same recurrence op by op on Python floats (round order is a topological order)."""
    end = [0.0] * (plan.stage.size + 1)
    for i, (d, q, dl, du) in enumerate(zip(plan.dep.tolist(), plan.pred.tolist(), delay.tolist(),
                                           dur.tolist(), strict=True)):
        a, b = end[d] + dl, end[q]
        end[i] = (a if a > b else b) + du
    return np.array(end)
