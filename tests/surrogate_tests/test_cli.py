"""`python -m vtrain_ml.surrogate`: commands, JSON output, one-line errors."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import yaml

from vtrain_ml.cli.surrogate import main


def test_generate_and_train_and_evaluate_from_the_command_line(tmp_path, tiny_space_file, capsys) -> None:
    """evaluate scores samples the model never trained on (another seed), and its MAPE is the one
    computed here from the model's own predictions; a model that learned nothing (the training
    samples' median time for every job) does far worse."""
    from surrogate.dataset import JOB_COLUMNS, read_samples
    from surrogate.encoding import OutOfSpaceWarning
    from surrogate.model import Surrogate

    samples, unseen, model = tmp_path / "s", tmp_path / "u", tmp_path / "m"
    for out, n, seed in ((samples, "120", "0"), (unseen, "40", "1")):
        assert main(["generate", "--space", str(tiny_space_file), "--n", n, "--out", str(out), "--seed", seed,
                     "--jobs", "1", "--chunk-size", "60", "--no-progress"]) == 0
    assert "rejected" in capsys.readouterr().out
    assert main(["train", "--samples", str(samples), "--out", str(model), "--n-estimators", "30",
                 "--jobs", "1"]) == 0
    assert "held-out test" in capsys.readouterr().out
    assert main(["evaluate", "--model", str(model), "--samples", str(unseen), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"n", "mape", "p95_ape", "spearman", "memory_mape", "batch_predictions_per_s"} <= set(data)
    truth = read_samples(unseen)
    with warnings.catch_warnings():  # an unseen shape may be wider than any trained one
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        predicted = Surrogate.load(model).predict(truth[list(JOB_COLUMNS)]).iteration_time_s.to_numpy()
    ape = np.abs(predicted - truth.iteration_time_s.to_numpy()) / truth.iteration_time_s.to_numpy()
    assert data["n"] == 40 and data["mape"] == pytest.approx(ape.mean(), rel=1e-9)
    median = read_samples(samples).iteration_time_s.median()
    no_skill = np.mean(np.abs(median - truth.iteration_time_s) / truth.iteration_time_s)
    assert data["mape"] < min(0.10, no_skill / 10), (data["mape"], no_skill)  # 3.4% and 100% today


def test_predict_a_job_file(tmp_path, tiny_model, capsys) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "model": {"num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 51200,
                  "seq_length": 1024},
        "training": {"global_batch_size": 64, "micro_batch_size": 1, "precision": "bf16"},
        "parallel": {"tp": 2, "pp": 2, "dp": 2}, "cluster": {"gpu": "a100-80gb", "num_gpus": 8}}))
    assert main(["predict", "--model", str(tiny_model.path), str(job), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["iteration_time_s"] > 0 and isinstance(data["fits_in_memory"], bool)


def test_bad_input_gives_one_line_and_exit_code_2(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_gpu: {min: 8, max: 16}\n")
    assert main(["generate", "--space", str(bad), "--n", "5", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "num_gpus" in err
    assert main(["evaluate", "--model", str(tmp_path), "--samples", str(tmp_path)]) == 2
    assert "metadata.json" in capsys.readouterr().err
    assert main(["generate", "--n", "5", "--out", str(tmp_path / "x"), "--hardware", "a100-90gb"]) == 2
    assert "did you mean" in capsys.readouterr().err


def test_train_with_tuning_and_mlflow(tmp_path, tiny_samples, capsys, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    out = tmp_path / "m"
    assert main(["train", "--samples", str(tiny_samples), "--out", str(out), "--n-estimators", "20",
                 "--tune-trials", "2", "--jobs", "1", "--mlflow", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tuning"]["trials"] == 2 and "max_depth" in data["tuning"]["best_params"]
    assert data["mlflow_model_uri"].startswith(("runs:/", "models:/"))
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["hyperparameters"]["max_depth"] == data["tuning"]["best_params"]["max_depth"]


def _damaged_copy(tiny_model, tmp_path, damage) -> str:
    import shutil

    folder = tmp_path / "damaged"
    shutil.copytree(tiny_model.path, folder)
    damage(folder)
    return str(folder)


def _job_file(tmp_path) -> str:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "model": {"num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 51200,
                  "seq_length": 1024},
        "training": {"global_batch_size": 64, "micro_batch_size": 1, "precision": "bf16"},
        "parallel": {"tp": 2, "pp": 2, "dp": 2}, "cluster": {"gpu": "a100-80gb", "num_gpus": 8}}))
    return str(job)


def _garbage_booster(folder) -> None:
    (folder / "iteration_time.ubj").write_bytes(b"not a model\n")


def _truncated_booster(folder) -> None:
    path = folder / "peak_memory.ubj"
    path.write_bytes(path.read_bytes()[:200])


def _missing_booster(folder) -> None:
    (folder / "iteration_time.ubj").unlink()


def _metadata_without_features(folder) -> None:
    meta = json.loads((folder / "metadata.json").read_text())
    del meta["feature_names"]
    (folder / "metadata.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(("damage", "expected"), [
    (_garbage_booster, "iteration_time.ubj is not a readable XGBoost model"),
    (_truncated_booster, "peak_memory.ubj is not a readable XGBoost model"),
    (_missing_booster, "iteration_time.ubj is missing"),
    (_metadata_without_features, "'feature_names' (the feature names) is missing"),
])
def test_a_damaged_model_folder_is_one_line_in_predict(tiny_model, tmp_path, capsys, damage,
                                                       expected) -> None:
    folder = _damaged_copy(tiny_model, tmp_path, damage)
    assert main(["predict", "--model", folder, _job_file(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert expected in err and "retrain the model" in err
