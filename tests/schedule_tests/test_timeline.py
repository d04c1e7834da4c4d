"""ElasticFlow's minimum satisfactory share on a free-GPU timeline, with hand-computed answers."""

from __future__ import annotations

import pytest

from tests.schedule_tests.conftest import levels
from vtrain_ml.scheduler.timeline import FreeTimeline, minimum_share

# 1, 2, 4 or 8 GPUs at 8, 4, 2, 1 seconds per iteration (linear, to make the arithmetic plain)
LINEAR = levels([1, 2, 4, 8], [8.0, 4.0, 2.0, 1.0])


def test_share_is_the_fewest_gpus_that_finish_by_the_deadline() -> None:
    # 100 iterations in 200 s: 1 GPU does 25, 2 do 50, 4 do exactly 100
    r = minimum_share(FreeTimeline(0.0, 8), LINEAR, remaining=100, deadline=200.0)
    assert r is not None and r.quota == 4 and r.start_s == pytest.approx(0.0) and r.gpus_now == 4


def test_share_is_reserved_as_late_as_possible() -> None:
    # 300 s: 4 GPUs need only the last 200 s, so nothing is held now
    tl = FreeTimeline(0.0, 8)
    r = minimum_share(tl, LINEAR, remaining=100, deadline=300.0)
    assert r is not None and r.quota == 4 and r.start_s == pytest.approx(100.0) and r.gpus_now == 0
    assert list(tl.starts) == [0.0, 100.0, 300.0] and list(tl.free) == [8, 4, 8]


def test_later_deadlines_plan_around_earlier_reservations() -> None:
    tl = FreeTimeline(0.0, 8)
    minimum_share(tl, LINEAR, remaining=100, deadline=100.0)  # needs all 8 GPUs for 100 s
    # a second job of 100 iterations by t = 150 has 8 GPUs only from 100 s: 50 iterations -> no share
    assert minimum_share(tl, LINEAR, remaining=100, deadline=150.0) is None
    # by t = 200 it fits on 8 GPUs in [100, 200)
    r = minimum_share(tl, LINEAR, remaining=100, deadline=200.0)
    assert r is not None and r.quota == 8 and r.start_s == pytest.approx(100.0) and r.gpus_now == 0


def test_a_share_takes_the_largest_level_that_the_free_gpus_allow() -> None:
    tl = FreeTimeline(0.0, 8)
    tl.reserve(levels([5], [1.0]), 5, 0.0, 100.0)  # 3 GPUs free in [0, 100): level 2 there
    # 150 iterations by 100 s: even 8 GPUs would get only level 2 (3 free) = 25 iterations
    assert minimum_share(tl, LINEAR, remaining=150, deadline=100.0) is None
    r = minimum_share(tl, LINEAR, remaining=25, deadline=100.0)
    assert r is not None and r.gpus_now == 2


def test_a_moving_job_pays_its_restart_as_extra_work() -> None:
    # running on 2 GPUs; 4 GPUs would need 200 s of work + 40 s restart: 240 s > 230 s
    r = minimum_share(FreeTimeline(0.0, 8), LINEAR, remaining=100, deadline=230.0, restart_s=40.0,
                      current=2, started=True)
    assert r is not None and r.quota == 8
    # staying on 2 GPUs would need 400 s, and a job not yet started pays no restart
    r = minimum_share(FreeTimeline(0.0, 8), LINEAR, remaining=100, deadline=230.0, restart_s=40.0)
    assert r is not None and r.quota == 4


def test_no_share_when_the_deadline_has_passed_or_nothing_fits() -> None:
    assert minimum_share(FreeTimeline(10.0, 8), LINEAR, remaining=1, deadline=10.0) is None
    assert minimum_share(FreeTimeline(0.0, 8), levels([], []), remaining=1, deadline=1e9) is None
