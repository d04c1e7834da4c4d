"""A table's rows grouped by a key of a few categorical columns, with values kept per key.

The MoE layer's host launches (`surrogate.moe_terms.moe_host_s`) are counted in the
simulator's own blocks once per distinct *launch key* (the dispatcher, the recipe, recompute,
...), ~5 ms each; a prediction batch then only looks its rows' keys up. That lookup used to
build one Python tuple per distinct key and batch (~1,500 of them in 20,000 rows of the MoE + cp
space) and walk a dict: 10-16 ms per 20,000 rows, the largest single step of a batch
prediction after the two compiled kernels, mostly the garbage collector scanning the tuples.
`KeyedCache` keeps the keys it has met as sorted numpy arrays instead, so a batch costs one hash
grouping of its keys and one binary search; only a key never met before reaches Python.

Keys are the columns' *stable codes* (`stable_codes`: the same value gets the same code in
every batch of the process), folded into one 64-bit number; a fold is a hash, so every row's
codes are checked against those its key was stored with, and two keys that fold alike raise
`DataError` rather than share values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from simulator.errors import DataError
from surrogate.columns import Factorized, fold_columns, python_scalar, row_groups

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
    """One uint64 per row of the (rows, k) uint64 codes `parts` (a hash: see `KeyedCache`);
    the key `row_groups` groups the rows by."""
    return fold_columns(list(parts.T))


class KeyedCache:
    """Values of width `width` per key, for whole batches of rows at once.

    `values(parts, compute)`: the (rows, width) values of rows whose keys are the rows of the
    (rows, k) uint64 `parts`; `compute(i)` gives the values of a key not met before from its
    first row `i`. Past `max_keys` keys it starts afresh from the batch's own keys (values are
    functions of their keys, so forgetting them changes no result).
    """

    def __init__(self, width: int, what: str, max_keys: int = 8192) -> None:
        self.width, self.what, self.max_keys = width, what, max_keys
        self.clear()

    def clear(self) -> None:
        self._state = _State(np.empty(0, dtype=np.uint64), np.empty((0, 0), dtype=np.uint64),
                             np.empty((0, self.width)))

    def __len__(self) -> int:
        return len(self._state.keys)

    def values(self, parts: np.ndarray, compute: Callable[[int], Any]) -> np.ndarray:
        # grouped by a hash table (np.unique's sort of the rows cost ~3x as much); each row is
        # checked against its key's first row there
        inverse, first = row_groups(list(parts.T), self.what)
        distinct = fold(parts[first])
        state = self._state  # one snapshot: a batch's threads share the cache
        pos = self._find(state, distinct, parts[first])
        missing = np.flatnonzero(pos < 0)
        if not len(missing):
            return state.values[pos[inverse]]
        table = np.empty((len(distinct), self.width))  # the batch's keys' values
        hit = pos >= 0
        table[hit] = state.values[pos[hit]]
        table[missing] = np.array([compute(int(first[j])) for j in missing],
                                  dtype=float).reshape(-1, self.width)
        # replaced whole (another thread's insert may be lost: values are functions of keys)
        self._state = self._inserted(state, distinct, parts[first], table, missing)
        return table[inverse]

    def _find(self, state: _State, keys: np.ndarray, parts: np.ndarray) -> np.ndarray:
        """Index of each key in `state`, -1 where absent (stored codes checked)."""
        if not len(state.keys):
            return np.full(len(keys), -1)
        pos = np.minimum(np.searchsorted(state.keys, keys), len(state.keys) - 1)
        found = state.keys[pos] == keys
        if state.parts.shape[1] == parts.shape[1] and (state.parts[pos[found]] != parts[found]).any():
            raise DataError(f"two {self.what} share a surrogate hash key; report this table")
        return np.where(found, pos, -1)

    def _inserted(self, state: _State, keys: np.ndarray, parts: np.ndarray, values: np.ndarray,
                  missing: np.ndarray) -> _State:
        """`state` with the batch's `missing` keys added; where that would overfill it (or its
        keys have another width), the batch's `keys` alone, sorted."""
        if (len(state.keys) + len(missing) > self.max_keys
                or state.parts.shape[1] != parts.shape[1]):
            order = np.argsort(keys, kind="stable")
            return _State(keys[order], parts[order], values[order])
        merged = np.concatenate([state.keys, keys[missing]])
        order = np.argsort(merged, kind="stable")
        return _State(merged[order], np.concatenate([state.parts, parts[missing]])[order],
                      np.concatenate([state.values, values[missing]])[order])


class _State(NamedTuple):
    """The cache's sorted keys, their stored codes and values (replaced together, never edited:
    a thread reading while another inserts sees one whole state)."""

    keys: np.ndarray
    parts: np.ndarray
    values: np.ndarray
