"""The SimPy cluster simulation on hand-built curves: exact times, restarts, predicted vs actual."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.job.catalog import read_yaml, resolve_hardware
from simulator.job.enums import Recompute
from simulator.job.specs import ModelSpec
from tests.schedule_tests.conftest import TINY
from vtrain_ml.scheduler.curve import LevelPlan, ScalingCurve
from vtrain_ml.scheduler.layouts import Cluster, Layout, Shape
from vtrain_ml.scheduler.result import Outcome
from vtrain_ml.scheduler.run import simulate_schedule
from vtrain_ml.scheduler.workload import Workload

CLUSTER = Cluster(resolve_hardware("a100-80gb"), 8, 8)
SHAPE = Shape(ModelSpec(**read_yaml(Path(TINY))), 32)


def curve(actual: dict[int, float], predicted: dict[int, float] | None = None) -> ScalingCurve:
    predicted = predicted or actual
    return ScalingCurve("hand-built", tuple(LevelPlan(n, Layout(1, 1, n, 1, Recompute.NONE), actual[n],
                                                      predicted[n], 0.0) for n in sorted(actual)))


LINEAR = curve({1: 8.0, 2: 4.0, 4: 2.0, 8: 1.0})


def work(name: str, arrival: float, iterations: int, deadline: float, row: int = 0) -> Workload:
    return Workload(row, name, arrival, deadline, iterations, SHAPE)


def test_a_lone_job_runs_on_its_fastest_level_and_finishes_exactly_on_time() -> None:
    r = simulate_schedule([work("a", 0.0, 100, 1000.0)], [LINEAR], "elastic", CLUSTER, restart_s=30.0)
    (a,) = r.jobs
    assert a.outcome is Outcome.MET and a.finish_s == pytest.approx(100.0) and a.restarts == 0
    assert [(x.time_s, x.gpus) for x in a.history] == [(0.0, 8), (pytest.approx(100.0), 0)]
    assert r.gpu_utilization == pytest.approx(1.0) and r.makespan_s == pytest.approx(100.0)


def test_an_urgent_job_preempts_and_the_preempted_job_pays_the_restart() -> None:
    # b needs all 8 GPUs for 100 of its 110 s: a (50 iterations done at 50 s) waits, then
    # restarts at 150 s and needs 30 s of restart plus 50 s of work
    jobs = [work("a", 0.0, 100, 1000.0, 0), work("b", 50.0, 100, 160.0, 1)]
    r = simulate_schedule(jobs, [LINEAR, LINEAR], "elastic", CLUSTER, restart_s=30.0)
    a, b = r.jobs
    assert b.outcome is Outcome.MET and b.finish_s == pytest.approx(150.0)
    assert a.outcome is Outcome.MET and a.finish_s == pytest.approx(230.0) and a.restarts == 1
    assert r.deadline_satisfaction_ratio == 1.0 and r.average_jct_s == pytest.approx((230.0 + 100.0) / 2)


def test_jobs_progress_at_the_exact_time_whatever_the_oracle_predicted() -> None:
    # the oracle believes 1 s per iteration on 8 GPUs, the plan really takes 2 s
    optimistic = curve({8: 2.0}, {8: 1.0})
    r = simulate_schedule([work("a", 0.0, 100, 150.0)], [optimistic], "elastic", CLUSTER, restart_s=0.0)
    (a,) = r.jobs
    assert a.outcome is Outcome.MISSED and a.finish_s == pytest.approx(200.0)  # admitted: 100 s <= 150 s


def test_fifo_runs_every_job_at_its_request_and_reports_late_ones_as_missed() -> None:
    jobs = [work("a", 0.0, 100, 1000.0, 0), work("b", 10.0, 100, 120.0, 1)]
    r = simulate_schedule(jobs, [LINEAR, LINEAR], "fifo", CLUSTER, restart_s=0.0)
    a, b = r.jobs
    # a's request: the fewest GPUs that finish in its 1000 s window alone (1 GPU: 800 s);
    # b needs 8 GPUs to finish within 110 s but only 7 are free until a completes at 800 s
    assert [x.gpus for x in a.history] == [1, 0] and a.finish_s == pytest.approx(800.0)
    assert b.outcome is Outcome.MISSED and b.finish_s == pytest.approx(900.0)


def test_a_job_without_any_plan_is_rejected_not_crashed_on() -> None:
    empty = ScalingCurve("nothing fits", ())
    for policy in ("elastic", "edf", "fifo"):
        r = simulate_schedule([work("a", 0.0, 10, 100.0)], [empty], policy, CLUSTER, restart_s=0.0)
        assert r.jobs[0].outcome is Outcome.REJECTED and r.jobs[0].history == ()
