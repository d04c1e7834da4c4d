"""Megatron-Core's `--overlap-param-gather` (simulator.timeline.param_gather).

Expected values come from the dispatch rules of Megatron-Core, replayed here event by event
(`_replay`), not from the closed forms under test:
- unaligned (non-interleaved schedules): a bucket's all-gather is dispatched by the forward
  pre-hook of the previous bucket, after that bucket's wait (the first bucket by its own hook);
- aligned (interleaved): every bucket of a chunk is dispatched at once and they queue on one
  communication stream.
A bucket's share of the forward starts when its parameters have arrived and the previous
share is done.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import job_from_dict, simulate
from simulator.errors import ConfigError
from simulator.graph.fsdp import gathered_after_step_bytes
from simulator.job.enums import CollectiveKind
from simulator.job.param_bytes import param_bytes
from simulator.memory.states import stage_param_counts
from simulator.network.topology import dp_placement
from simulator.report.trace import chrome_trace
from simulator.simulate import default_network
from simulator.timeline.param_gather import chunk_wait


def _replay(start: float, need: float, n: int, g: float, forward: float, aligned: bool
            ) -> tuple[float, float]:
    """(wait, last arrival) by stepping through the buckets one event at a time."""
    f = forward / n
    compute_end = need  # the forward would begin at `need`
    stream = compute_start = start
    arrivals = []
    for i in range(n):
        if aligned:
            stream += g
        else:  # dispatched when the previous bucket's share begins (its wait is over)
            dispatch = start if i == 0 else compute_start
            stream = max(stream, dispatch) + g
        arrivals.append(stream)
        compute_start = max(stream, compute_end)
        compute_end = compute_start + f
    return compute_end - (need + forward), arrivals[-1]


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 5), st.floats(0, 5), st.integers(1, 40), st.floats(0.001, 1),
       st.floats(0.001, 10), st.booleans())
def test_a_chunks_wait_is_what_bucket_by_bucket_dispatch_gives(
        start: float, lead: float, n: int, g: float, forward: float, aligned: bool) -> None:
    need = start + lead if not aligned else lead
    start = need if not aligned else start  # unaligned: dispatched by the forward itself
    wait, arrived = chunk_wait(start, need, n, g, forward, aligned)
    expected_wait, expected_arrival = _replay(start, need, n, g, forward, aligned)
    assert wait == pytest.approx(expected_wait, rel=1e-9, abs=1e-12)
    assert arrived == pytest.approx(expected_arrival, rel=1e-9, abs=1e-12)


def _job(parallel: dict[str, Any], num_gpus: int = 128, **training: Any) -> Any:
    return job_from_dict({
        "model": {"name": "gpt-8l", "num_layers": 8, "hidden_size": 4096,
                  "num_attention_heads": 32, "vocab_size": 50257, "seq_length": 2048},
        "training": {"global_batch_size": 64, "micro_batch_size": 1, "precision": "bf16",
                     **training},
        "parallel": {"tp": 8, "distributed_optimizer": True, "overlap_grad_reduce": True,
                     **parallel},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": num_gpus}})


def _whole_gather_s(job: Any, stage: int) -> float:
    params = stage_param_counts(job)
    nbytes = gathered_after_step_bytes(job, params, param_bytes(job).weights)[stage]
    return default_network(job).time(CollectiveKind.ALL_GATHER, float(nbytes), dp_placement(job))


def test_a_later_stage_without_interleaving_waits_for_its_whole_gather() -> None:
    """Megatron buckets only the first stage's first chunk; stage 1's one bucket is dispatched
    by its first forward's pre-hook and waited for at once."""
    job = _job({"pp": 2, "overlap_param_gather": True})
    result = simulate(job)
    assert result.param_gather_wait_s is not None
    assert result.param_gather_wait_s[1, 0] == pytest.approx(_whole_gather_s(job, 1), rel=1e-12)


def test_the_gather_leaves_the_tail_and_the_breakdown_still_adds_up() -> None:
    off = simulate(_job({"pp": 1}, num_gpus=64))
    on = simulate(_job({"pp": 1, "overlap_param_gather": True}, num_gpus=64))
    gather = _whole_gather_s(_job({"pp": 1}, num_gpus=64), 0)
    assert off.tail.dp_exposed_s[0] - on.tail.dp_exposed_s[0] == pytest.approx(gather, rel=1e-9)
    assert on.param_gather_wait_s is not None and 0 < on.param_gather_wait_s[0, 0] < gather
    assert on.iteration_time_s < off.iteration_time_s
    for r in (on, off):
        assert sum(r.breakdown.values()) == pytest.approx(r.iteration_time_s, rel=1e-9)


def test_interleaving_dispatches_ahead_and_hides_more() -> None:
    """Aligned dispatch starts chunks 0 and 1 when the iteration starts: stage 1's first forward
    comes later than that, so it waits less than for its whole gather."""
    job = _job({"pp": 2, "virtual_stages": 2, "schedule": "interleaved_1f1b",
                "overlap_param_gather": True})
    waits = simulate(job).param_gather_wait_s
    assert waits is not None
    assert waits[1, 0] < _whole_gather_s(job, 1) / 2  # half of the stage: one chunk


def test_the_trace_shows_what_each_first_forward_waited_for() -> None:
    result = simulate(_job({"pp": 2, "overlap_param_gather": True}))
    spans = [e for e in chrome_trace(result)["traceEvents"]
             if e.get("cat") == "dp_comm" and "parameter all-gather" in e["name"]]
    assert result.param_gather_wait_s is not None
    assert sorted(e["dur"] for e in spans) == pytest.approx(
        sorted(result.param_gather_wait_s.ravel() * 1e6))
    first_forwards = [e for e in chrome_trace(result)["traceEvents"]
                      if e.get("cat") == "F" and e["name"] == "F0"]
    for span in spans:  # the forward starts when the wait ends
        forward = next(e for e in first_forwards if e["pid"] == span["pid"])
        assert forward["ts"] == pytest.approx(span["ts"] + span["dur"])


@pytest.mark.parametrize(("parallel", "training", "message"), [
    ({"distributed_optimizer": False}, {}, "set parallel.distributed_optimizer: true"),
    ({"overlap_grad_reduce": False}, {}, "set parallel.overlap_grad_reduce: true"),
    ({}, {"framework": "pytorch"}, "not pytorch's"),
])
def test_megatrons_refusals_are_named(parallel: dict[str, Any], training: dict[str, Any],
                                      message: str) -> None:
    with pytest.raises(ConfigError, match="overlap_param_gather") as err:
        _job({"overlap_param_gather": True, **parallel}, **training)
    assert message in str(err.value)


def test_without_the_flag_nothing_changes() -> None:
    result = simulate(_job({"pp": 2}))
    assert result.param_gather_wait_s is None
    assert np.all(result.tail.dp_exposed_s >= _whole_gather_s(_job({"pp": 2}), 1) - 1e-12)


def test_context_parallel_ranks_gather_even_without_data_parallelism() -> None:
    """With cp the distributed optimizer shards over dp x cp: at dp 1 the gather over the cp
    ranks leaves the tail and the first forward waits for it instead (it does not vanish)."""
    job = {"tp": 8, "cp": 2, "dp": 1, "overlap_param_gather": True}
    on = simulate(_job(job, num_gpus=16, flash_attention=True))
    off = simulate(_job({**job, "overlap_param_gather": False}, num_gpus=16, flash_attention=True))
    assert on.param_gather_wait_s is not None and on.param_gather_wait_s[0, 0] > 0
    assert off.tail.dp_exposed_s[0] > on.tail.dp_exposed_s[0]


def test_the_batch_csv_says_what_the_first_forwards_waited_for() -> None:
    from vtrain_ml.batch import result_columns, to_csv

    result = simulate(_job({"pp": 2, "overlap_param_gather": True}))
    row = {"status": "ok", **result_columns(result)}
    header, line = to_csv([row]).splitlines()
    values = dict(zip(header.split(","), line.split(","), strict=True))
    assert result.param_gather_wait_s is not None
    expected = float(result.param_gather_wait_s[result.critical_stage].sum())
    assert float(values["param_gather_wait_s"]) == pytest.approx(expected, rel=1e-12)
    plain = result_columns(simulate(_job({"pp": 2})))
    assert plain["param_gather_wait_s"] == ""
