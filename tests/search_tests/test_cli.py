"""python -m vtrain_ml.search: bad input is one clear line and exit code 2; outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from surrogate.artifact import SCHEMA_VERSION
from tests.search_tests.conftest import tiny_dict
from vtrain_ml.cli.search import main


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: ")
    return err[0]


def test_unknown_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["--model", "gpt-9", "--max-gpus", "8", "--global-batch", "8",
                 "--storage", f"sqlite:///{tmp_path / 'x.db'}"])
    assert code == 2
    assert "unknown model preset 'gpt-9'" in _one_error_line(capsys)


def test_no_valid_layout_for_the_gpu_count(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["--model", "mt-nlg-530b", "--max-gpus", "8", "--global-batch", "1920",
                 "--storage", f"sqlite:///{tmp_path / 'x.db'}"])
    assert code == 2
    line = _one_error_line(capsys)
    assert "no feasible layout of mt-nlg-530b on 8 a100-80gb GPUs" in line
    assert "need more than max_gpus=8 GPUs" in line
    assert "break a layout rule (most often: num_layers=105 is not divisible by" in line
    # with a larger budget the pp choices (divisors of the 105 layers up to it) grow: tp=8 pp=15
    # on 120 GPUs is the fewest GPUs whose weights, gradients and states fit in 80 GiB
    assert "uses 120 GPUs (tp=8, pp=15, dp=1): raise --max-gpus to at least that" in line
    assert not re.search(r"\(\d+x\)", line), "counts are in words, not '(12888x)'"


def test_storage_that_cannot_be_opened(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--model", "llama-2-7b", "--max-gpus", "8", "--global-batch", "64",
                 "--storage", "nosuchdb://nowhere/x"])
    assert code == 2
    assert "cannot open storage nosuchdb://nowhere/x" in _one_error_line(capsys)


def test_resume_of_a_study_that_does_not_exist(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["--model", "llama-2-7b", "--max-gpus", "8", "--global-batch", "64", "--resume",
                 "--study", "nope", "--storage", f"sqlite:///{tmp_path / 'x.db'}"])
    assert code == 2
    assert "no study 'nope'" in _one_error_line(capsys)


def test_missing_required_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "llama-2-7b"]) == 2
    assert "missing --max-gpus, --global-batch" in _one_error_line(capsys)


def test_config_file_with_an_unknown_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump({**tiny_dict(), "objectiv": "time"}))
    assert main(["--config", str(path)]) == 2
    assert "did you mean 'objective'" in _one_error_line(capsys)


def test_exhaustive_json_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump({**tiny_dict(), "baseline": {"tp": 2, "pp": 2, "dp": 4}}))
    plot = tmp_path / "front.png"
    assert main(["--config", str(path), "--exhaustive", "--json", "--plot", str(plot)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"best", "pareto", "exact_evaluations", "trials", "wall_s", "baseline"} <= set(data)
    assert data["best"]["iteration_time_s"] <= data["baseline"]["iteration_time_s"]
    assert plot.stat().st_size > 1000


@pytest.mark.slow
def test_search_cli_with_the_real_focused_surrogate(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(tiny_dict(storage=f"sqlite:///{tmp_path / 's.db'}", strategy="optuna")))
    assert main(["--config", str(path), "--trials", "30"]) == 0
    captured = capsys.readouterr()
    assert "training a focused surrogate on the 8 exact samples" in captured.err
    assert "verify round" in captured.err
    assert "surrogate vs exact" in captured.out


@pytest.mark.slow
def test_resume_by_study_name_alone_uses_the_stored_settings(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(tiny_dict(storage=url, study="mine", trials=10, verify_every=10,
                                             strategy="optuna")))
    assert main(["--config", str(path), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["--resume", "--study", "mine", "--storage", url, "--trials", "20", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert (first["trials"], second["trials"]) == (10, 20)


def test_mlflow_run_holds_parameters_metrics_table_and_plot(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)  # the default tracking database is runs/mlflow.db here
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(tiny_dict(space={**tiny_dict()["space"], "tp": [2]})))
    assert main(["--config", str(path), "--exhaustive", "--mlflow", "--quiet"]) == 0
    artifacts = {p.name for p in (tmp_path / "runs" / "mlartifacts").rglob("*") if p.is_file()}
    assert {"top_plans.json", "pareto.png"} <= artifacts
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("vtrain-search").experiment_id])
    assert run.data.metrics["best_iteration_time_s"] > 0


def test_a_corrupt_surrogate_file_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    names = {"time": "iteration_time.ubj", "memory": "peak_memory.ubj"}
    for name in names.values():
        (folder / name).write_bytes(b"\x00garbage")
    (folder / "metadata.json").write_text(json.dumps({
        "schema_version": SCHEMA_VERSION, "feature_names": ["a"], "boosters": names, "best_iterations": {},
        "hardware": {}, "bounds": {}, "n_train": 1, "hyperparameters": {}}))
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(tiny_dict(surrogate=str(folder), storage="memory")))
    assert main(["--config", str(path)]) == 2
    line = _one_error_line(capsys)
    assert "iteration_time.ubj is not a readable XGBoost model" in line and "retrain" in line
