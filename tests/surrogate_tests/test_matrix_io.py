"""Columns move into and out of the row-major feature matrix with the same bits as numpy's
column statements (float64 -> float32 and back, round to nearest even), in blocks of rows."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.jit import HAVE_NUMBA
from surrogate import matrix_io
from surrogate.matrix_io import BLOCK, read_columns, write_columns

ROWS = 2 * BLOCK + 37  # two whole blocks and a partial one


def _columns(k: int) -> list[np.ndarray]:
    rng = np.random.default_rng(k)
    return [rng.standard_normal(ROWS) * 10.0 ** rng.integers(-30, 30) for _ in range(k)]


@pytest.mark.parametrize("order", ["C", "F"])
def test_written_columns_are_numpys_float32_of_each_value(order: str) -> None:
    columns = _columns(7)
    out = np.zeros((ROWS, 12), dtype=np.float32, order=order)
    write_columns(out, 3, columns)
    expected = np.zeros((ROWS, 12), dtype=np.float32)
    for j, values in enumerate(columns):
        expected[:, 3 + j] = values
    assert np.array_equal(out, expected)


@pytest.mark.parametrize("order", ["C", "F"])
def test_read_columns_are_the_matrix_columns_as_float64_rows(order: str) -> None:
    out = np.asarray(np.random.default_rng(0).standard_normal((ROWS, 9)), dtype=np.float32, order=order)
    picked = np.array([8, 0, 4], dtype=np.intp)
    rows = read_columns(out, picked)
    assert rows.dtype == np.float64 and rows.shape == (3, ROWS)
    assert np.array_equal(rows, out[:, picked].T.astype(np.float64))


@pytest.mark.skipif(not HAVE_NUMBA, reason="the blocked loops are compiled with numba")
@pytest.mark.parametrize(("order", "compiled"), [("C", True), ("F", False)])
def test_only_a_row_major_matrix_takes_the_compiled_loops(order: str, compiled: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    for name in ("_write", "_read"):
        loop = getattr(matrix_io, name)
        monkeypatch.setattr(matrix_io, name,
                            lambda *a, _loop=loop, _name=name: (calls.append(_name), _loop(*a)))
    out = np.zeros((ROWS, 3), dtype=np.float32, order=order)
    write_columns(out, 0, [np.arange(ROWS, dtype=np.float64) + j for j in range(3)])
    assert out[ROWS - 1].tolist() == [ROWS - 1, ROWS, ROWS + 1]
    assert read_columns(out, np.array([2], dtype=np.intp))[0, :3].tolist() == [2.0, 3.0, 4.0]
    assert calls == (["_write", "_read"] if compiled else [])
