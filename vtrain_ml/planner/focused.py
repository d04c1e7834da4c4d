"""The focused surrogate a search trains on its own exact samples.

`surrogate.model.Surrogate` stops boosting on a validation split *by model shape*, so that the
stopping point reflects unseen models. A layout search of one fixed model has a single shape, for
which that split is undefined; there the question is unseen *layouts* of this model, and a seeded
row split is the right one (`surrogate.splits.ValidationSplit.AUTO`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from simulator.job.specs import HardwareSpec
from surrogate.model import Surrogate
from surrogate.splits import ValidationSplit


class FocusedSurrogate(Surrogate):
    """Defaults sized for a few dozen to a few thousand rows, refit many times in one search:
    fewer boosting rounds, earlier stopping, one thread (small matrices do not parallelize), and
    early stopping validated on held-out layouts when the samples hold one model shape."""

    def __init__(self, seed: int = 0, n_estimators: int = 400, early_stopping_rounds: int = 40,
                 validation_fraction: float = 0.15, n_jobs: int = 1,
                 hardware: Mapping[str, HardwareSpec] | None = None,
                 validation_split: str = ValidationSplit.AUTO.value, **xgb_params: Any) -> None:
        super().__init__(seed=seed, n_estimators=n_estimators, early_stopping_rounds=early_stopping_rounds,
                         validation_fraction=validation_fraction, n_jobs=n_jobs,
                         validation_split=validation_split, **xgb_params)
        self.hardware = hardware  # the search's GPU spec, which may come from a file, not the catalog

    def fit(self, df: pd.DataFrame, hardware: Any = None) -> FocusedSurrogate:
        super().fit(df, hardware or self.hardware)
        return self


__all__ = ["FocusedSurrogate"]
