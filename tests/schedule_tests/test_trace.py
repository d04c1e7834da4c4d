"""Reading traces, and bad input: one line naming the file, row, job and field; exit code 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.errors import ConfigError
from tests.schedule_tests.conftest import MID, SMALL_GPU, TINY, row
from vtrain_ml.cli.schedule import main
from vtrain_ml.scheduler.generate import GeneratorConfig, generate_rows, trace_yaml
from vtrain_ml.scheduler.trace import load_trace


def write_yaml(path: Path, rows: list[dict[str, Any]], **top: Any) -> Path:
    path.write_text(yaml.safe_dump({"jobs": rows, **top}) if top else yaml.safe_dump(rows))
    return path


def one_error_line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_csv_and_yaml_traces_read_the_same_rows(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("name,arrival_s,model,train_tokens,global_batch_size,deadline_s,deadline_factor,priority\n"
                   f"a,0,{TINY},1e8,32,,3,\n"
                   f"b,10.5,{TINY},2e8,64,5000,,2\n")
    rows = [{"name": "a", "arrival_s": 0, "model": TINY, "train_tokens": 1e8, "global_batch_size": 32,
             "deadline_factor": 3},
            {"name": "b", "arrival_s": 10.5, "model": TINY, "train_tokens": 2e8, "global_batch_size": 64,
             "deadline_s": 5000, "priority": 2}]
    from_csv = load_trace(csv)
    from_yaml = load_trace(write_yaml(tmp_path / "t.yaml", rows, cluster={"gpus": 8, "gpu": SMALL_GPU}))
    assert from_csv.rows == from_yaml.rows
    assert from_yaml.cluster.gpus == 8 and from_csv.cluster.gpus is None


@pytest.mark.parametrize(("fields", "names"), [
    ({"train_tokens": 0}, ["row 2 (job 'b')", "train_tokens=0"]),
    ({"deadline_s": 5.0, "arrival_s": 10.0}, ["row 2 (job 'b')", "deadline_s=5 is not after arrival_s=10"]),
    ({"deadline_s": 100.0, "deadline_factor": 2.0}, ["row 2 (job 'b')", "exactly one of deadline_s"]),
    ({"gpus_wanted": 3}, ["row 2 (job 'b')", "unknown column 'gpus_wanted'"]),
])
def test_a_bad_row_is_one_line_naming_row_job_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        fields: dict[str, Any], names: list[str]) -> None:
    rows = [row("a"), row("b", **fields)]
    path = str(write_yaml(tmp_path / "t.yaml", rows))
    err = one_error_line(capsys, path, "--gpu", SMALL_GPU, "--gpus", "8")
    for name in names:
        assert name in err


def test_unknown_model_names_the_row_and_suggests_presets(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    rows = [row("a"), row("b", model="megatron-gpt-1.8b")]
    err = one_error_line(capsys, str(write_yaml(tmp_path / "t.yaml", rows)), "--gpu", SMALL_GPU)
    assert "row 2 (job 'b'): model='megatron-gpt-1.8b'" in err and "did you mean" in err
    rows = [row("a", model="no/such/model.yaml")]
    err = one_error_line(capsys, str(write_yaml(tmp_path / "u.yaml", rows)), "--gpu", SMALL_GPU)
    assert "row 1 (job 'a'): model='no/such/model.yaml': no such model file" in err


def test_a_cluster_too_small_for_a_model_names_the_job(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    rows = [row("a"), row("big", model=MID)]  # the 8-layer model needs 2 of these GPUs
    path = str(write_yaml(tmp_path / "t.yaml", rows))
    err = one_error_line(capsys, path, "--gpu", SMALL_GPU, "--gpus", "1", "--no-cache", "--quiet")
    assert "row 2 (job 'big'): model=" in err and "fits no layout on up to 1 small-gpu GPUs" in err
    assert "--gpus" in err


def test_empty_and_missing_traces_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "has no jobs" in one_error_line(capsys, str(write_yaml(tmp_path / "e.yaml", [])))
    assert "does not exist" in one_error_line(capsys, str(tmp_path / "missing.csv"))
    assert "--generate" in one_error_line(capsys)


def test_generated_trace_reads_back_and_says_how_it_was_made(tmp_path: Path) -> None:
    config = GeneratorConfig(jobs=30, seed=7)
    rows = generate_rows(config)
    text = trace_yaml(rows, config, "python -m vtrain_ml.schedule generate --jobs 30 --seed 7 ...")
    path = tmp_path / "g.yaml"
    path.write_text(text)
    trace = load_trace(path)
    assert [r.name for r in trace.rows] == [r["name"] for r in rows]
    assert trace.cluster.gpus == 1024 and "seed 7" in text and "--jobs 30 --seed 7" in text
    arrivals = [r.arrival_s for r in trace.rows]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    assert all(r.deadline_factor is not None and 2.0 <= r.deadline_factor <= 10.0 for r in trace.rows)


def test_the_generator_is_deterministic_per_seed() -> None:
    assert generate_rows(GeneratorConfig(jobs=50, seed=3)) == generate_rows(GeneratorConfig(jobs=50, seed=3))
    assert generate_rows(GeneratorConfig(jobs=50, seed=3)) != generate_rows(GeneratorConfig(jobs=50, seed=4))


def test_generator_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="deadline_factor"):
        GeneratorConfig(deadline_factor=(3.0, 2.0))


def test_shipped_examples_are_valid_traces() -> None:
    root = Path(__file__).resolve().parents[2] / "examples"
    big = load_trace(root / "cluster_trace.yaml")
    assert len(big.rows) >= 100 and big.cluster.gpus == 1024
    small = load_trace(root / "cluster_trace_small.yaml")
    assert 3 <= len(small.rows) <= 20
