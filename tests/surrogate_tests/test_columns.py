"""A categorical column factorizes to the same codes and values whatever holds it (Arrow, as
`read_samples` gives it; Python strings; objects), in order of first appearance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from surrogate.columns import factorize

VALUES = ["b200", "h100", "b200", "gb200", "h100", "b200"]


@pytest.mark.parametrize("dtype", ["string[pyarrow]", "string[python]", "object", "category"])
def test_a_string_column_factorizes_in_order_of_first_appearance(dtype: str) -> None:
    column = pd.Series(VALUES, dtype=dtype)
    f = factorize(column)
    assert f.uniques == ("b200", "h100", "gb200")
    assert all(type(u) is str for u in f.uniques)
    assert f.codes.dtype == np.intp
    assert f.codes.tolist() == [0, 1, 0, 2, 1, 0]
    assert f.values().tolist() == VALUES


def test_a_slice_of_an_arrow_column_factorizes_its_own_rows() -> None:
    column = pd.Series(VALUES, dtype="string[pyarrow]").iloc[2:5]
    f = factorize(column)
    assert f.uniques == ("b200", "gb200", "h100")
    assert f.codes.tolist() == [0, 1, 2]


def test_a_missing_value_is_a_value_of_its_own() -> None:
    column = pd.Series(["a", None, "a"], dtype="string[pyarrow]")
    f = factorize(column)
    assert f.codes.tolist() == [0, 1, 0]
    assert f.uniques[0] == "a" and pd.isna(f.uniques[1])
