"""The result and its renderings: breakdown sums to the iteration, frozen, deterministic, the
Chrome trace is valid and written atomically, the table and JSON show the same numbers."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from simulator import simulate
from simulator.fileio import write_json_atomic
from simulator.report.render import chrome_trace, duration, table, usd
from simulator.report.result import BREAKDOWN_KEYS
from simulator.timeline.engine import round_plan
from tests.conftest import make_job
from vtrain_ml.cli.simulate import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_breakdown_sums_to_iteration_time(small_job):
    result = simulate(small_job)
    assert set(result.breakdown) == set(BREAKDOWN_KEYS)
    assert sum(result.breakdown.values()) == pytest.approx(result.iteration_time_s, rel=1e-9)


def test_more_microbatches_take_longer():
    short = simulate(make_job(training={"global_batch_size": 8}))
    long = simulate(make_job(training={"global_batch_size": 32}))
    assert long.iteration_time_s > short.iteration_time_s


def test_result_is_frozen(small_job):
    result = simulate(small_job)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.iteration_time_s = 1.0  # type: ignore[misc]
    with pytest.raises(ValidationError):
        small_job.parallel.tp = 4  # type: ignore[misc]


def test_same_job_twice_gives_identical_results(small_job):
    first = simulate(small_job).to_dict()
    other = simulate(make_job(parallel={"schedule": "gpipe"})).to_dict()
    round_plan.cache_clear()  # cold schedule plan
    again = simulate(small_job).to_dict()
    assert again == first
    assert other != first


def test_result_to_dict_is_json_with_the_documented_keys(small_job):
    data = json.loads(json.dumps(simulate(small_job).to_dict()))
    for key in ("iteration_time_s", "breakdown", "stages", "tokens_per_s", "model_flops_per_iteration",
                "mfu", "hfu", "memory", "peak_memory_bytes", "fits_in_memory", "cost_per_iteration_usd",
                "time_to_train_s", "cost_to_train_usd"):
        assert key in data
    assert set(data["breakdown"]) == set(BREAKDOWN_KEYS)
    assert len(data["stages"]) == len(data["memory"]) == 2
    for memory in data["memory"]:
        assert set(memory) >= {"parameters_bytes", "gradients_bytes", "optimizer_states_bytes",
                               "activations_bytes", "total_bytes"}


def test_token_budget_gives_time_and_cost_to_train():
    result = simulate(make_job(training={"train_tokens": 1e9}, cluster={"price_per_gpu_hour_usd": 2.0}))
    assert result.time_to_train_s == pytest.approx(1e9 / result.tokens_per_s)
    assert result.cost_to_train_usd == pytest.approx(result.time_to_train_s * 8 * 2.0 / 3600)
    assert result.cost_per_iteration_usd == pytest.approx(result.iteration_time_s * 8 * 2.0 / 3600)
    tokens = 16 * 1024
    assert result.tokens_per_s == pytest.approx(tokens / result.iteration_time_s)
    assert result.usd_per_million_tokens == pytest.approx(result.cost_per_iteration_usd / tokens * 1e6)
    assert result.to_dict()["usd_per_million_tokens"] == result.usd_per_million_tokens
    assert f"({usd(result.usd_per_million_tokens)} per million tokens)" in table(result)


def test_the_table_says_what_the_scale_loss_is_made_of() -> None:
    """Its two terms (simulator.timeline.stragglers) beside the breakdown's `scale_loss`."""
    result = simulate(make_job(cluster={"num_gpus": 64}, parallel={"tp": 2, "pp": 2, "dp": 16},
                               training={"global_batch_size": 64}))
    loss = result.scale_loss
    assert loss is not None and loss.total_s > 0
    line = next(x for x in table(result).splitlines() if x.strip().startswith("scale_loss"))
    assert f"waiting for the slowest of {loss.ranks:,} ranks" in line
    assert f"GPU speed {duration(loss.persistent_s)}" in line
    assert f"kernel jitter {duration(loss.transient_s)}" in line


def test_a_utilization_above_100_percent_says_which_peak_it_is_against(small_job) -> None:
    """MFU and HFU are against the 16-bit peak for FP8 and FP4 runs too (simulator.report.metrics):
    an FP4 run can exceed 100%, and then the table says why."""
    result = simulate(small_job)
    note = "against the 16-bit peak"

    def line(r: object) -> str:
        return next(x for x in table(r).splitlines() if "MFU / HFU" in x)  # type: ignore[arg-type]

    assert result.hfu <= 1.0 and note not in line(result)
    assert note in line(dataclasses.replace(result, mfu=1.05, hfu=1.08))


def test_chrome_trace_is_valid(small_job):
    result = simulate(small_job)
    trace = json.loads(json.dumps(chrome_trace(result)))
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    m, p = result.num_microbatches, len(result.stages)
    assert len([e for e in spans if e["tid"] == 0]) == 2 * m * p  # every forward and backward
    for e in spans:
        assert {"pid", "tid", "ts", "dur", "name"} <= set(e)
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["ts"] >= 0 and e["dur"] >= 0
        assert e["ts"] + e["dur"] <= result.iteration_time_s * 1e6 * (1 + 1e-9)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert {"stage 0", "stage 1", "compute"} <= names


def test_trace_ops_of_a_stage_never_overlap(small_job):
    spans = [e for e in chrome_trace(simulate(small_job))["traceEvents"]
             if e["ph"] == "X" and e["tid"] == 0]
    for stage in {e["pid"] for e in spans}:
        mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if e["pid"] == stage)
        assert all(end <= nxt + 1e-6 for (_, end), (nxt, _) in itertools.pairwise(mine))


def test_cli_writes_trace_and_json(tmp_path, capsys):
    trace = tmp_path / "sub" / "iter.json"
    code = main([str(EXAMPLES / "vtrain_gpt_8gpu.json"), "--json", "--trace", str(trace)])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    result = json.loads(out)
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e["ph"] == "X" for e in events)
    assert max(e["ts"] + e["dur"] for e in events if e["ph"] == "X") <= result["iteration_time_s"] * 1e6 * (
        1 + 1e-9)
    assert [p.name for p in trace.parent.iterdir()] == ["iter.json"]  # no temporary left behind


def test_trace_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "iter.json"
    path.write_text('{"old": true}')

    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        write_json_atomic(path, {"traceEvents": []})
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["iter.json"]


def test_table_shows_the_result_with_units(small_job):
    result = simulate(small_job)
    text = table(result)
    assert f"{result.iteration_time_s * 1e3:.3f} ms" in text
    assert "tokens/s" in text and "GiB" in text and "MFU" in text
    for key in BREAKDOWN_KEYS:
        assert key in text or (key == "fsdp_comm" and not result.breakdown[key])


def test_cli_table_is_the_default(capsys):
    assert main([str(EXAMPLES / "mtnlg_530b.yaml")]) == 0
    out = capsys.readouterr().out
    assert "mt-nlg-530b" in out and "3360 x a100-80gb" in out and "iteration time" in out
