"""`python -m vtrain_ml.schedule` end to end: text, --json keys, --plot, --trace, --compare,
the trace generator, MLflow when a tracking URI is set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.schedule_tests.conftest import MID, SMALL_GPU, TINY, row
from vtrain_ml.cli.schedule import main
from vtrain_ml.scheduler.trace import load_trace

ROWS = [row("a", 0, TINY, train_tokens=1e9, deadline_factor=4), row("b", 30, MID, train_tokens=5e8),
        row("c", 60, TINY, deadline_factor=0.5)]


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump({"cluster": {"gpus": 8, "gpu": SMALL_GPU}, "jobs": ROWS}))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main([*argv, "--quiet"]) == 0
    return capsys.readouterr().out


def test_json_has_the_issue_keys_and_a_row_per_job(trace_file: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(run(capsys, str(trace_file), "--json", "--cache", str(tmp_path / "c")))
    for key in ("deadline_satisfaction_ratio", "average_jct_s", "p95_jct_s", "makespan_s", "gpu_utilization",
                "jobs"):
        assert key in data
    assert [j["name"] for j in data["jobs"]] == ["a", "b", "c"]
    assert data["jobs"][2]["outcome"] == "rejected"
    assert data["deadline_satisfaction_ratio"] == pytest.approx(2 / 3)
    a = data["jobs"][0]
    assert a["allocations"][0][1] > 0 and a["plans"] and a["outcome"] == "met"


def test_text_table_plot_perfetto_trace_and_oracles_side_by_side(trace_file: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    png, perfetto = tmp_path / "out" / "timeline.png", tmp_path / "schedule.json"
    out = run(capsys, str(trace_file), "--compare", "--plot", str(png), "--trace", str(perfetto),
              "--no-cache", "--policy", "elastic")
    assert "deadline satisfaction ratio" in out and "rejected" in out
    assert "elastic  simulator" in out and "elastic  linear" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = json.loads(perfetto.read_text())["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert sorted(tracks) == [1, 2, 3] and tracks[1].startswith("a (")
    slices = [e for e in events if e["ph"] == "X"]
    assert slices and all(e["dur"] > 0 and e["tid"] in (1, 2) for e in slices)


def test_fifo_and_edf_run_every_job(trace_file: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    for policy in ("fifo", "edf"):
        out = run(capsys, str(trace_file), "--json", "--policy", policy, "--cache", str(tmp_path))
        data = json.loads(out)
        assert [j["outcome"] for j in data["jobs"]][2] == "missed"  # run, and late: no admission control


def test_generate_writes_a_trace_that_schedules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gen.yaml"
    assert main(["generate", "--jobs", "15", "--seed", "2", "--gpus", "64", "--out", str(out)]) == 0
    trace = load_trace(out)
    assert len(trace.rows) == 15 and trace.cluster.gpus == 64
    assert "--jobs 15 --seed 2 --gpus 64" in out.read_text().splitlines()[1]


def test_a_run_is_logged_to_mlflow_when_a_tracking_uri_is_set(trace_file: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    run(capsys, str(trace_file), "--cache", str(tmp_path / "c"))
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["vtrain-schedule"])
    assert len(runs) == 1
    assert runs["metrics.deadline_satisfaction_ratio"].iloc[0] == pytest.approx(2 / 3)
    assert runs["params.policy"].iloc[0] == "elastic"
