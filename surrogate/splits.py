"""Splits by model shape: every layout of one model lands on the same side.

A row split would put layouts of the same model in training and test, and the test error would
measure memorization of that model rather than generalization to new ones.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np
import pandas as pd

from simulator.errors import DataError
from surrogate.features import MODEL_COLUMNS

SHAPE_COLUMNS = (*MODEL_COLUMNS, "seq_length")


def model_groups(df: pd.DataFrame) -> np.ndarray:
    """An integer group id per row: its model shape (dims, family, vocabulary, sequence)."""
    keys = pd.util.hash_pandas_object(df[list(dict.fromkeys(SHAPE_COLUMNS))], index=False)
    return keys.to_numpy()


def group_split(df: pd.DataFrame, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, second) row indices: about `fraction` of the model shapes go to the second."""
    groups = model_groups(df)
    unique = np.unique(groups)
    if len(unique) < 2:
        raise DataError(f"the samples hold {len(unique)} model shape(s); a split by model needs at "
                        f"least 2 (generate more samples)")
    rng = np.random.default_rng(seed)
    chosen = rng.permutation(unique)[: max(1, round(fraction * len(unique)))]
    second = np.isin(groups, chosen)
    return np.flatnonzero(~second), np.flatnonzero(second)


def row_split(df: pd.DataFrame, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, second) row indices, seeded; at least one row in the second."""
    order = np.random.default_rng(seed).permutation(len(df))
    n_second = max(1, round(fraction * len(df)))
    return np.sort(order[n_second:]), np.sort(order[:n_second])


class ValidationSplit(StrEnum):
    """How the early-stopping validation rows are held out."""

    MODEL = "model"  # whole model shapes: the stopping point reflects unseen models
    ROWS = "rows"  # rows: for samples of one model (a layout search), unseen layouts
    AUTO = "auto"  # by model when there are at least two shapes, else by rows


def validation_split(df: pd.DataFrame, fraction: float, seed: int,
                     by: ValidationSplit) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) row indices held out as `by` says."""
    if by is ValidationSplit.ROWS or (by is ValidationSplit.AUTO and len(np.unique(model_groups(df))) < 2):
        return row_split(df, fraction, seed)
    return group_split(df, fraction, seed)


def train_valid_test(df: pd.DataFrame, test_fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train+validation rows, held-out test rows) split by model shape."""
    first, second = group_split(df, test_fraction, seed + 1000)
    return df.iloc[first].reset_index(drop=True), df.iloc[second].reset_index(drop=True)
