"""The focused surrogate a search trains on its own exact samples.

`surrogate.model.Surrogate` stops boosting on a validation split *by model shape*, so that the
stopping point reflects unseen models. A layout search of one fixed model has a single shape, for
which that split is undefined; there the question is unseen *layouts* of this model, and a seeded
row split is the right one (`surrogate.splits.ValidationSplit.AUTO`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from simulator.job.specs import HardwareSpec
from surrogate.model import Surrogate
from surrogate.splits import ValidationSplit


class FocusedSurrogate(Surrogate):
    """Defaults sized for a few dozen to a few thousand rows, refit many times in one search:
    fewer boosting rounds, earlier stopping, one thread (small matrices do not parallelize), and
    early stopping validated on held-out layouts when the samples hold one model shape.
    `predict_jobs` threads score a large batch (`predict_arrays`: a screened space), where rows
    do parallelize."""

    def __init__(self, seed: int = 0, n_estimators: int = 400, early_stopping_rounds: int = 40,
                 validation_fraction: float = 0.15, n_jobs: int = 1,
                 hardware: Mapping[str, HardwareSpec] | None = None,
                 validation_split: str = ValidationSplit.AUTO.value, predict_jobs: int = 1,
                 **xgb_params: Any) -> None:
        super().__init__(seed=seed, n_estimators=n_estimators, early_stopping_rounds=early_stopping_rounds,
                         validation_fraction=validation_fraction, n_jobs=n_jobs,
                         validation_split=validation_split, **xgb_params)
        self.hardware = hardware  # the search's GPU spec, which may come from a file, not the catalog
        self.predict_jobs = predict_jobs

    def fit(self, df: pd.DataFrame, hardware: Any = None) -> FocusedSurrogate:
        super().fit(df, hardware or self.hardware)
        return self

    def predict_arrays(self, columns: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        fit_jobs, self.n_jobs = self.n_jobs, self.predict_jobs
        try:
            return super().predict_arrays(columns)
        finally:
            self.n_jobs = fit_jobs


__all__ = ["FocusedSurrogate"]
