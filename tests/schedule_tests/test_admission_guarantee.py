"""The elastic policy's promise (issue 26 item 5, issue 27 item 2): with an exact oracle, a job
it admits meets its deadline, restarts included, on random traces (Hypothesis), not only the
shipped one.

A trace is a few jobs on a small cluster with hand-built throughput curves (random levels and
speed-ups; the oracle's prediction equals the time the job runs at), random arrivals, work and
deadlines from just feasible to loose, and a restart cost from none to longer than many jobs.
The cluster simulation is the real one (SimPy engine, the policy's decisions applied, restarts
charged on every re-allocation of a job that has run).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.job.catalog import read_yaml, resolve_hardware
from simulator.job.enums import Recompute
from simulator.job.specs import ModelSpec
from tests.schedule_tests.conftest import TINY, levels, view
from vtrain_ml.scheduler.curve import LevelPlan, ScalingCurve
from vtrain_ml.scheduler.layouts import Cluster, Layout, Shape
from vtrain_ml.scheduler.policies import ElasticPolicy
from vtrain_ml.scheduler.result import Outcome
from vtrain_ml.scheduler.run import simulate_schedule
from vtrain_ml.scheduler.workload import Workload

SHAPE = Shape(ModelSpec(**read_yaml(Path(TINY))), 32)


def _curve(seconds_at_one: float, speedups: list[float]) -> ScalingCurve:
    """Levels 1, 2, 4, ... GPUs, each `speedup` times faster than the one before (exact oracle)."""
    plans, seconds = [], seconds_at_one
    for i, speedup in enumerate([1.0, *speedups]):
        seconds /= speedup
        plans.append(LevelPlan(2**i, Layout(1, 1, 2**i, 1, Recompute.NONE), seconds, seconds, 0.0))
    return ScalingCurve("random", tuple(plans))


job = st.tuples(
    st.floats(0.0, 2000.0),  # arrival, s
    st.integers(10, 400),  # iterations
    st.floats(0.5, 8.0),  # seconds per iteration on one GPU
    st.lists(st.floats(1.05, 2.0), min_size=0, max_size=4),  # speed-up per doubling
    st.floats(1.0, 4.0),  # deadline as a multiple of the fastest possible duration
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(job, min_size=1, max_size=10), st.sampled_from([1, 2, 4, 8, 16]),
       st.sampled_from([0.0, 10.0, 60.0, 300.0]), st.sampled_from([0.0, 60.0]))
def test_no_admitted_job_misses_its_deadline_with_an_exact_oracle(jobs, gpus, restart_s, slot_s) -> None:
    workloads, curves = [], []
    for i, (arrival, iterations, seconds, speedups, factor) in enumerate(jobs):
        curve = _curve(seconds, speedups).up_to(gpus)
        fastest = min(lv.iteration_time_s for lv in curve.levels)
        workloads.append(Workload(i, f"job{i}", arrival, arrival + factor * iterations * fastest, iterations,
                                  SHAPE))
        curves.append(curve)
    cluster = Cluster(resolve_hardware("a100-80gb"), gpus, 8)
    result = simulate_schedule(workloads, curves, "elastic", cluster, restart_s, slot_s=slot_s)
    late = [(j.name, j.deadline_s, j.finish_s, j.restarts) for j in result.jobs
            if j.outcome is Outcome.MISSED]
    assert not late, f"admitted jobs missed their deadline: {late}"


LINEAR = levels([1, 2, 4, 8], [8.0, 4.0, 2.0, 1.0])


def test_admission_charges_the_restart_a_job_will_pay_to_move() -> None:
    """A running job with 90 iterations left on all 8 GPUs (90 s) due in 140 s, and a newcomer
    that needs the 8 GPUs for 40 s within 50 s: admitting it stops the running job for 40 s and
    then restarts it. With free restarts that fits (40 + 90 <= 140); with a 30 s restart it
    does not (40 + 30 + 90 > 140), and the newcomer is turned away."""
    running = view(0, LINEAR, 90, deadline_s=140.0, current=8, started=True)
    newcomer = view(1, LINEAR, 40, deadline_s=50.0)
    assert ElasticPolicy(restart_s=30.0).decide(0.0, [running], [newcomer], capacity=8).rejected == (1,)
    free = ElasticPolicy(restart_s=0.0).decide(0.0, [running], [newcomer], capacity=8)
    assert free.rejected == ()


def test_the_restart_cost_decides_a_whole_schedule_too() -> None:
    """The same through the cluster simulation: job a runs alone from 0 s; b arrives at 10 s
    needing all 8 GPUs for 40 s. With a 30 s restart b is turned away and a meets its
    deadline; with free restarts both run and both meet theirs."""
    cluster = Cluster(resolve_hardware("a100-80gb"), 8, 8)
    linear = _curve(8.0, [2.0, 2.0, 2.0])
    jobs = [Workload(0, "a", 0.0, 150.0, 100, SHAPE), Workload(1, "b", 10.0, 60.0, 40, SHAPE)]
    costly = simulate_schedule(jobs, [linear, linear], "elastic", cluster, restart_s=30.0)
    assert [j.outcome for j in costly.jobs] == [Outcome.MET, Outcome.REJECTED]
    free = simulate_schedule(jobs, [linear, linear], "elastic", cluster, restart_s=0.0)
    assert [j.outcome for j in free.jobs] == [Outcome.MET, Outcome.MET]
    assert free.jobs[0].restarts == 1  # a was stopped for b and resumed


@pytest.mark.parametrize("restart_s", [0.0, 300.0])
def test_the_shipped_small_trace_keeps_every_promise(restart_s, curve_cache) -> None:
    from tests.schedule_tests.conftest import SMALL_GPU
    from vtrain_ml.scheduler.run import Scheduler, make_cluster, make_oracle
    from vtrain_ml.scheduler.trace import load_trace

    trace = load_trace(Path(__file__).resolve().parents[2] / "examples" / "cluster_trace_small.yaml")
    cluster = make_cluster(trace.cluster.gpus or 64, trace.cluster.gpu or SMALL_GPU)
    oracle = make_oracle("simulator", cluster, curve_cache)
    result = Scheduler(trace, cluster, oracle, restart_s).run("elastic", oracle)
    assert not [j.name for j in result.jobs if j.outcome is Outcome.MISSED]


def test_an_admitted_job_that_misses_is_reported_with_the_oracle_error_that_made_it() -> None:
    """With an inexact oracle the promise rests on wrong times: the miss is reported, and why."""
    from vtrain_ml.scheduler.report import render_summary

    plan = LevelPlan(8, Layout(1, 1, 8, 1, Recompute.NONE), 2.0, 1.0, 0.0)  # runs at 2 s, predicted 1 s
    cluster = Cluster(resolve_hardware("a100-80gb"), 8, 8)
    job = Workload(0, "a", 0.0, 150.0, 100, SHAPE)
    result = simulate_schedule([job], [ScalingCurve("optimistic", (plan,))], "elastic", cluster, 0.0)
    (a,) = result.jobs
    assert a.outcome is Outcome.MISSED
    assert a.why_missed == ("the oracle predicted 1 s per iteration on 8 GPUs (tp1 pp1 dp8 mb1 none), it "
                            "ran at 2 s (+100.0%)")
    assert f"missed: a by 0.01 h: {a.why_missed}" in render_summary(result)
