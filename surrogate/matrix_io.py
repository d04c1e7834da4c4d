"""Columns into and out of the row-major feature matrix, a block of rows at a time.

With numba the feature matrix is row-major (`surrogate.encoding.empty_features`: the compiled
kernels fill one row at a time). A numpy statement per column (``out[:, j] = values``) then
touches one float32 in every row's 616 bytes, and each column's pass over a 20,000-row chunk
(12 MB) reloads the matrix from memory: writing the 65 columns of a dense table's plain path
and reading back the 24 dense features the extended physics takes cost ~6 ms of a ~33 ms chunk
(2026-11-28, cProfile). These loops move every column of a block of `BLOCK` rows while the
block's cache lines are held (256 rows: 158 KB). float64 -> float32 and back are IEEE
conversions, round to nearest even in numpy and numba alike: the same bits
(tests/surrogate_tests/test_matrix_io.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulator.jit import HAVE_NUMBA, njit

BLOCK = 256  # rows per block: 256 x 616 bytes stays in a core's L2 cache


@njit
def _write(out: np.ndarray, first: int, columns: tuple[np.ndarray, ...]) -> None:
    n = out.shape[0]
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        for j in range(len(columns)):
            column = columns[j]
            for i in range(start, stop):
                out[i, first + j] = column[i]


@njit
def _read(out: np.ndarray, columns: np.ndarray, into: np.ndarray) -> None:
    n = out.shape[0]
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        for j in range(columns.shape[0]):
            c = columns[j]
            for i in range(start, stop):
                into[j, i] = out[i, c]


def _blocked(out: np.ndarray) -> bool:
    """Whether the compiled loops apply: numba, and a row-major matrix."""
    return HAVE_NUMBA and out.flags.c_contiguous


def write_columns(out: np.ndarray, first: int, columns: Sequence[np.ndarray]) -> None:
    """``out[:, first + j] = columns[j]`` for each j (1-D arrays of the matrix's rows)."""
    if not _blocked(out):
        for j, values in enumerate(columns):
            out[:, first + j] = values
        return
    _write(out, first, tuple(np.ascontiguousarray(v, dtype=np.float64) for v in columns))


def read_columns(out: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """float64 (len(columns), rows): the matrix's columns `columns` (intp indices) as rows."""
    if not _blocked(out):
        return out[:, columns].T.astype(np.float64)
    into = np.empty((len(columns), out.shape[0]))
    _read(out, columns, into)
    return into
