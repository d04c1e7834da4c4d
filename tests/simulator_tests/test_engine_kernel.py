"""The pipeline engine's three evaluations give the same bits: numba's compiled loop, the same
loop interpreted (`python_version`), and the numpy path (Python floats for small pipelines, one
numpy step per round otherwise). Exact equality of every array, never approx: a search ranks
layouts by these times and the golden results pin them."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import job_from_dict, simulate
from simulator.jit import HAVE_NUMBA, python_version
from simulator.job.enums import Schedule
from simulator.timeline import engine, engine_kernel
from simulator.timeline.engine import build_round_plan, round_plan, run_loop, run_numpy
from simulator.timeline.engine_kernel import compiled_loop, timeline_loop

# (schedule, p, m, v, all_warmup): 1F1B, interleaved (also Megatron-DeepSpeed's all-warm-up
# order at m == p), GPipe, one stage, and pipelines big enough for the per-round numpy path
SHAPES = [
    (Schedule.ONE_F_ONE_B, 4, 8, 1, False),
    (Schedule.ONE_F_ONE_B, 8, 64, 1, False),
    (Schedule.INTERLEAVED_1F1B, 4, 8, 2, False),
    (Schedule.INTERLEAVED_1F1B, 4, 4, 3, True),
    (Schedule.INTERLEAVED_1F1B, 8, 32, 4, False),
    (Schedule.GPIPE, 3, 5, 1, False),
    (Schedule.GPIPE, 16, 48, 1, False),
    (Schedule.ONE_F_ONE_B, 1, 6, 1, False),
]


def _inputs(p: int, v: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Uneven stages (every stage and chunk its own forward/backward time, as with
    first/last_stage_layers) and uneven p2p delays, one of them zero."""
    rng = np.random.default_rng(seed)
    durations = np.concatenate((rng.uniform(0.5, 2.0, p * v), rng.uniform(1.0, 4.0, p * v)))
    delays = np.append(rng.uniform(0.0, 0.4, p), 0.0)
    delays[p // 2] = 0.0
    return durations, delays


def _bits(timeline: engine.Timeline) -> list[bytes]:
    return [a.tobytes() for a in (timeline.start, timeline.end, timeline.duration,
                                  timeline.stage_end, timeline.idle, timeline.p2p_exposed)]


@pytest.mark.parametrize(("schedule", "p", "m", "v", "all_warmup"), SHAPES)
def test_loop_and_numpy_paths_give_identical_bits(schedule, p, m, v, all_warmup):
    plan = round_plan(schedule, p, m, v, all_warmup)
    durations, delays = _inputs(p, v, p * 1000 + m * 10 + v)
    reference = _bits(run_numpy(plan, durations, delays))
    assert _bits(run_loop(plan, timeline_loop, durations, delays)) == reference
    compiled = compiled_loop()
    if compiled is not None:
        assert python_version(compiled) is timeline_loop
        assert _bits(run_loop(plan, compiled, durations, delays)) == reference


@pytest.mark.parametrize(("schedule", "p", "m"), [(Schedule.ONE_F_ONE_B, 6, 24),
                                                  (Schedule.GPIPE, 5, 9)])
def test_scalar_and_per_round_numpy_ends_are_identical(schedule, p, m):
    plan = build_round_plan(schedule, p, m, 1)
    durations, delays = _inputs(p, 1, 7)
    dur, delay = durations[plan.task], delays[plan.edge_or_none]
    by_round = engine._ends_by_round(plan, dur, delay)
    assert engine._ends_scalar(plan, dur, delay).tobytes() == by_round.tobytes()


def test_known_two_stage_timeline():
    """1F1B on 2 stages, 2 micro-batches, forward 1 s, backward 2 s, p2p 0.5 s: stage 0 runs
    F0 [0,1] F1 [1,2], waits for B0 from stage 1 (F0 arrives 1.5, runs [1.5,2.5], B0 [2.5,4.5],
    arrives back at 5.0), B0 [5,7], then B1 (stage 1: F1 [4.5,5.5] after B0, B1 [5.5,7.5],
    arrives at 8) [8,10]."""
    plan = round_plan(Schedule.ONE_F_ONE_B, 2, 2, 1)
    durations = np.array([1.0, 1.0, 2.0, 2.0])
    delays = np.array([0.5, 0.5, 0.0])
    for loop in filter(None, (timeline_loop, compiled_loop())):
        timeline = run_loop(plan, loop, durations, delays)
        assert timeline.stage_end.tolist() == [10.0, 7.5]
    assert run_numpy(plan, durations, delays).stage_end.tolist() == [10.0, 7.5]


def test_simulate_switches_to_the_loop_without_changing_a_bit(monkeypatch):
    job = job_from_dict({
        "model": "megatron-gpt-1.7b",
        "training": {"global_batch_size": 64, "micro_batch_size": 2, "precision": "fp16"},
        "parallel": {"tp": 1, "pp": 4, "dp": 2, "first_stage_layers": 3, "last_stage_layers": 5},
        "cluster": {"gpu": "a100-80gb", "num_gpus": 8},
    })
    monkeypatch.setattr(engine_kernel.RUNS, "ops", 0)
    first = simulate(job)  # numpy: the process has timed few ops yet
    monkeypatch.setattr(engine_kernel.RUNS, "ops", engine_kernel.JIT_AFTER_OPS)
    later = simulate(job)  # the loop (compiled with numba)
    assert later.to_dict() == first.to_dict()
    assert _bits(later.timeline) == _bits(first.timeline)


def test_without_numba_the_loop_is_not_loaded():
    if HAVE_NUMBA:
        assert compiled_loop() is not None
    else:
        assert compiled_loop() is None


def test_the_loop_is_loaded_once_numpy_has_timed_enough_ops():
    counter = engine_kernel.RunCounter()
    assert counter.loop(engine_kernel.JIT_AFTER_OPS - 1) is None
    assert counter.loop(1) is None  # this pipeline still runs in numpy
    assert counter.loop(1) is compiled_loop()  # None without numba: numpy for good


def _rounds_by_definition(orders: np.ndarray, dep: np.ndarray, n: int) -> np.ndarray:
    """The rounds as defined: each round, every stage runs its next op if that op's input ran
    in an earlier round."""
    p, length = orders.shape
    done = np.zeros(n + 1, dtype=bool)
    done[n] = True
    level = np.empty(n, dtype=np.int64)
    ptr = np.zeros(p, dtype=np.int64)
    r = 0
    while (ptr < length).any():
        active = np.flatnonzero(ptr < length)
        ops = orders[active, ptr[active]]
        ready = done[dep[ops]]
        assert ready.any()
        done[ops[ready]] = True
        level[ops[ready]] = r
        ptr[active[ready]] += 1
        r += 1
    return level


@pytest.mark.parametrize(("p", "m", "v", "all_warmup"), [(2, 4, 2, False), (4, 8, 2, False),
                                                         (4, 4, 3, True), (8, 16, 4, False)])
def test_generic_rounds_follow_their_definition(p, m, v, all_warmup):
    from simulator.timeline.schedule import OpIndex, dependencies, stage_orders

    n = OpIndex(p, v, m).count
    dep, _ = dependencies(p, m, v)
    dep = np.where(dep < 0, n, dep)
    orders = stage_orders(Schedule.INTERLEAVED_1F1B, p, m, v, all_warmup)
    expected = _rounds_by_definition(orders, dep, n)
    assert np.array_equal(engine._levels_by_rounds(orders, dep, n), expected)


def test_interleaved_order_of_the_first_stage_is_megatrons():
    """p = 2, v = 2, m = 4 (Megatron's get_pp_rank_microbatches: 2 (p - 1) + (v - 1) p = 4
    warm-up forwards on stage 0; micro-batches run in groups of p per chunk, backwards from the
    last chunk)."""
    from simulator.timeline.schedule import OpIndex, stage_orders

    idx = OpIndex(2, 2, 4)
    backward, chunk, _, mb = idx.decode()
    order = stage_orders(Schedule.INTERLEAVED_1F1B, 2, 4, 2)[0]
    names = [f"{'B' if backward[o] else 'F'}{chunk[o]}.{mb[o]}" for o in order]
    assert names == ["F0.0", "F0.1", "F1.0", "F1.1",
                     "F0.2", "B1.0", "F0.3", "B1.1", "F1.2", "B0.0", "F1.3", "B0.1",
                     "B1.2", "B1.3", "B0.2", "B0.3"]


def test_compiled_rounds_equal_interpreted_ones():
    from simulator.timeline.engine_kernel import compiled_levels, levels_loop
    from simulator.timeline.schedule import OpIndex, dependencies, stage_orders

    compiled = compiled_levels()
    if compiled is None:
        pytest.skip("numba is not available (VTRAIN_NO_JIT=1 or not installed)")
    assert python_version(compiled) is levels_loop
    p, m, v = 4, 8, 2
    n = OpIndex(p, v, m).count
    dep, _ = dependencies(p, m, v)
    dep = np.where(dep < 0, n, dep)
    orders = stage_orders(Schedule.INTERLEAVED_1F1B, p, m, v)
    level = [-2] * n + [-1]
    assert levels_loop(orders.tolist(), dep.tolist(), level, [0] * p, [-1] * p, p, 2 * v * m) == n
    buffer = np.array([-2] * n + [-1], dtype=np.int64)
    placed = compiled(orders, dep, buffer, np.zeros(p, dtype=np.int64), np.full(p, -1), p, 2 * v * m)
    assert placed == n and buffer.tolist() == level
    assert level[:n] == _rounds_by_definition(orders, dep, n).tolist()
