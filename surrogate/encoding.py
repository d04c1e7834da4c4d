"""Job columns -> the model's feature matrix, and the trained space's bounds (out-of-space check).

Features are the raw fields (categoricals as fixed codes, booleans as 0/1; the GPU enters only
through its hardware numbers, so a model can be retrained on a new profile of the same name)
plus the physics features of `surrogate.physics`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from simulator.errors import DataError
from simulator.jit import HAVE_NUMBA
from simulator.job.specs import HardwareSpec
from surrogate.columns import distinct, factorize, value_at
from surrogate.extended import (
    EXTENDED_FEATURES,
    EXTENDED_PHYSICS,
    baselines,
    complete_model_values,
    effective_fields,
    extended_values,
    is_plain,
    lookups,
    model_values,
    model_values_of_record,
    new_field_matrix,
    plain_values,
    record_lookups,
)
from surrogate.extended_kernel import extended_kernel
from surrogate.features import BOOLEAN_COLUMNS, CATEGORICAL_COLUMNS, JOB_COLUMNS, with_new_defaults
from surrogate.gemm_shapes import NO_TABLE, effs_table
from surrogate.kernel import PHYSICS_FEATURES, fill_features
from surrogate.matrix_io import read_columns, write_columns
from surrogate.physics import CODES, ROW_FIELDS, Hardware, hardware_of_table, hardware_table, row_field_matrix
from surrogate.records import CHOICES, NEW_COLUMNS
from surrogate.slots import DENSE_READ, M_ACTIVE_FFN, MODEL_VALUES

RAW_FEATURES = ROW_FIELDS  # the job columns but gpu, which enters through its hardware numbers
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
    """(feature names, float32 matrix rows x features) of arrays of `JOB_COLUMNS` values."""
    x = empty_features(len(columns["num_layers"]))
    fill_feature_matrix(columns, hardware, x)
    return feature_names(), x


def feature_names() -> list[str]:
    return [*RAW_FEATURES, *PHYSICS_FEATURES, *EXTENDED_FEATURES]


def empty_features(n: int) -> np.ndarray:
    """An uninitialized float32 (n, features) matrix in the order its filling writes fastest:
    row-major for the compiled kernel (one row at a time), column-major for numpy (one feature
    at a time). XGBoost's `inplace_predict` reads either and predicts the same numbers
    (tests/surrogate_tests/test_fast_paths.py), so no transposing copy is made."""
    width = len(RAW_FEATURES) + len(PHYSICS_FEATURES) + len(EXTENDED_FEATURES)
    return np.empty((n, width), dtype=np.float32, order="C" if HAVE_NUMBA else "F")


def fill_feature_matrix(columns: Mapping[str, Any], hardware: Mapping[str, HardwareSpec] | None,
                        out: np.ndarray) -> None:
    """Fill `out` (rows x `feature_names()`) with the features of arrays of `JOB_COLUMNS`; a
    one-row table as one record (`features_of_record`: the same numbers without a table's
    grouping, ~10x faster; a search scores its trials one plan at a time)."""
    if len(columns["num_layers"]) == 1:
        table, _ = hardware_table(columns["gpu"], hardware)
        out[:] = features_of_record({c: value_at(columns[c], 0) for c in JOB_COLUMNS}, table[0], hardware)
        return
    _fill_table(columns, hardware, out)


def _table_features(record: Mapping[str, Any], hardware: Mapping[str, HardwareSpec] | None) -> np.ndarray:
    """float32 (1, features) of one record through the table path (what it names wrong)."""
    columns = {c: np.array([record[c]]) for c in JOB_COLUMNS}
    out = empty_features(1)
    _fill_table(columns, hardware, out)
    return out


def _fill_table(columns: Mapping[str, Any], hardware: Mapping[str, HardwareSpec] | None,
                out: np.ndarray) -> None:
    fields = row_field_matrix(columns, _code)  # raises DataError on an unknown choice
    new = new_field_matrix(columns)
    models, general = model_values(columns, new)
    effective = effective_fields(fields, new, models)
    table, codes = hardware_table(columns["gpu"], hardware)  # once, for every step below
    effs = effs_table(effective, table, codes) if HAVE_NUMBA else None  # both kernels read them
    fill_features(effective, columns["gpu"], hardware, out, table=(table, codes), effs=effs)
    dense = _dense_read(out)
    complete_model_values(models, general, fields, dense)
    hw = hardware_of_table(table, codes)
    if is_plain(new, fields, general):
        _write_extended(out, new, plain_values(fields, new, models, dense, hw))
    elif HAVE_NUMBA:
        aux = lookups(columns, fields, new, dense, hw, hardware)
        estimates = np.empty((2, fields.shape[1]))
        extended_kernel(fields, effective, new, models, aux, dense, table, codes, effs, out, _WIDTH,
                        estimates)
        _write_baselines(out, baselines(estimates[0], estimates[1], aux, dense))
    else:
        _write_extended(out, new, extended_values(columns, fields, effective, new, models, dense, hw,
                                                  hardware))


_WIDTH = len(RAW_FEATURES) + len(PHYSICS_FEATURES)
_DENSE_COLUMNS = np.array([len(RAW_FEATURES) + PHYSICS_FEATURES.index(name) for name in DENSE_READ],
                          dtype=np.intp)


def _dense_read(out: np.ndarray) -> np.ndarray:
    """The (`DENSE_READ`, rows) dense physics features the extended physics reads, as the
    feature matrix holds them (float32), in float64."""
    return read_columns(out, _DENSE_COLUMNS)


def _write_extended(out: np.ndarray, new: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
    """The new columns and `EXTENDED_PHYSICS` after the dense features; the corrected baselines.
    A few rows (one job) are written as two blocks: a column at a time costs a numpy call per
    feature, which is most of a single prediction's writing; many rows a block of rows at a
    time (`surrogate.matrix_io`)."""
    start = _WIDTH + len(NEW_COLUMNS)
    if out.shape[0] <= _FEW_ROWS:  # every value is a (rows,) array here (plain and numpy paths)
        out[:, _WIDTH:start] = new.T
        out[:, start:start + len(EXTENDED_PHYSICS)] = np.array([values[name] for name in EXTENDED_PHYSICS]).T
    else:
        write_columns(out, _WIDTH, [*new, *(values[name] for name in EXTENDED_PHYSICS)])
    _write_baselines(out, values)


_FEW_ROWS = 8


def _write_baselines(out: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
    for name in ("est_log_time_s", "est_log_memory_bytes"):
        out[:, len(RAW_FEATURES) + PHYSICS_FEATURES.index(name)] = values[name]


def features_of_record(record: Mapping[str, Any], hw: np.ndarray,
                       hardware: Mapping[str, HardwareSpec] | None) -> np.ndarray:
    """float32 (1, features) of one record (`Surrogate.predict_one`): a dense 16-bit job on the
    compiled one-row kernel and the plain extended values of one-element arrays (the same
    operations as a table's, so the same numbers; ~10x faster than a one-row table), any other
    through `feature_matrix`. `hw`: the `HW_FIELDS` numbers of its GPU."""
    from surrogate.kernel import features_of_values
    from surrogate.physics import row_field_values

    try:
        new = np.array([[codes[str(record[c])] if codes is not None else float(record[c])]
                        for c, codes in _NEW_CODES])
        values_in = row_field_values(record)
    except (KeyError, ValueError):  # an unknown choice: the table path names it
        return _table_features(record, hardware)
    fields = np.array(values_in).reshape(-1, 1)
    etp, domain = _EXPERT_TP, _NVLINK_DOMAIN
    if not new[etp, 0]:  # as `new_field_matrix` resolves a table saved before these columns
        new[etp] = float(record["tp"])
    if not new[domain, 0]:
        new[domain] = float(min(record["gpus_per_node"], record["num_gpus"]))  # type: ignore[type-var]
    general = np.array([bool(record["num_experts"]) or bool(record["multi_latent_attention"])
                        or bool(record["mtp_num_layers"]) or bool(record["kv_channels"])])
    if not is_plain(new, fields, general):
        if HAVE_NUMBA:
            return _general_features_of_record(record, fields, new, general, hw, hardware)
        return _table_features(record, hardware)
    out = empty_features(1)
    features_of_values(values_in, hw, out)
    dense = _dense_read(out)
    models = np.zeros((len(MODEL_VALUES), 1))
    models[M_ACTIVE_FFN] = fields[_FFN]
    complete_model_values(models, general, fields, dense)
    rows = _one_row_hardware(hw)
    _write_extended(out, new, plain_values(fields, new, models, dense, rows))
    return out


def _general_features_of_record(record: Mapping[str, Any], fields: np.ndarray, new: np.ndarray,
                                general: np.ndarray, hw: np.ndarray,
                                hardware: Mapping[str, HardwareSpec] | None) -> np.ndarray:
    """`fill_feature_matrix`'s compiled path for one record (MoE, cp, a recipe, ...): the same
    steps on its (rows, 1) matrices, its lookups made from its own values
    (`surrogate.extended.record_lookups`) rather than by grouping a table's rows."""
    from surrogate.kernel import features_of_values

    models = np.zeros((len(MODEL_VALUES), 1))
    models[M_ACTIVE_FFN] = fields[_FFN]
    if general[0]:
        models[:, 0] = model_values_of_record(record)
    out = empty_features(1)
    effective = effective_fields(fields, new, models)
    features_of_values(effective[:, 0].tolist(), hw, out)
    dense = _dense_read(out)
    if not general[0]:  # a MoE / MLA / MTP record's values are complete (`complete_model_values`)
        complete_model_values(models, general, fields, dense)
    aux = record_lookups(record, fields, new, dense, _one_row_hardware(hw),
                         hardware)
    estimates = np.empty((2, 1))
    extended_kernel(fields, effective, new, models, aux, dense, hw.reshape(1, -1), _ONE_GPU, NO_TABLE, out,
                    _WIDTH, estimates)
    _write_baselines(out, baselines(estimates[0], estimates[1], aux, dense))
    return out


_ONE_GPU = np.zeros(1, dtype=np.intp)
_EXPERT_TP, _NVLINK_DOMAIN = NEW_COLUMNS.index("expert_tp"), NEW_COLUMNS.index("nvlink_domain")
_FFN = ROW_FIELDS.index("ffn_hidden_size")
# per new column: its choices' codes (a categorical's string -> its index in CHOICES) or None
_NEW_CODES = tuple((c, {v: float(i) for i, v in enumerate(CHOICES[c])} if c in CHOICES else None)
                   for c in NEW_COLUMNS)
_ONE_ROW_HARDWARE: dict[bytes, Hardware] = {}


def _one_row_hardware(hw: np.ndarray) -> Hardware:
    """`Hardware` of one-element arrays of a GPU's `HW_FIELDS` numbers, made once per GPU (the
    single-prediction path reads them, never writes them)."""
    key = hw.tobytes()
    rows = _ONE_ROW_HARDWARE.get(key)
    if rows is None:
        if len(_ONE_ROW_HARDWARE) >= 256:
            _ONE_ROW_HARDWARE.clear()
        rows = _ONE_ROW_HARDWARE[key] = Hardware(*(np.array([float(v)]) for v in hw))
    return rows


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


# What lies outside the trained space, per column: (rows, an example) of a numeric column, the
# unseen values of a categorical one (checked per row chunk, merged by `merged_out_of_space`:
# one warning with the whole batch's counts).
OutOfSpaceParts = dict[str, tuple[int, float] | frozenset[Any]]


def out_of_space_parts(columns: Mapping[str, Any], bounds: Mapping[str, Any],
                       numeric: bool = True, categorical: bool = True) -> OutOfSpaceParts:
    """Column -> what of it lies outside the trained space (empty when all inside); only the
    numeric or only the categorical columns where the other flag is False."""
    if len(columns["num_layers"]) <= _FEW_ROWS and numeric and categorical:
        return _few_rows_out_of_space(columns, bounds)
    parts: OutOfSpaceParts = {}
    for c, bound in bounds.items():
        if (c in NUMERIC_COLUMNS and not numeric) or (c not in NUMERIC_COLUMNS and not categorical):
            continue
        if c in NUMERIC_COLUMNS:
            lo, hi = bound
            values = np.asarray(columns[c])
            if len(values) == 0 or (lo <= values.min() and values.max() <= hi):
                continue  # two reductions decide the common case; the detail only when needed
            v = values.astype(float)
            bad = (v < lo) | (v > hi)
            parts[c] = (int(bad.sum()), float(v[bad][0]))
        else:
            bad_values = frozenset(distinct(columns[c])) - set(bound)
            if bad_values:
                parts[c] = bad_values
    return parts


def merged_out_of_space(chunks: Sequence[OutOfSpaceParts]) -> OutOfSpaceParts:
    """The `out_of_space_parts` of a table from those of its row chunks, in row order: a numeric
    column's rows summed (its example the first chunk's), a categorical one's values united."""
    parts: OutOfSpaceParts = {}
    for chunk in chunks:
        for c, part in chunk.items():
            seen = parts.get(c)
            if seen is None:
                parts[c] = part
            elif isinstance(part, frozenset) and isinstance(seen, frozenset):
                parts[c] = seen | part
            elif isinstance(part, tuple) and isinstance(seen, tuple):
                parts[c] = (seen[0] + part[0], seen[1])
    return parts


_FEW_ROWS = 8  # rows up to which each value is checked as a Python scalar (no array reductions)


def _few_rows_out_of_space(columns: Mapping[str, Any], bounds: Mapping[str, Any]) -> OutOfSpaceParts:
    """`out_of_space_parts` of a table of a few rows, value by value (a search's one-plan calls:
    ~40 pandas `unique` and numpy reductions otherwise cost ~0.4 ms)."""
    parts: OutOfSpaceParts = {}
    n = len(columns["num_layers"])
    for c, bound in bounds.items():
        values = [value_at(columns[c], i) for i in range(n)]
        if c in NUMERIC_COLUMNS:
            bad = [float(v) for v in values if not bound[0] <= v <= bound[1]]
            if bad:
                parts[c] = (len(bad), bad[0])
        else:
            unseen = frozenset(v for v in values if v not in bound)
            if unseen:
                parts[c] = unseen
    return parts


def describe_out_of_space(parts: OutOfSpaceParts, bounds: Mapping[str, Any]) -> dict[str, str]:
    """Column -> description of the rows outside the trained space (empty when all inside)."""
    problems: dict[str, str] = {}
    for c in (c for c in bounds if c in parts):  # in the bounds' column order
        part = parts[c]
        if isinstance(part, tuple):
            lo, hi = bounds[c]
            problems[c] = f"{part[0]} row(s) outside the trained range [{lo:g}, {hi:g}] (e.g. {part[1]:g})"
        else:
            problems[c] = f"value(s) {', '.join(map(str, sorted(part, key=str)))} never seen " \
                          f"in training (trained on {', '.join(map(str, bounds[c]))})"
    return problems


def warn_out_of_space_parts(parts: OutOfSpaceParts, bounds: Mapping[str, Any], stacklevel: int = 3) -> None:
    problems = describe_out_of_space(parts, bounds)
    if problems:
        detail = "; ".join(f"{c}: {d}" for c, d in problems.items())
        warnings.warn(f"outside the surrogate's trained space, predictions extrapolate -- {detail}",
                      OutOfSpaceWarning, stacklevel=stacklevel)


BoundChecks = tuple[tuple[tuple[str, float, float], ...], tuple[tuple[str, frozenset[Any]], ...]]


def bound_checks(bounds: Mapping[str, Any]) -> BoundChecks:
    """`bounds` split once into (numeric column, low, high) and (categorical column, the set of
    values seen): what `warn_out_of_space_record` tests for every single prediction."""
    numeric = tuple((c, float(b[0]), float(b[1])) for c, b in bounds.items() if c in NUMERIC_COLUMNS)
    seen = tuple((c, frozenset(b)) for c, b in bounds.items() if c not in NUMERIC_COLUMNS)
    return numeric, seen


def warn_out_of_space_record(record: Mapping[str, Any], bounds: Mapping[str, Any],
                             checks: BoundChecks | None = None) -> None:
    """`out_of_space_parts` and its warning for one record, on Python scalars (`predict_one`;
    `checks`: `bound_checks(bounds)`, made once per model)."""
    numeric, seen = bound_checks(bounds) if checks is None else checks
    problems = []
    for c, lo, hi in numeric:
        if not lo <= float(record[c]) <= hi:
            problems.append(f"{c}: {record[c]} outside the trained range [{lo:g}, {hi:g}]")
    for c, values in seen:
        if record[c] not in values:
            problems.append(f"{c}: value {record[c]} never seen in training (trained on "
                            f"{', '.join(map(str, bounds[c]))})")
    if problems:
        detail = "; ".join(problems)
        warnings.warn(f"outside the surrogate's trained space, predictions extrapolate -- {detail}",
                      OutOfSpaceWarning, stacklevel=3)


def physics_features(df: pd.DataFrame,
                     hardware: Mapping[str, HardwareSpec] | None = None) -> pd.DataFrame:
    """Closed-form features of each row of a `JOB_COLUMNS` table (`surrogate.physics` and, for
    MoE / cp / precision / sharding, `surrogate.extended`: its baselines corrected)."""
    df = with_new_defaults(df)
    names, x = feature_matrix({c: df[c].to_numpy() for c in JOB_COLUMNS}, hardware)
    wanted = [*PHYSICS_FEATURES, *EXTENDED_PHYSICS]
    return pd.DataFrame({n: x[:, names.index(n)].astype(np.float64) for n in wanted}, index=df.index)
