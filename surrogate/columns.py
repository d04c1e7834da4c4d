"""Categorical job columns as codes plus their distinct values, factorized once per batch.

A table's string columns (gpu, precision, recompute, schedule) are read by the physics, the
encoder and the out-of-space check. Comparing a 100k-row object array with each choice, in each
of them, cost more than the rest of the features; `Factorized` holds the column once as integer
codes and the few distinct values, and every reader maps the distinct values instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from simulator.errors import DataError


@dataclass(frozen=True)
class Factorized:
    """A categorical column: ``values == uniques[codes]``."""

    codes: np.ndarray  # int index into `uniques` per row
    uniques: tuple[Any, ...]  # distinct values (Python scalars), in order of first appearance

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows: slice) -> Factorized:
        """The rows `rows` (same distinct values)."""
        return Factorized(self.codes[rows], self.uniques)

    def lookup(self, table: Callable[[Any], float]) -> np.ndarray:
        """float64 array of ``table(value)`` for each row (evaluated once per distinct value)."""
        return np.asarray([table(u) for u in self.uniques], dtype=np.float64)[self.codes]

    def values(self) -> np.ndarray:
        """The column as an object array (slow for large tables; for external readers)."""
        return np.asarray(self.uniques, dtype=object)[self.codes]


def factorize(values: Any) -> Factorized:
    """`Factorized` of a Series, an array or a list (already `Factorized`: returned as is).
    A column held by Arrow (what `read_samples` gives) is dictionary-encoded by Arrow itself:
    the same codes and first-appearance order as `pd.factorize`, ~0.7x its time (pandas wraps
    the same kernel in conversions), which a batch prediction pays for every string column."""
    if isinstance(values, Factorized):
        return values
    arrow = _arrow_codes(values)
    if arrow is not None:
        return arrow
    if is_arrow(values):  # an Arrow array with nulls: pandas' path
        values = values.to_pandas()
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return Factorized(np.asarray(codes, dtype=np.intp),
                      tuple(u.item() if hasattr(u, "item") else u for u in np.asarray(uniques, dtype=object)))


def _arrow_codes(values: Any) -> Factorized | None:
    """`factorize` of an Arrow array or Arrow-backed Series without nulls, else None (pandas'
    path)."""
    column = values if is_arrow(values) else arrow_array(values)
    if column is None or column.null_count:
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(column)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    return Factorized(encoded.indices.to_numpy(zero_copy_only=False).astype(np.intp, copy=False),
                      tuple(encoded.dictionary.to_pylist()))


def arrow_array(values: Any) -> Any:
    """The Arrow array holding a Series (pandas' Arrow-backed dtypes), else None."""
    array = getattr(values, "array", None)
    if not hasattr(array, "__arrow_array__"):
        return None
    import pyarrow as pa

    return pa.array(array)


def is_arrow(values: Any) -> bool:
    """Whether `values` is an Arrow array (what `frame_columns(..., defer=True)` leaves)."""
    module = type(values).__module__
    return module.startswith("pyarrow") and hasattr(values, "null_count")


def distinct(values: Any) -> list[Any]:
    """Distinct values of a column (`Factorized` or array-like) as Python scalars."""
    if isinstance(values, Factorized):
        return list(values.uniques)
    array = np.asarray(values)
    if array.dtype == np.bool_ and len(array):  # two reductions instead of a hash table
        return sorted({bool(array.min()), bool(array.max())})
    return [v.item() if hasattr(v, "item") else v for v in pd.unique(array)]


def as_array(values: Any) -> np.ndarray:
    """A column as a numpy array (`Factorized` expanded)."""
    return values.values() if isinstance(values, Factorized) else np.asarray(values)


def frame_columns(df: pd.DataFrame, names: tuple[str, ...],
                  categorical: tuple[str, ...], defer: bool = False) -> dict[str, Any]:
    """Columns `names` of `df`: numpy arrays, with `categorical` ones as `Factorized`.

    `defer`: an Arrow-backed categorical column stays the Arrow array, for `factorized_rows`
    to encode per row chunk. Arrow's kernel releases Python's lock, so two threads encode
    their halves at once, where encoding the whole table first kept the second core idle
    (14 string columns, ~3 ms of a ~21 ms batch of 20,000 rows; docs/speed.md, "Session 17")."""
    out: dict[str, Any] = {}
    for c in names:
        if c not in categorical:
            out[c] = df[c].to_numpy()
            continue
        arrow = arrow_array(df[c]) if defer else None
        out[c] = arrow if arrow is not None else factorize(df[c])
    return out


def factorized_rows(columns: Mapping[str, Any], rows: slice) -> dict[str, Any]:
    """Rows `rows` of `columns`, the Arrow arrays `frame_columns(..., defer=True)` left
    factorized (a zero-copy slice of each, encoded by Arrow)."""
    return {c: factorize(v[rows]) if is_arrow(v) else v[rows] for c, v in columns.items()}


def is_factorized(columns: Mapping[str, Any], name: str) -> bool:
    return isinstance(columns[name], Factorized)


def python_scalar(value: Any) -> Any:
    """A numpy scalar as its Python value (others as they are)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def value_at(column: Any, i: int) -> Any:
    """Row `i` of a column (`Factorized` or array-like) as a Python scalar."""
    return python_scalar(column.uniques[column.codes[i]] if isinstance(column, Factorized)
                         else column[i])


def small_unique(key: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(key, return_inverse=True)` of non-negative integer keys below `size` (a few
    hundred combinations of codes) without sorting the rows: a table of which keys occur.
    np.unique's sort cost ~1 ms per 20,000 rows, each of the lookups that grouped by it."""
    present = np.zeros(size, dtype=np.bool_)
    present[key] = True
    slot = np.cumsum(present) - 1
    return np.flatnonzero(present), slot[key]


def fold_columns(parts: Sequence[np.ndarray]) -> np.ndarray:
    """One uint64 per row of integer columns `parts` (a hash: rows that fold alike are checked
    by their callers, `row_groups` and `surrogate.launch_keys.KeyedCache`)."""
    key = np.zeros(len(parts[0]), dtype=np.uint64)
    for j, part in enumerate(parts):
        key = key * np.uint64(1_000_003) + part.astype(np.uint64) + np.uint64(j)
    return key


def row_groups(parts: list[np.ndarray], what: str) -> tuple[np.ndarray, np.ndarray]:
    """(group of each row, the first row of each group) of rows equal in every one of `parts`
    (integer arrays of one length): folded into one 64-bit key (a hash table on one column, not
    a tuple per row), every row then checked against its group's first row (a collision raises
    `DataError` naming `what`)."""
    codes, uniques = pd.factorize(fold_columns(parts))
    firsts = np.full(len(uniques), -1)
    firsts[codes[::-1]] = np.arange(len(codes))[::-1]
    if any((part != part[firsts][codes]).any() for part in parts):
        raise DataError(f"two {what} share a surrogate hash key; report this table")
    return np.asarray(codes), firsts
