"""The surrogate as the search uses it: cached predictions, a growing exact training set, refits.

The search's surrogate gets better where the search looks: every exact evaluation (the focused
initial sample and each verified candidate) becomes a training row, and `refit` trains a fresh
model on all of them. A surrogate loaded from a file is used as given until the exact rows are
numerous enough (`min_rows`) to train a focused one.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import pandas as pd

from vtrain_ml.planner.evaluation import Evaluation, evaluation_from_time
from vtrain_ml.planner.space import Candidate

log = logging.getLogger(__name__)

TARGET_COLUMNS = ("iteration_time_s", "peak_memory_bytes", "fits_in_memory", "cost_per_iteration_usd", "mfu")


class SurrogateModel(Protocol):
    """What the search needs of `surrogate.model.Surrogate`."""

    def fit(self, df: pd.DataFrame) -> Any: ...

    def predict(self, jobs_or_df: Any) -> pd.DataFrame: ...


def job_records(candidates: Sequence[Candidate]) -> pd.DataFrame:
    from surrogate.features import job_to_record

    return pd.DataFrame([job_to_record(c.job) for c in candidates if c.job is not None])


def training_rows(candidates: Sequence[Candidate], evaluations: Sequence[Evaluation]) -> pd.DataFrame:
    """Surrogate training rows: the candidates' job records plus their exact targets."""
    records = job_records(candidates)
    targets = pd.DataFrame([{c: getattr(e, c) for c in TARGET_COLUMNS} for e in evaluations])
    return pd.concat([records.reset_index(drop=True), targets], axis=1)


class Scorer:
    """Predicts `Evaluation`s of candidates with the current surrogate."""

    def __init__(self, factory: Callable[[], SurrogateModel], model: SurrogateModel | None = None,
                 min_rows: int = 8) -> None:
        self.factory = factory
        self.model_ = model
        self.min_rows = min_rows
        self.data_ = pd.DataFrame()
        self.refits_ = 0
        self.fit_seconds_: list[float] = []  # wall time of each refit (the first pays the imports)
        self._cache: dict[str, Evaluation] = {}
        self._given = model is not None

    @property
    def given(self) -> bool:
        """A surrogate was given (`--surrogate`), not trained by the search."""
        return self._given

    @property
    def ready(self) -> bool:
        return self.model_ is not None

    def add(self, candidates: Sequence[Candidate], evaluations: Sequence[Evaluation]) -> None:
        if candidates:
            self.data_ = pd.concat([self.data_, training_rows(candidates, evaluations)], ignore_index=True)

    def refit(self) -> None:
        """Train a fresh surrogate on every exact row (a given one stays until rows suffice)."""
        if len(self.data_) < self.min_rows and (self._given or len(self.data_) == 0):
            return
        began = time.perf_counter()
        self.model_ = self.factory().fit(self.data_)
        self.fit_seconds_.append(time.perf_counter() - began)
        self.refits_ += 1
        self._cache.clear()
        log.debug("surrogate refit #%d on %d exact rows", self.refits_, len(self.data_))

    def predict_columns(self, columns: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """Predicted (iteration time s, peak memory bytes) of arrays of job columns."""
        assert self.model_ is not None, "refit() or a given surrogate is needed before predict_columns()"
        return predict_columns(self.model_, columns)

    def predict(self, candidates: list[Candidate]) -> list[Evaluation]:
        todo = [c for c in dict.fromkeys(c.key for c in candidates) if c not in self._cache]
        if todo:
            assert self.model_ is not None, "refit() or a given surrogate is needed before predict()"
            by_key = {c.key: c for c in candidates}
            batch = [by_key[k] for k in todo]
            with warnings.catch_warnings():
                # a search proposes plans beyond its focused sample by design; the exact
                # verification, not this warning, is what guards against extrapolation
                warnings.simplefilter("ignore", UserWarning)
                table = self.model_.predict(job_records(batch))
            for cand, time_s, peak in zip(batch, table["iteration_time_s"], table["peak_memory_bytes"],
                                          strict=True):
                assert cand.job is not None
                self._cache[cand.key] = evaluation_from_time(cand.job, max(float(time_s), 1e-9), float(peak))
        return [self._cache[c.key] for c in candidates]


def predict_columns(model: SurrogateModel, columns: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(iteration time s, peak memory bytes) of arrays of job columns: the surrogate's batch path
    (`Surrogate.predict_arrays`) when it has one, else its `predict` on a table."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # extrapolation: verification guards it
        fast = getattr(model, "predict_arrays", None)
        if fast is not None:
            seconds, memory, _ = fast(columns)
            return np.asarray(seconds, dtype=float), np.asarray(memory, dtype=float)
        from surrogate.columns import as_array

        table = model.predict(pd.DataFrame({c: as_array(v) for c, v in columns.items()}))
    return table["iteration_time_s"].to_numpy(dtype=float), table["peak_memory_bytes"].to_numpy(dtype=float)
