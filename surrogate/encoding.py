"""Job columns -> the model's feature matrix, and the trained space's bounds (out-of-space check).

Features are the raw fields (categoricals as fixed codes, booleans as 0/1; the GPU enters only
through its hardware numbers, so a model can be retrained on a new profile of the same name)
plus the physics features of `surrogate.physics`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from simulator.errors import DataError
from simulator.specs import HardwareSpec
from surrogate.columns import distinct, factorize
from surrogate.features import BOOLEAN_COLUMNS, CATEGORICAL_COLUMNS, JOB_COLUMNS
from surrogate.physics import PRECISIONS, RECOMPUTE, SCHEDULES, physics_columns

CODES: dict[str, tuple[str, ...]] = {"precision": PRECISIONS, "recompute": RECOMPUTE,
                                     "schedule": SCHEDULES}
RAW_FEATURES = tuple(c for c in JOB_COLUMNS if c != "gpu")
NUMERIC_COLUMNS = tuple(c for c in JOB_COLUMNS if c not in CATEGORICAL_COLUMNS + BOOLEAN_COLUMNS)


class OutOfSpaceWarning(UserWarning):
    """A predicted job lies outside the space the model was trained on."""


def check_columns(columns: Mapping[str, Any] | set[str], where: str) -> None:
    missing = [c for c in JOB_COLUMNS if c not in columns]
    if missing:
        raise DataError(f"{where} lacks column(s) {', '.join(missing)}; expected {', '.join(JOB_COLUMNS)}")


def _code(values: Any, column: str) -> np.ndarray:
    choices = CODES[column]
    column_values = factorize(values)
    out = column_values.lookup(lambda u: float(choices.index(u)) if u in choices else np.nan)
    bad = sorted(str(u) for u in column_values.uniques if u not in choices)
    if bad:
        raise DataError(f"column {column} has unknown value(s) {', '.join(bad)}; use {', '.join(choices)}")
    return out


def feature_matrix(columns: Mapping[str, Any],
                   hardware: Mapping[str, HardwareSpec] | None) -> tuple[list[str], np.ndarray]:
    """(feature names, float32 matrix rows x features) of arrays of `JOB_COLUMNS` values.

    The matrix is column-major (Fortran order): filled feature by feature into contiguous rows
    of its transpose. XGBoost's `inplace_predict` reads strided arrays and predicts the same
    numbers from either order (tests/surrogate_tests/test_fast_paths.py), so the transposing
    copy (about a fifth of the feature time on 100k rows) is not made."""
    physics = physics_columns(columns, hardware)
    names = [*RAW_FEATURES, *physics]
    n = len(columns["num_layers"])
    by_feature = np.empty((len(names), n), dtype=np.float32)
    for j, c in enumerate(RAW_FEATURES):
        by_feature[j] = _code(columns[c], c) if c in CODES else np.asarray(columns[c], dtype=float)
    for j, values in enumerate(physics.values(), start=len(RAW_FEATURES)):
        by_feature[j] = values
    return names, by_feature.T


def space_bounds(columns: Mapping[str, Any]) -> dict[str, Any]:
    """Per column: [min, max] of numbers, or the set of values seen (categoricals, booleans)."""
    bounds: dict[str, Any] = {}
    for c in JOB_COLUMNS:
        if c in NUMERIC_COLUMNS:
            values = np.asarray(columns[c])
            bounds[c] = [float(values.min()), float(values.max())]
        else:
            bounds[c] = sorted(set(distinct(columns[c])), key=str)
    return bounds


def out_of_space(columns: Mapping[str, Any], bounds: Mapping[str, Any]) -> dict[str, str]:
    """Column -> description of the rows outside the trained space (empty when all inside)."""
    problems: dict[str, str] = {}
    for c, bound in bounds.items():
        if c in NUMERIC_COLUMNS:
            lo, hi = bound
            values = np.asarray(columns[c])
            if len(values) == 0 or (lo <= values.min() and values.max() <= hi):
                continue  # two reductions decide the common case; the detail only when needed
            v = values.astype(float)
            bad = (v < lo) | (v > hi)
            if bad.any():
                problems[c] = f"{int(bad.sum())} row(s) outside the trained range [{lo:g}, {hi:g}] " \
                              f"(e.g. {v[bad][0]:g})"
        else:
            bad_values = set(distinct(columns[c])) - set(bound)
            if bad_values:
                problems[c] = f"value(s) {', '.join(map(str, sorted(bad_values, key=str)))} never seen " \
                              f"in training (trained on {', '.join(map(str, bound))})"
    return problems


def warn_out_of_space(columns: Mapping[str, Any], bounds: Mapping[str, Any]) -> None:
    problems = out_of_space(columns, bounds)
    if problems:
        detail = "; ".join(f"{c}: {d}" for c, d in problems.items())
        warnings.warn(f"outside the surrogate's trained space, predictions extrapolate -- {detail}",
                      OutOfSpaceWarning, stacklevel=3)


def encode_record(record: Mapping[str, Any], physics: Mapping[str, float], width: int) -> np.ndarray:
    """(1, features) float32 row of one record, in `feature_matrix`'s column order."""
    raw = [float(CODES[c].index(str(record[c]))) if c in CODES else float(record[c])  # type: ignore[arg-type]
           for c in RAW_FEATURES]
    row = np.fromiter((*raw, *physics.values()), dtype=np.float32, count=width)
    return row.reshape(1, width)


def warn_out_of_space_record(record: Mapping[str, Any], bounds: Mapping[str, Any]) -> None:
    """`warn_out_of_space` for one record, on Python scalars."""
    problems = []
    for c, bound in bounds.items():
        value = record[c]
        if c in NUMERIC_COLUMNS:
            if not bound[0] <= float(value) <= bound[1]:
                problems.append(f"{c}: {value} outside the trained range [{bound[0]:g}, {bound[1]:g}]")
        elif value not in bound:
            problems.append(f"{c}: value {value} never seen in training (trained on "
                            f"{', '.join(map(str, bound))})")
    if problems:
        detail = "; ".join(problems)
        warnings.warn(f"outside the surrogate's trained space, predictions extrapolate -- {detail}",
                      OutOfSpaceWarning, stacklevel=3)
