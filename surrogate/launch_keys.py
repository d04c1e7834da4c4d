"""A table's rows grouped by a key of a few categorical columns, with values kept per key.

The MoE layer's host launches (`surrogate.moe_terms.moe_host_s`) are counted in the
simulator's own blocks once per distinct *launch key* (the dispatcher, the recipe, recompute,
...), ~5 ms each; a prediction batch then only looks its rows' keys up. That lookup used to
build one Python tuple per distinct key and batch (~1,500 of them in 20,000 rows of the MoE + cp
space) and walk a dict: 10-16 ms per 20,000 rows, the largest single step of a batch
prediction after the two compiled kernels, mostly the garbage collector scanning the tuples.
`KeyedCache` keeps the keys it has met as sorted numpy arrays instead, so a batch costs one sort
of its keys and one binary search; only a key never met before reaches Python.

Keys are the columns' *stable codes* (`stable_codes`: the same value gets the same code in
every batch of the process), folded into one 64-bit number; a fold is a hash, so every row's
codes are checked against those its key was stored with, and two keys that fold alike raise
`DataError` rather than share values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from simulator.errors import DataError
from surrogate.columns import Factorized, python_scalar

_STABLE: dict[tuple[str, Any], int] = {}  # (column, value) -> a code that lasts the process


def stable_code(name: str, value: Any) -> int:
    """The code of `value` in column `name`, the same in every call of the process."""
    return _STABLE.setdefault((name, python_scalar(value)), len(_STABLE))


def stable_codes(column: Any, name: str, rows: np.ndarray) -> np.ndarray:
    """uint64 stable codes of a column's values at `rows` (a `Factorized` column maps its few
    distinct values; an array is factorized first)."""
    if isinstance(column, Factorized):
        table = np.array([stable_code(name, u) for u in column.uniques], dtype=np.uint64)
        return table[np.asarray(column.codes)[rows]]
    codes, uniques = pd.factorize(np.asarray(column)[rows])
    table = np.array([stable_code(name, u) for u in uniques], dtype=np.uint64)
    return table[codes]


def fold(parts: np.ndarray) -> np.ndarray:
    """One uint64 per row of the (rows, k) uint64 codes `parts` (a hash: see `KeyedCache`)."""
    key = np.zeros(len(parts), dtype=np.uint64)
    for j in range(parts.shape[1]):
        key = key * np.uint64(1_000_003) + parts[:, j] + np.uint64(j)
    return key


class KeyedCache:
    """Values of width `width` per key, for whole batches of rows at once.

    `values(parts, compute)`: the (rows, width) values of rows whose keys are the rows of the
    (rows, k) uint64 `parts`; `compute(i)` gives the values of a key not met before from its
    first row `i`. At most `max_keys` keys are kept (then it starts afresh: values are functions
    of their keys, so forgetting them changes no result).
    """

    def __init__(self, width: int, what: str, max_keys: int = 8192) -> None:
        self.width, self.what, self.max_keys = width, what, max_keys
        self.clear()

    def clear(self) -> None:
        self._keys = np.empty(0, dtype=np.uint64)  # sorted
        self._parts = np.empty((0, 0), dtype=np.uint64)
        self._values = np.empty((0, self.width))

    def __len__(self) -> int:
        return len(self._keys)

    def values(self, parts: np.ndarray, compute: Callable[[int], Any]) -> np.ndarray:
        key = fold(parts)
        distinct, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        if (parts != parts[first][inverse]).any():
            raise DataError(f"two {self.what} share a surrogate hash key; report this table")
        pos = self._find(distinct, parts[first])
        missing = np.flatnonzero(pos < 0)
        if len(missing):
            new = np.array([compute(int(first[j])) for j in missing], dtype=float).reshape(-1, self.width)
            self._insert(distinct[missing], parts[first[missing]], new)
            pos = self._find(distinct, parts[first])
        return self._values[pos[inverse]]

    def _find(self, keys: np.ndarray, parts: np.ndarray) -> np.ndarray:
        """Index of each key in the cache, -1 where absent (stored codes checked)."""
        if not len(self._keys):
            return np.full(len(keys), -1)
        pos = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
        found = self._keys[pos] == keys
        if self._parts.shape[1] == parts.shape[1] and (self._parts[pos[found]] != parts[found]).any():
            raise DataError(f"two {self.what} share a surrogate hash key; report this table")
        return np.where(found, pos, -1)

    def _insert(self, keys: np.ndarray, parts: np.ndarray, values: np.ndarray) -> None:
        if len(self._keys) + len(keys) > self.max_keys or self._parts.shape[1] != parts.shape[1]:
            self.clear()
            self._parts = np.empty((0, parts.shape[1]), dtype=np.uint64)
        keys = np.concatenate([self._keys, keys])
        order = np.argsort(keys, kind="stable")
        self._keys = keys[order]
        self._parts = np.concatenate([self._parts, parts])[order]
        self._values = np.concatenate([self._values, values])[order]
