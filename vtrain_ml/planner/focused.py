"""The focused surrogate a search trains on its own exact samples.

`surrogate.model.Surrogate` stops boosting on a validation split *by model shape*, so that the
stopping point reflects unseen models. A layout search of one fixed model has a single shape, for
which that split is undefined; there the question is unseen *layouts* of this model, and a seeded
row split is the right one. `FocusedSurrogate` is `Surrogate` with that fallback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd

from simulator.specs import HardwareSpec
from surrogate.model import Surrogate
from surrogate.splits import group_split, model_groups


def row_split(df: pd.DataFrame, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) row indices; at least one validation row."""
    order = np.random.default_rng(seed).permutation(len(df))
    n_valid = max(1, round(fraction * len(df)))
    return np.sort(order[n_valid:]), np.sort(order[:n_valid])


class FocusedSurrogate(Surrogate):
    """Defaults sized for a few dozen to a few thousand rows, refit many times in one search:
    fewer boosting rounds, earlier stopping, one thread (small matrices do not parallelize)."""

    def __init__(self, seed: int = 0, n_estimators: int = 400, early_stopping_rounds: int = 40,
                 validation_fraction: float = 0.15, n_jobs: int = 1,
                 hardware: Mapping[str, HardwareSpec] | None = None, **xgb_params: Any) -> None:
        super().__init__(seed=seed, n_estimators=n_estimators, early_stopping_rounds=early_stopping_rounds,
                         validation_fraction=validation_fraction, n_jobs=n_jobs, **xgb_params)
        self.hardware = hardware  # the search's GPU spec, which may come from a file, not the catalog

    def fit(self, df: pd.DataFrame, hardware: Any = None) -> FocusedSurrogate:
        hardware = hardware or self.hardware
        if len(np.unique(model_groups(df))) >= 2:
            super().fit(df, hardware)
            return self
        # One model shape: the same fit, validated on held-out layouts instead of held-out models.
        # (Interim until surrogate.splits.group_split offers this fallback itself.)
        with mock.patch("surrogate.model.group_split", row_split):
            super().fit(df, hardware)
        return self


__all__ = ["FocusedSurrogate", "group_split", "row_split"]
