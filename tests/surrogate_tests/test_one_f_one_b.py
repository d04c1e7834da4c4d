"""The surrogate's 1F1B makespan (`surrogate.one_f_one_b`) is the simulator's pipeline engine
(simulator.timeline.engine) on a first stage, equal middle stages and a last stage: exactly
while its walk covers every micro-batch, within 0.5% after (the steady state it extrapolates),
and the GPipe-chain formula sum S + (m - 1) max S it corrects is exact where the last stage is
the busiest (the rows it does not walk)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.job.enums import Schedule
from simulator.timeline.engine import round_plan, run_pipeline
from surrogate.one_f_one_b import (
    STEADY_AFTER,
    _excess_s,
    _excess_table_s,
    _order,
    one_f_one_b_excess_s,
    one_f_one_b_s,
)


def _engine(stages: np.ndarray, m: int, forward_share: float) -> float:
    p = len(stages)
    timeline = run_pipeline(round_plan(Schedule.ONE_F_ONE_B, p, m, 1),
                            (stages * forward_share)[:, None], (stages * (1 - forward_share))[:, None],
                            np.zeros(p))
    return float(timeline.end.max())


def _stages(p: int, first: float, middle: float, last: float) -> np.ndarray:
    return np.array([first] + [middle] * (p - 2) + [last]) if p > 1 else np.array([first])


def _cases(n: int, seed: int) -> list[tuple[int, float, float, float, int, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p = int(rng.choice([1, 2, 3, 4, 8, 16]))
        first, middle, last = (float(x) for x in rng.uniform(0.2, 3.0, 3))
        if p == 2:
            middle = 0.0
        m = int(rng.choice([1, 2, 4, p, p + 1, STEADY_AFTER * p + 1, STEADY_AFTER * p + 9, 100]))
        out.append((p, first, middle, last, m, float(rng.choice([1 / 3, 0.25, 0.3]))))
    return out


@pytest.mark.parametrize(("p", "first", "middle", "last", "m", "share"), _cases(40, 0))
def test_the_walk_is_the_engines_1f1b(p: int, first: float, middle: float, last: float, m: int,
                                      share: float) -> None:
    engine = _engine(_stages(p, first, middle, last), m, share)
    walked = one_f_one_b_s(first, middle, last, p, m, share)
    exact = m <= STEADY_AFTER * p + 1
    assert walked == pytest.approx(engine, rel=1e-12 if exact else 5e-3)


def test_the_formula_is_exact_where_the_last_stage_is_the_busiest_and_off_elsewhere() -> None:
    errors = {True: 0.0, False: 0.0}
    for p, first, middle, last, m, share in _cases(400, 1):
        stages = _stages(p, first, middle, last)
        formula = stages.sum() + (m - 1) * stages.max()
        last_busiest = bool(stages[-1] >= stages.max())
        errors[last_busiest] = max(errors[last_busiest], abs(formula / _engine(stages, m, share) - 1))
    assert errors[True] < 1e-12
    assert errors[False] > 0.1  # what the walk is for: a busy first stage hides the fill


def test_a_busy_first_stage_hides_the_others_fill() -> None:
    """19 layers on the first of 16 stages, 5 on the others, 16 micro-batches: the first
    stage never idles, so the pipeline takes 16 of its micro-batches and nothing more."""
    walked = one_f_one_b_s(57.0, 15.0, 15.0, 16, 16, 1 / 3)
    assert walked == pytest.approx(16 * 57.0)
    formula = 57.0 + 14 * 15.0 + 15.0 + 15 * 57.0
    excess = one_f_one_b_excess_s(57.0, 15.0, 15.0, 16.0, 16.0, 1 / 3, True)
    assert excess == pytest.approx(walked - formula)
    assert one_f_one_b_excess_s(57.0, 15.0, 15.0, 16.0, 16.0, 1 / 3, False) == 0.0


def test_rows_of_a_table_are_walked_as_one_row_each() -> None:
    rows = [(57.0, 15.0, 15.0, 16.0, 16.0, 1 / 3, True), (5.0, 9.0, 7.0, 8.0, 12.0, 0.25, True),
            (5.0, 5.0, 9.0, 4.0, 8.0, 1 / 3, True), (57.0, 15.0, 15.0, 16.0, 16.0, 1 / 3, False)]
    columns = [np.array(c) for c in zip(*rows, strict=True)]
    table = one_f_one_b_excess_s(*columns)
    assert table.tolist() == [one_f_one_b_excess_s(*row) for row in rows]
    assert table[2] == 0.0 and table[3] == 0.0  # the last stage the busiest; not walked


def test_a_table_without_numba_walks_each_row_as_the_compiled_row_walk() -> None:
    """The numpy path (no numba) walks a table's rows of equal stages and micro-batches together;
    each row gets the compiled row walk's number to the bit (tests run with numba, so this is
    where that path is checked)."""
    cases = _cases(60, 2)
    columns = [np.array(c, dtype=float) for c in zip(*cases, strict=True)]
    p, first, middle, last, m, share = columns
    walk = np.arange(len(cases)) % 5 != 0
    table = _excess_table_s(first, middle, last, p, m, share, walk)
    rows = [_excess_s(float(first[i]), float(middle[i]), float(last[i]), float(p[i]), float(m[i]),
                      float(share[i]), bool(walk[i])) for i in range(len(cases))]
    assert table.tolist() == rows
    assert any(r != 0.0 for r in rows)


@pytest.mark.parametrize(("p", "m"), [(1, 1), (2, 1), (2, 5), (4, 3), (4, 13), (8, 8), (16, 49)])
def test_the_walk_order_runs_every_op_after_its_input_and_its_stages_previous_op(p: int, m: int) -> None:
    """The rounds order (each stage's k-th op, forwards down, backwards up) is a topological order
    of 1F1B's dependencies: every op of every stage exactly once, each stage's ops in its own
    order, a forward after the previous stage's forward of its micro-batch, a backward after the
    next stage's backward (the last stage: its own forward)."""
    order = [tuple(op) for op in _order(p, m).tolist()]
    assert sorted(order) == sorted((s, b, j) for s in range(p) for b in (0, 1) for j in range(m))
    seen: set[tuple[int, int, int]] = set()
    for s, backward, j in order:
        if backward:
            assert ((s + 1, 1, j) if s < p - 1 else (s, 0, j)) in seen
        elif s > 0:
            assert (s - 1, 0, j) in seen
        seen.add((s, backward, j))
    for s in range(p):
        warm = min(p - s - 1, m)
        stage = [(b, j) for t, b, j in order if t == s]
        expected = [(0, j) for j in range(warm)]
        for j in range(m - warm):
            expected += [(0, warm + j), (1, j)]
        expected += [(1, j) for j in range(m - warm, m)]
        assert stage == expected
