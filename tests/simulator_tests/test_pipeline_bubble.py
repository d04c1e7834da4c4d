"""The pipeline bubble matches the closed forms of Narayanan et al. 2021 (Sec. 2.2).

With free communication, GPipe and 1F1B idle each stage for (p-1) forward+backward slots, a
fraction (p-1)/(m+p-1) of the iteration; interleaving v model chunks per stage shrinks the bubble
time by v.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator import job_from_dict, simulate
from simulator.job.enums import Schedule
from simulator.timeline.engine import round_plan, run_pipeline
from tests.simulator_tests.conftest import pipeline_only, without_framework_overheads

LAYOUTS = [(2, 4), (4, 8), (4, 16), (8, 8), (3, 6), (8, 32)]  # (p, m)


def _engine_iteration(schedule: Schedule, p: int, m: int, v: int, forward: float,
                      backward: float) -> float:
    """Iteration of uniform stages: each chunk runs 1/v of a stage's forward/backward."""
    plan = round_plan(schedule, p, m, v)
    timeline = run_pipeline(plan, np.full((p, v), forward / v), np.full((p, v), backward / v),
                            np.zeros(p))
    return float(timeline.stage_end.max())


@pytest.mark.parametrize("schedule", [Schedule.GPIPE, Schedule.ONE_F_ONE_B])
@pytest.mark.parametrize(("p", "m"), LAYOUTS)
@pytest.mark.parametrize(("forward", "backward"), [(1.0, 2.0), (1.0, 1.0), (0.3, 1.1)])
def test_engine_bubble_fraction_matches_formula(schedule, p, m, forward, backward):
    iteration = _engine_iteration(schedule, p, m, 1, forward, backward)
    bubble = iteration - m * (forward + backward)
    assert bubble / iteration == pytest.approx((p - 1) / (m + p - 1), rel=0.01)


@pytest.mark.parametrize("v", [2, 4])
@pytest.mark.parametrize(("p", "m"), [(p, m) for p, m in LAYOUTS if m % p == 0])
@pytest.mark.parametrize(("forward", "backward"), [(1.0, 2.0), (0.3, 1.1)])
def test_engine_interleaving_shrinks_bubble_by_v(v, p, m, forward, backward):
    work = m * (forward + backward)
    plain = _engine_iteration(Schedule.ONE_F_ONE_B, p, m, 1, forward, backward) - work
    interleaved = _engine_iteration(Schedule.INTERLEAVED_1F1B, p, m, v, forward, backward) - work
    assert plain / interleaved == pytest.approx(v, rel=0.03)


@pytest.mark.parametrize("schedule", [Schedule.GPIPE, Schedule.ONE_F_ONE_B])
@pytest.mark.parametrize("p", [1, 2, 4])
def test_engine_every_stage_does_all_its_work(schedule, p):
    m = 6
    plan = round_plan(schedule, p, m, 1)
    timeline = run_pipeline(plan, np.full((p, 1), 1.0), np.full((p, 1), 2.0), np.zeros(p))
    busy = np.bincount(plan.stage, weights=timeline.duration, minlength=p)
    np.testing.assert_allclose(busy, m * 3.0)
    assert plan.stage.size == 2 * p * m


def test_engine_p2p_delay_is_paid_once_per_boundary_in_the_fill():
    p, m, delay = 4, 8, 0.25
    plan = round_plan(Schedule.GPIPE, p, m, 1)
    free = run_pipeline(plan, np.ones((p, 1)), np.ones((p, 1)), np.zeros(p))
    slow = run_pipeline(plan, np.ones((p, 1)), np.ones((p, 1)), np.full(p, delay))
    # GPipe's critical path crosses every boundary twice: forward fill and backward drain
    assert slow.stage_end.max() - free.stage_end.max() == pytest.approx(2 * (p - 1) * delay)


def _wide_job(p: int, m: int, schedule: str = "1f1b", v: int = 1) -> dict:
    """Wide layers with a 128-token vocabulary: embedding and head are negligible (8 layers per
    stage keep them under 2% of a chunk even with 4 chunks per stage)."""
    return {
        "model": {"name": "wide", "num_layers": 8 * p, "hidden_size": 4096,
                  "num_attention_heads": 32, "vocab_size": 128, "seq_length": 2048},
        "training": {"global_batch_size": m, "micro_batch_size": 1, "precision": "fp16"},
        "parallel": {"tp": 1, "pp": p, "dp": 1, "schedule": schedule, "virtual_stages": v},
        "cluster": {"gpu": "a100-80gb", "num_gpus": p},
    }


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 16), (8, 8)])
def test_simulated_bubble_fraction_matches_formula_with_free_communication(schedule, p, m):
    job = without_framework_overheads(job_from_dict(_wide_job(p, m, schedule)))
    result = simulate(job, **pipeline_only(job))
    fraction = result.breakdown["pipeline_bubble"] / result.iteration_time_s
    assert fraction == pytest.approx((p - 1) / (m + p - 1), rel=0.01)


@pytest.mark.parametrize("v", [2, 4])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (8, 8)])
def test_simulated_interleaving_shrinks_bubble_by_v(v, p, m):
    plain_job = without_framework_overheads(job_from_dict(_wide_job(p, m)))
    interleaved_job = without_framework_overheads(
        job_from_dict(_wide_job(p, m, "interleaved_1f1b", v)))
    plain = simulate(plain_job, **pipeline_only(plain_job))
    interleaved = simulate(interleaved_job, **pipeline_only(interleaved_job))
    ratio = plain.breakdown["pipeline_bubble"] / interleaved.breakdown["pipeline_bubble"]
    assert ratio == pytest.approx(v, rel=0.03)
    # the same work, only less idle time
    assert interleaved.breakdown["forward"] == pytest.approx(plain.breakdown["forward"], rel=1e-9)


def test_single_stage_has_no_bubble():
    job = without_framework_overheads(job_from_dict(_wide_job(1, 4)))
    result = simulate(job, **pipeline_only(job))
    assert result.breakdown["pipeline_bubble"] == pytest.approx(0.0, abs=1e-12)
    assert result.iteration_time_s == pytest.approx(
        result.breakdown["forward"] + result.breakdown["backward"], rel=1e-12)


@pytest.mark.parametrize("schedule", [Schedule.GPIPE, Schedule.ONE_F_ONE_B])
@pytest.mark.parametrize(("p", "m"), [(1, 1), (1, 5), (2, 1), (3, 2), (4, 4), (5, 12), (8, 3), (7, 30)])
def test_closed_form_rounds_time_exactly_like_the_generic_construction(schedule, p, m):
    """The closed-form round of every 1F1B/GPipe op is a valid layering (inputs and the stage's
    previous op in earlier rounds) and gives the same timeline as the generic rounds."""
    from simulator.timeline import engine

    fast = engine.build_round_plan(schedule, p, m, 1)
    slow = engine.build_round_plan(schedule, p, m, 1, closed_form=False)
    assert np.array_equal(fast.orders, engine.stage_orders(schedule, p, m, 1))
    rng = np.random.default_rng(p * 100 + m)
    fwd, bwd, delay = rng.uniform(0.5, 2, (p, 1)), rng.uniform(1, 4, (p, 1)), rng.uniform(0, 0.3, p)
    a, b = run_pipeline(fast, fwd, bwd, delay), run_pipeline(slow, fwd, bwd, delay)
    order_a, order_b = np.argsort(fast.original), np.argsort(slow.original)
    assert np.allclose(a.end[order_a], b.end[order_b], rtol=0, atol=1e-12)
    assert np.allclose(a.stage_end, b.stage_end, rtol=0, atol=1e-12)
