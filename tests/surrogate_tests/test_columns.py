"""A categorical column factorizes to the same codes and values whatever holds it (Arrow, as
`read_samples` gives it; Python strings; objects), in order of first appearance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from surrogate.columns import factorize, factorized_rows, frame_columns, small_unique

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


def test_a_deferred_arrow_column_is_encoded_per_row_chunk() -> None:
    """`frame_columns(..., defer=True)` leaves an Arrow-backed string column to be encoded per
    chunk of rows (on the prediction's threads): each chunk gets its own rows' codes."""
    df = pd.DataFrame({"gpu": pd.Series(VALUES, dtype="string[pyarrow]"), "n": np.arange(6),
                       "other": pd.Series(VALUES, dtype="object")})
    columns = frame_columns(df, ("gpu", "n", "other"), ("gpu", "other"), defer=True)
    chunk = factorized_rows(columns, slice(2, 5))
    assert chunk["gpu"].uniques == ("b200", "gb200", "h100") and chunk["gpu"].codes.tolist() == [0, 1, 2]
    assert chunk["other"].values().tolist() == VALUES[2:5]  # pandas' column: factorized up front
    assert chunk["n"].tolist() == [2, 3, 4]
    whole = factorized_rows(columns, slice(None))["gpu"]
    assert whole.uniques == factorize(df["gpu"]).uniques and whole.values().tolist() == VALUES


def test_a_deferred_arrow_chunk_with_a_missing_value_takes_pandas_path() -> None:
    df = pd.DataFrame({"gpu": pd.Series(["a", None, "a", "b"], dtype="string[pyarrow]")})
    chunk = factorized_rows(frame_columns(df, ("gpu",), ("gpu",), defer=True), slice(0, 3))
    assert chunk["gpu"].codes.tolist() == [0, 1, 0]
    assert chunk["gpu"].uniques[0] == "a" and pd.isna(chunk["gpu"].uniques[1])


def test_small_unique_groups_keys_as_numpy_unique_does() -> None:
    key = np.random.default_rng(0).integers(0, 40, 5_000) * 3  # sparse in [0, 120)
    keys, inverse = small_unique(key, 120)
    expected_keys, expected_inverse = np.unique(key, return_inverse=True)
    assert keys.tolist() == expected_keys.tolist()
    assert inverse.tolist() == expected_inverse.ravel().tolist()
    assert (keys[inverse] == key).all()
