"""`Surrogate`: two gradient-boosted models of the exact simulator (iteration time, peak memory).

Targets are residuals in log space against the closed-form baselines of `surrogate.physics`:
log(simulated time / estimated time) and log(simulated memory / estimated memory), so errors are
relative and the trees only learn what the roofline misses. Early stopping uses a validation
split by *model shape* (all layouts of one model on the same side), so the stopping point
reflects unseen models. Fits-in-memory is predicted memory <= the GPU's capacity.

A target whose closed form already matches the simulator on the validation split (RMS log error
<= `closed_form_tolerance`, 0.1% by default) gets no trees at all: the simulator's memory model is
a closed form, which `surrogate.physics.memory` reproduces to ~0.006% on the default space, and 14
trees fitting the remaining 1e-4 noise cost a fifth of a batch prediction's tree time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.errors import DataError, ProfileError
from simulator.job.catalog import hardware_fingerprint
from simulator.job.specs import GiB, HardwareSpec, Job
from simulator.memory.fit import required_bytes
from surrogate.allocator import retain_freed_memory
from surrogate.columns import distinct, factorized_rows, frame_columns
from surrogate.encoding import (
    check_columns,
    feature_matrix,
    feature_names,
    merged_out_of_space,
    out_of_space_parts,
    space_bounds,
    warn_out_of_space_parts,
)
from surrogate.features import (
    CATEGORICAL_COLUMNS,
    JOB_COLUMNS,
    columns_with_new_defaults,
    job_to_record,
    with_new_defaults,
)
from surrogate.splits import ValidationSplit, validation_split

log = logging.getLogger(__name__)

SMALL_BATCH = 1024  # rows below which prediction runs single-threaded
PARALLEL_ROWS = 20_000  # rows from which a batch is predicted in row chunks on threads
# rows up to which the trees are walked by `surrogate.forest` (the same margins to the bit) rather
# than by XGBoost, whose call costs ~150 us per booster whatever the rows (bench_surrogate.py)
FOREST_ROWS = 8
OUTPUTS = ("iteration_time_s", "peak_memory_bytes", "fits_in_memory")
DEFAULT_PARAMS: dict[str, Any] = {
    "max_depth": 8, "learning_rate": 0.4, "subsample": 1.0, "colsample_bytree": 1.0,
    "min_child_weight": 1.0, "reg_lambda": 1.0, "tree_method": "hist", "max_bin": 128,
}


def _as_columns(columns: Mapping[str, Any], defer: bool = False) -> Mapping[str, Any]:
    """Columns given as arrays (jobs' records, a search's batch): nothing Arrow holds to defer."""
    return columns


def _columns(df: pd.DataFrame, defer: bool = False) -> dict[str, Any]:
    """`JOB_COLUMNS` of a table as numpy arrays, the categorical ones factorized once (`defer`:
    those Arrow holds left to `factorized_rows`, per row chunk)."""
    df = with_new_defaults(df)  # a table saved before the MoE / cp columns: dense jobs
    check_columns(set(df.columns), "table")
    return frame_columns(df, JOB_COLUMNS, CATEGORICAL_COLUMNS, defer=defer)


class Surrogate:
    """Predicts iteration time, peak memory and fits-in-memory of jobs (scikit-learn style).

    Parameters are XGBoost's (`xgb_params` override `DEFAULT_PARAMS`); `n_estimators` is the
    most boosting rounds (`memory_estimators` for memory, whose closed form is nearly exact),
    `early_stopping_rounds` stops on the validation split. The defaults favour prediction speed
    (few, strong trees: the physics baseline leaves little to learn); more rounds at a lower
    learning rate are more accurate and slower (see bench/bench_surrogate.py). 14 rounds of depth
    8 on all rows and columns: on 100k samples of the default space, held-out MAPE 1.50% (P95
    4.8%, mean of seeds 0-2) against 1.45% (4.7%) with 16 rounds, 1.39% (4.5%) with 20 and
    1.58% (5.1%) with 12, at ~1.35 ms per round and 50k rows on one core (the prediction budget
    of 1M rows/s is ~100 ms per 50k; docs/speed.md, "Surrogate prediction"). Subsampling 80% of
    rows and columns, the previous default, gave 1.56% (5.1%) at 16 rounds. Without subsampling
    the fit is the same for every seed.
    `closed_form_tolerance`: see the module docstring (0 always trains both boosters).
    """

    def __init__(self, seed: int = 0, n_estimators: int = 14, early_stopping_rounds: int = 20,
                 validation_fraction: float = 0.15, n_jobs: int = -1, memory_estimators: int = 30,
                 validation_split: str = "model", closed_form_tolerance: float = 1e-3,
                 **xgb_params: Any) -> None:
        self.seed = seed
        self.n_estimators = n_estimators
        self.memory_estimators = memory_estimators
        self.early_stopping_rounds = early_stopping_rounds
        self.validation_fraction = validation_fraction
        self.validation_split = validation_split
        self.closed_form_tolerance = closed_form_tolerance
        self.n_jobs = n_jobs
        self.xgb_params = xgb_params
        self.allow_stale = False
        self.metadata_: dict[str, Any] = {}

    # -- fitting ---------------------------------------------------------------------------
    def _params(self) -> dict[str, Any]:
        import os

        threads = len(os.sched_getaffinity(0)) if self.n_jobs == -1 else self.n_jobs
        return {**DEFAULT_PARAMS, **self.xgb_params, "seed": self.seed, "nthread": threads,
                "objective": "reg:squarederror"}

    def fit(self, df: pd.DataFrame, hardware: Mapping[str, HardwareSpec] | None = None) -> Surrogate:
        """Fit on `JOB_COLUMNS` + ``iteration_time_s`` and ``peak_memory_bytes`` (a samples table)."""
        import xgboost as xgb

        for column in ("iteration_time_s", "peak_memory_bytes"):
            if column not in df.columns:
                raise DataError(f"training table lacks target column {column}; use a samples folder "
                                f"from generate")
        columns = _columns(df)
        self.hardware_ = self._hardware_for(columns, hardware)
        self.hardware_hashes_ = {n: hardware_fingerprint(s) for n, s in self.hardware_.items()}
        self.hardware_sources_ = {n: n for n in self.hardware_}
        names, x = feature_matrix(columns, self.hardware_)
        self.feature_names_ = names
        self.bounds_ = space_bounds(columns)
        train, valid = validation_split(df, self.validation_fraction, self.seed,
                                        ValidationSplit(self.validation_split))
        self.boosters_: dict[str, Any] = {}
        self.best_iterations_: dict[str, int] = {}
        for key, target, base in self._targets(df, x, names):
            residual = target - base
            if float(np.sqrt(np.mean(residual[valid] ** 2))) <= self.closed_form_tolerance:
                self.best_iterations_[key] = 0  # the closed form alone: no booster
                continue
            dtrain = xgb.DMatrix(x[train], label=residual[train], feature_names=names)
            dvalid = xgb.DMatrix(x[valid], label=residual[valid], feature_names=names)
            rounds = self.n_estimators if key == "time" else min(self.n_estimators, self.memory_estimators)
            booster = xgb.train(self._params(), dtrain, num_boost_round=rounds,
                                evals=[(dvalid, "valid")], early_stopping_rounds=self.early_stopping_rounds,
                                verbose_eval=False)
            self.best_iterations_[key] = int(booster.best_iteration)
            self.boosters_[key] = booster[: booster.best_iteration + 1]
        self.n_train_ = len(df)
        return self

    @staticmethod
    def _targets(df: pd.DataFrame, x: np.ndarray,
                 names: list[str]) -> list[tuple[str, np.ndarray, np.ndarray]]:
        time = np.log(df["iteration_time_s"].to_numpy(dtype=float))
        memory = np.log(df["peak_memory_bytes"].to_numpy(dtype=float))
        return [("time", time, x[:, names.index("est_log_time_s")].astype(float)),
                ("memory", memory, x[:, names.index("est_log_memory_bytes")].astype(float))]

    @staticmethod
    def _hardware_for(columns: Mapping[str, Any],
                      hardware: Mapping[str, HardwareSpec] | None) -> dict[str, HardwareSpec]:
        from surrogate.hardware import catalog_hardware

        names = sorted({str(g) for g in distinct(columns["gpu"])})
        return {n: hardware[n] if hardware and n in hardware else catalog_hardware(n) for n in names}

    # -- prediction ------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "boosters_"):
            raise DataError("this Surrogate is not fitted; call fit() or Surrogate.load(path)")

    def _check_job_hardware(self, jobs: Sequence[Job]) -> None:
        verified = self.__dict__.setdefault("_verified_hardware", {})
        for job in jobs:
            if verified.get(id(job.hardware), (None,))[0] is job.hardware:
                continue  # the same (immutable) spec object already passed the guard
            name = job.hardware.name
            if name not in self.hardware_hashes_:
                raise ProfileError(f"the surrogate was trained for GPU(s) {', '.join(self.hardware_)}, "
                                   f"not {name}; retrain it with --hardware {name}")
            got = hardware_fingerprint(job.hardware)
            if got != self.hardware_hashes_[name] and not self.allow_stale:
                raise ProfileError(
                    f"hardware profile {name} of the job (hash {got}) differs from the one the "
                    f"surrogate was trained on (hash {self.hardware_hashes_[name]}); retrain it "
                    f"(python -m vtrain_ml.surrogate retrain) or pass --allow-stale / allow_stale=True")
            if len(verified) > 64:
                verified.clear()
            verified[id(job.hardware)] = (job.hardware,)

    def _job_columns(self, jobs: Sequence[Job]) -> dict[str, np.ndarray]:
        self._check_job_hardware(jobs)
        records = [job_to_record(j) for j in jobs]
        return {c: np.array([r[c] for r in records]) for c in JOB_COLUMNS}

    def _check_gpus(self, columns: Mapping[str, Any]) -> None:
        unknown = sorted({str(g) for g in distinct(columns["gpu"])} - set(self.hardware_))
        if unknown:
            raise ProfileError(f"column gpu has {', '.join(unknown)}, but the surrogate was trained for "
                               f"{', '.join(self.hardware_)}; retrain it with --hardware")

    def predict(self, jobs_or_df: pd.DataFrame | Sequence[Job] | Job) -> pd.DataFrame:
        """Columns `OUTPUTS`, one row per job (index kept for a DataFrame)."""
        self._check_fitted()
        if isinstance(jobs_or_df, Job):
            jobs_or_df = [jobs_or_df]
        if isinstance(jobs_or_df, pd.DataFrame):
            table: Any = jobs_or_df
            index: pd.Index = jobs_or_df.index
            prepare: Callable[[Any, bool], Mapping[str, Any]] = _columns
        else:
            table, index = self._job_columns(list(jobs_or_df)), pd.RangeIndex(len(jobs_or_df))
            prepare = _as_columns
        seconds, memory, capacity = self._predict_table(table, len(index), prepare)
        return pd.DataFrame({"iteration_time_s": seconds, "peak_memory_bytes": memory,
                             "fits_in_memory": self._fits(memory, capacity, table["gpu"])}, index=index)

    def _fits(self, peak: np.ndarray, capacity: np.ndarray, gpu: Any) -> np.ndarray:
        """The simulator's verdict (simulator.memory.fit) on predicted peaks (allocated + context):
        what the caching allocator must reserve for the allocated peak, plus the context, fits."""
        contexts = {name: spec.reserved_memory_GiB * GiB for name, spec in self.hardware_.items()}
        if len(set(contexts.values())) == 1:
            context: Any = next(iter(contexts.values()))
        else:
            context = np.array([contexts[str(g)] for g in np.asarray(gpu)])
        return np.asarray(required_bytes(peak - context, context) <= capacity)

    def closed_form_targets(self) -> list[str]:
        """The targets predicted by the closed form alone (no booster: see the module docstring)."""
        self._check_fitted()
        return [key for key in ("time", "memory") if key not in self.boosters_]

    def predict_one(self, job: Job) -> dict[str, Any]:
        """One job, on the low-latency path: its features computed as one row (compiled where
        numba is installed), its trees walked without XGBoost (`surrogate.forest`).

        Same numbers as `predict([job])` without a DataFrame or an XGBoost call, whose fixed
        cost per call (~350 us per booster measured on one row) exceeds the whole prediction.
        """
        from surrogate.encoding import features_of_record, warn_out_of_space_record

        self._check_fitted()
        self._check_job_hardware([job])
        record = job_to_record(job)
        serving = self._serving()
        warn_out_of_space_record(record, self.bounds_, serving["bound_checks"])
        x = features_of_record(record, serving["hw"][str(record["gpu"])], self.hardware_)
        forest = serving["forest"]
        if forest is not None:
            margins = forest.margins(x[0])
        else:
            margins = {key: float(booster.inplace_predict(x, validate_features=False)[0])
                       for key, booster in serving["single"].items()}
        time, memory = margins.get("time", 0.0), margins.get("memory", 0.0)
        seconds = float(np.exp(float(x[0, serving["i_time"]]) + time))  # numpy's, as a batch
        peak = float(np.exp(float(x[0, serving["i_memory"]]) + memory))
        context = self.hardware_[str(record["gpu"])].reserved_memory_GiB * GiB
        fits = required_bytes(peak - context, context) <= float(x[0, serving["i_capacity"]])
        return {"iteration_time_s": seconds, "peak_memory_bytes": peak, "fits_in_memory": fits}

    def _serving(self) -> dict[str, Any]:
        """What prediction derives from the fitted state, built once (again after a new fit).

        ``single``: copies of the boosters limited to one thread (for a few rows, starting
        OpenMP threads costs far more than the trees); ``forest``: the trees as numpy
        arrays for one row (None where `surrogate.forest` cannot read them); ``hw``: each GPU's
        hardware numbers; ``i_time`` / ``i_memory``: columns of the physics baselines.
        """
        from surrogate.encoding import bound_checks
        from surrogate.forest import UnsupportedTreesError, forest_of
        from surrogate.physics import HW_FIELDS, hardware_vector

        cache: dict[str, Any] | None = self.__dict__.get("_serving_cache")
        if cache is not None and cache["boosters"] is self.boosters_ and cache["bounds"] is self.bounds_:
            return cache
        cache = {"boosters": self.boosters_, "bounds": self.bounds_, "single": {},
                 "hw": {n: np.array([hardware_vector(spec)[k] for k in HW_FIELDS])
                        for n, spec in self.hardware_.items()},
                 "i_time": self._index("est_log_time_s"),
                 "i_capacity": self._index("memory_capacity_bytes"),
                 "i_memory": self._index("est_log_memory_bytes"),
                 "bound_checks": bound_checks(self.bounds_)}
        for key, booster in self.boosters_.items():
            cache["single"][key] = booster.copy()
            cache["single"][key].set_param({"nthread": 1})
        try:
            cache["forest"] = forest_of(self.boosters_) if self.boosters_ else None
        except UnsupportedTreesError as exc:
            log.info("single-job predictions use XGBoost: %s", exc)
            cache["forest"] = None
        self.__dict__["_serving_cache"] = cache
        return cache

    def _index(self, name: str) -> int:
        return self.feature_names_.index(name)

    def predict_arrays(self, columns: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(iteration time s, peak memory bytes, GPU memory bytes) of arrays of `JOB_COLUMNS`."""
        self._check_fitted()
        columns = columns_with_new_defaults(columns)  # a batch built before the MoE / cp columns
        return self._predict_table(columns, len(columns["num_layers"]), _as_columns)

    def _predict_table(self, table: Any, n: int, prepare: Callable[[Any, bool], Mapping[str, Any]]
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`predict_arrays` of a DataFrame or columns (`prepare(table, defer)` makes the
        columns; `defer`: Arrow's string columns left to each chunk).

        The columns are taken from the table once (pandas holds Python's lock for it), then a
        large batch is cut into one row chunk per thread and each thread takes its chunk
        through the string columns' encoding (Arrow's), the out-of-space check, the features
        and the one-thread trees, which release the lock: Arrow's kernels, the compiled
        kernels (nogil) and XGBoost's C calls. Preparing the pandas columns inside each thread
        made the second thread wait ~5 ms (Python's switch interval) for the lock while the
        first prepared its chunk (docs/speed.md, "Session 15"); encoding the string columns
        before the threads left the second core idle for ~3 ms of ~21 ("Session 17");
        threading only the features, with XGBoost's own OpenMP threads for the trees, measured
        175-210 ms per 100k rows against 118-130 ms with the trees in the chunks too."""
        if self.feature_names_ != feature_names():
            raise DataError("the saved model was trained on other features than this vtrain-ml "
                            "computes; retrain it")
        threads = self._params()["nthread"]
        serving = self._serving()
        parallel = threads > 1 and n >= PARALLEL_ROWS
        if n >= PARALLEL_ROWS:
            retain_freed_memory()  # the chunks' matrices, freed, stay for the next batch
        columns = prepare(table, parallel)
        if not parallel:
            self._check_gpus(columns)
            warn_out_of_space_parts(out_of_space_parts(columns, self.bounds_), self.bounds_, stacklevel=4)
            return self._predict_columns(columns, serving["single"] if n < SMALL_BATCH else self.boosters_)

        def chunk(rows: slice) -> tuple[Any, tuple[np.ndarray, ...]]:
            part = factorized_rows(columns, rows)
            self._check_gpus(part)
            return (out_of_space_parts(part, self.bounds_, numeric=False),
                    self._predict_columns(part, serving["single"]))

        bounds = np.linspace(0, n, threads + 1).astype(int)
        with ThreadPoolExecutor(threads) as pool:
            running = pool.map(chunk, [slice(a, b) for a, b in pairwise(bounds)])
            # the numeric columns' check on this thread while the chunks run: ~100 small numpy
            # reductions, which in each chunk's thread made the other wait for Python's lock
            numeric = out_of_space_parts(columns, self.bounds_, categorical=False)
            done = list(running)
        warn_out_of_space_parts(merged_out_of_space([numeric, *(parts for parts, _ in done)]),
                                self.bounds_, stacklevel=4)
        seconds, memory, capacity = (np.concatenate(arrays)
                                     for arrays in zip(*(values for _, values in done), strict=True))
        return seconds, memory, capacity

    def _predict_columns(self, columns: Mapping[str, Any], boosters: Mapping[str, Any]
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        names, x = feature_matrix(columns, self.hardware_)
        forest = self._serving()["forest"] if len(x) <= FOREST_ROWS else None
        walked = [forest.margins(np.ascontiguousarray(row)) for row in x] if forest is not None else []
        log_values = []
        for key, column in (("time", "est_log_time_s"), ("memory", "est_log_memory_bytes")):
            estimate = x[:, names.index(column)].astype(float)
            if key in boosters and walked:  # XGBoost's own margins, without its per-call cost
                estimate += np.array([m[key] for m in walked])
            elif key in boosters:  # else the closed form alone
                estimate += boosters[key].inplace_predict(x, validate_features=False)
            log_values.append(estimate)
        capacity = x[:, names.index("memory_capacity_bytes")].astype(float)
        return np.exp(log_values[0]), np.exp(log_values[1]), capacity

    # -- persistence -----------------------------------------------------------------------
    def save(self, path: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        """Write XGBoost UBJ files and metadata.json into the folder `path`."""
        from surrogate.artifact import save_artifact

        self._check_fitted()
        sources = getattr(self, "hardware_sources_", {})
        fields = {
            "feature_names": self.feature_names_,
            "hyperparameters": {"seed": self.seed, "n_estimators": self.n_estimators,
                                "memory_estimators": self.memory_estimators,
                                "closed_form_tolerance": self.closed_form_tolerance,
                                "early_stopping_rounds": self.early_stopping_rounds,
                                "validation_fraction": self.validation_fraction,
                                "validation_split": self.validation_split, **self.xgb_params},
            "best_iterations": self.best_iterations_,
            "hardware": {n: {"hash": self.hardware_hashes_[n], "source": sources.get(n, n),
                             "spec": spec.model_dump(mode="json")} for n, spec in self.hardware_.items()},
            "bounds": self.bounds_,
            "n_train": self.n_train_,
            **dict(extra or {}),
        }
        return save_artifact(Path(path), self.boosters_, self.closed_form_targets(), fields)

    @classmethod
    def load(cls, path: str | Path, allow_stale: bool = False) -> Surrogate:
        """Load a saved model; refuses a changed hardware profile unless `allow_stale`."""
        from surrogate.artifact import load_artifact

        saved = load_artifact(Path(path), allow_stale)
        meta = saved.metadata
        model = cls(**dict(meta["hyperparameters"]))
        model.allow_stale = allow_stale
        model.feature_names_ = [str(f) for f in meta["feature_names"]]
        model.boosters_ = saved.boosters
        model.best_iterations_ = dict(meta["best_iterations"])
        model.hardware_ = saved.hardware
        model.hardware_hashes_ = {n: e["hash"] for n, e in meta["hardware"].items()}
        model.hardware_sources_ = {n: e["source"] for n, e in meta["hardware"].items()}
        model.bounds_ = dict(meta["bounds"])
        model.n_train_ = int(meta["n_train"])
        model.metadata_ = meta
        return model
