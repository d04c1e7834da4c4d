"""The saved surrogate: XGBoost UBJ boosters plus ``metadata.json`` (never pickle).

metadata.json records the schema version, feature names, the hardware each GPU name was trained
with (spec, content hash and where it came from), the space, the simulator version, the
training-data hash and the test metrics. Loading checks that each hardware source still hashes the
same: a profile recalibrated since training makes the model stale, which is refused unless
`allow_stale`.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.catalog import data_dir, hardware_fingerprint, read_yaml, resolve_hardware
from simulator.errors import ConfigError, DataError, ProfileError
from simulator.fileio import read_json_file, write_json_atomic
from simulator.specs import HardwareSpec, parse

if TYPE_CHECKING:
    from surrogate.model import Surrogate

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
METADATA = "metadata.json"
BOOSTER_FILES = {"time": "iteration_time.ubj", "memory": "peak_memory.ubj"}


def _save_booster(booster: Any, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        booster.save_model(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_surrogate(model: Surrogate, folder: Path, extra: Mapping[str, Any]) -> Path:
    """Boosters first, metadata last: a folder with metadata.json is complete."""
    from surrogate.dataset import simulator_version

    folder.mkdir(parents=True, exist_ok=True)
    for key, name in BOOSTER_FILES.items():
        _save_booster(model.boosters_[key], folder / name)
    sources = getattr(model, "hardware_sources_", {})
    metadata = {
        "schema_version": SCHEMA_VERSION,
        "kind": "vtrain-ml surrogate",
        "feature_names": model.feature_names_,
        "outputs": ["iteration_time_s", "peak_memory_bytes", "fits_in_memory"],
        "targets": {"time": "log(iteration_time_s) - est_log_time_s",
                    "memory": "log(peak_memory_bytes) - est_log_memory_bytes"},
        "boosters": BOOSTER_FILES,
        "hyperparameters": {"seed": model.seed, "n_estimators": model.n_estimators,
                            "memory_estimators": model.memory_estimators,
                            "early_stopping_rounds": model.early_stopping_rounds,
                            "validation_fraction": model.validation_fraction,
                            "validation_split": model.validation_split, **model.xgb_params},
        "best_iterations": model.best_iterations_,
        "hardware": {n: {"hash": model.hardware_hashes_[n], "source": sources.get(n, n),
                         "spec": spec.model_dump(mode="json")} for n, spec in model.hardware_.items()},
        "bounds": model.bounds_,
        "n_train": model.n_train_,
        "simulator_version": simulator_version(),
        **dict(extra),
    }
    write_json_atomic(folder / METADATA, metadata)
    return folder


def read_metadata(folder: Path) -> dict[str, Any]:
    path = folder / METADATA
    data = read_json_file(path, DataError, f"{folder} is not a surrogate model folder (no {METADATA}); "
                          "train one with `python -m vtrain_ml.surrogate train`", "retrain the model")
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        version = data.get("schema_version") if isinstance(data, dict) else None
        raise DataError(f"{path} has schema_version {version}, this vtrain-ml reads "
                        f"{SCHEMA_VERSION}; retrain the model")
    return dict(data)


def current_hardware(source: str) -> HardwareSpec:
    """The hardware `source` names, read from disk now (the catalog memoizes files by path, which
    would hide an edit made since this process first read it)."""
    path = Path(source)
    if not path.is_file():
        path = data_dir() / "hardware" / f"{resolve_hardware(source).name}.yaml"
    if not path.is_file():
        return resolve_hardware(source)
    return parse(HardwareSpec, read_yaml(path), f"hardware file {path}")


def stale_hardware(metadata: Mapping[str, Any]) -> list[str]:
    """Sentences for each trained hardware whose source now hashes differently."""
    problems = []
    for name, entry in metadata["hardware"].items():
        try:
            current = hardware_fingerprint(current_hardware(entry["source"]))
        except ConfigError:
            continue  # a file that is gone cannot have changed; the stored spec is used
        if current != entry["hash"]:
            problems.append(f"{name} from {entry['source']} now hashes {current}, the model was "
                            f"trained with {entry['hash']}")
    return problems


def load_surrogate(cls: type[Surrogate], folder: Path, allow_stale: bool) -> Surrogate:
    import xgboost as xgb

    meta = read_metadata(folder)
    stale = stale_hardware(meta)
    if stale and not allow_stale:
        raise ProfileError(f"stale surrogate {folder}: hardware profile changed since training ("
                           + "; ".join(stale) + "); retrain it (python -m vtrain_ml.surrogate retrain) "
                           "or pass --allow-stale / allow_stale=True")
    for problem in stale:
        log.warning("using a stale surrogate: %s", problem)
    hp = dict(meta["hyperparameters"])
    model = cls(**hp)
    model.allow_stale = allow_stale
    model.boosters_ = {}
    for key, name in meta["boosters"].items():
        booster = xgb.Booster()
        booster.load_model(str(folder / name))
        model.boosters_[key] = booster
    model.feature_names_ = list(meta["feature_names"])
    model.best_iterations_ = dict(meta["best_iterations"])
    model.hardware_ = {n: HardwareSpec.model_validate(e["spec"]) for n, e in meta["hardware"].items()}
    model.hardware_hashes_ = {n: e["hash"] for n, e in meta["hardware"].items()}
    model.hardware_sources_ = {n: e["source"] for n, e in meta["hardware"].items()}
    model.bounds_ = dict(meta["bounds"])
    model.n_train_ = int(meta["n_train"])
    model.metadata_ = meta
    return model
