"""The surrogate's commands as functions: train, evaluate, predict and retrain on folders.

Each returns plain data (a report dict) and leaves rendering and tracking to the caller
(vtrain_ml.cli.surrogate, vtrain_ml.tracking).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.errors import DataError
from simulator.fileio import read_json_file
from simulator.job.catalog import resolve_hardware
from simulator.job.loaders import load_job
from surrogate.dataset import data_hash, manifest_hardware, read_manifest, read_samples
from surrogate.encoding import OutOfSpaceWarning
from surrogate.evaluate import baseline_metrics, evaluate
from surrogate.model import Surrogate
from surrogate.splits import train_valid_test

TEST_FRACTION = 0.15


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    tune_trials: int = 0
    n_estimators: int = 14  # Surrogate's default (see its docstring)
    test_fraction: float = TEST_FRACTION
    xgb_params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainResult:
    model: Surrogate
    path: Path
    report: dict[str, Any]
    test: pd.DataFrame  # held-out rows with predictions, for plots


def _quiet_evaluate(model: Surrogate, df: pd.DataFrame) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        return evaluate(model, df)


def train(samples: str | Path, out: str | Path, config: TrainConfig = TrainConfig()) -> TrainResult:
    """Fit on the samples' training model shapes, score on held-out shapes, save to `out`."""
    from surrogate.tuning import tune

    manifest = read_manifest(samples)
    hardware = manifest_hardware(manifest)
    df = read_samples(samples)
    fit_df, test_df = train_valid_test(df, config.test_fraction, config.seed)
    params = dict(config.xgb_params)
    tuning: dict[str, Any] = {}
    if config.tune_trials > 0:
        began = time.perf_counter()
        best, score = tune(fit_df, hardware, config.tune_trials, config.seed, config.n_estimators)
        params.update(best)
        tuning = {"trials": config.tune_trials, "best_params": best, "validation_mape": score,
                  "seconds": time.perf_counter() - began}
    model = Surrogate(seed=config.seed, n_estimators=config.n_estimators, **params)
    began = time.perf_counter()
    model.fit(fit_df, hardware)
    seconds = time.perf_counter() - began
    model.hardware_sources_ = {n: e.get("source", n) for n, e in manifest.get("hardware", {}).items()}
    metrics = _quiet_evaluate(model, test_df)
    report = {"n_samples": len(df), "n_fit": len(fit_df), "n_test": len(test_df),
              "train_seconds": seconds, "best_iterations": model.best_iterations_,
              "test": metrics, "baseline": baseline_metrics(fit_df, test_df), "tuning": tuning}
    extra = {"space": manifest.get("space"), "samples": str(samples),
             "training_data_hash": data_hash(df), "test_metrics": _headline(metrics),
             "train_seconds": seconds, "tuning": tuning}
    path = model.save(out, extra)
    test = test_df.assign(**{f"predicted_{k}": v for k, v in model.predict(
        test_df).items()}) if len(test_df) else test_df
    return TrainResult(model, path, report, test)


def _headline(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k != "by_region"}


def evaluate_folder(model_path: str | Path, samples: str | Path, allow_stale: bool = False) -> dict[str, Any]:
    model = Surrogate.load(model_path, allow_stale)
    return _quiet_evaluate(model, read_samples(samples))


def predict_job(model_path: str | Path, job_file: str | Path, allow_stale: bool = False) -> dict[str, Any]:
    """Prediction for one job file; an out-of-space job is predicted with a warning."""
    model = Surrogate.load(model_path, allow_stale)
    job = load_job(job_file)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OutOfSpaceWarning)
        row = model.predict([job]).iloc[0]
    return {"iteration_time_s": float(row["iteration_time_s"]),
            "peak_memory_bytes": float(row["peak_memory_bytes"]),
            "fits_in_memory": bool(row["fits_in_memory"]),
            "memory_capacity_bytes": job.hardware.memory_bytes,
            "warnings": [str(w.message) for w in caught if issubclass(w.category, OutOfSpaceWarning)]}


@dataclass(frozen=True)
class RetrainConfig:
    hardware: str
    n: int | None = None
    seed: int = 0
    jobs: int = -1
    resume: bool = False
    progress: bool = True


def retrain(model_path: str | Path, out: str | Path, config: RetrainConfig,
            samples_out: str | Path | None = None) -> dict[str, Any]:
    """Regenerate the old model's space under a new hardware profile, train, compare errors."""
    from surrogate.artifact import hardware_source
    from surrogate.generate import GenerateConfig, generate
    from surrogate.space import space_from_dict

    old, meta = _old_model(Path(model_path))
    if not meta.get("space"):
        raise DataError(f"{model_path} records no space (trained without a samples manifest); "
                        f"generate and train a new model instead")
    spec = resolve_hardware(config.hardware)
    space = space_from_dict(meta["space"]).with_hardware((config.hardware,))
    n = config.n or int(meta.get("n_train", 0) / (1 - TEST_FRACTION)) or 1000
    samples = Path(samples_out) if samples_out else Path(out) / "samples"
    gen = generate(GenerateConfig(space, {spec.name: spec}, n, config.seed, jobs=config.jobs,
                                  sources={spec.name: hardware_source(config.hardware)}),
                   samples, resume=config.resume, progress=config.progress)
    result = train(samples, out, TrainConfig(seed=config.seed,
                                             xgb_params=_tuned(meta.get("hyperparameters", {}))))
    test = result.test[[c for c in result.test.columns if not c.startswith("predicted_")]]
    old_on_new = _quiet_evaluate(_renamed(old, spec.name), test) if old is not None else None
    return {"samples": str(samples), "samples_per_s": gen.samples_per_s, "model": str(result.path),
            "old_hardware_hash": old.hardware_hashes_ if old is not None else None,
            "new_hardware_hash": result.model.hardware_hashes_,
            "old_schema_version": meta.get("schema_version"),
            "old_model_on_new_test": _headline(old_on_new) if old_on_new is not None else None,
            "new_model_on_new_test": result.report["test"],
            "train_seconds": result.report["train_seconds"]}


def _old_model(folder: Path) -> tuple[Surrogate | None, dict[str, Any]]:
    """The model to retrain and its metadata. A model saved by an older schema cannot predict
    with this vtrain-ml's features (so it is not compared), but its space, size and
    hyperparameters are all `retrain` needs: exactly the case retraining is for."""
    from surrogate.artifact import METADATA, SCHEMA_VERSION

    data = read_json_file(folder / METADATA, DataError, f"{folder} is not a surrogate model folder "
                          f"(no {METADATA})", "train a new model instead")
    if isinstance(data, dict) and data.get("schema_version") != SCHEMA_VERSION:
        return None, data
    old = Surrogate.load(folder, allow_stale=True)
    return old, old.metadata_


def _tuned(hp: dict[str, Any]) -> dict[str, Any]:
    skip = {"seed", "n_estimators", "early_stopping_rounds", "validation_fraction", "memory_estimators",
            "validation_split"}
    return {k: v for k, v in hp.items() if k not in skip}


def _renamed(model: Surrogate, name: str) -> Surrogate:
    """The old model answering for GPU `name` with its own (old) hardware numbers."""
    if name not in model.hardware_ and len(model.hardware_) == 1:
        (spec,) = model.hardware_.values()
        model.hardware_ = {name: spec}
        model.hardware_hashes_ = {name: next(iter(model.hardware_hashes_.values()))}
    return model
