"""A batch's rows look their keys' values up in `KeyedCache`: each distinct key computed once
in the process, the same values whatever came before, and a hash collision refused."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import DataError
from surrogate.columns import Factorized
from surrogate.launch_keys import KeyedCache, fold, stable_codes


def _parts(*columns: list[int]) -> np.ndarray:
    return np.array(columns, dtype=np.uint64).T


def test_each_key_is_computed_once_and_every_row_gets_its_keys_values() -> None:
    calls: list[tuple[int, ...]] = []
    parts = _parts([1, 2, 1, 3, 2], [7, 7, 7, 8, 7])

    def compute(i: int) -> tuple[float, float]:
        key = tuple(int(v) for v in parts[i])
        calls.append(key)
        return float(key[0]), float(key[0] * 10 + key[1])

    cache = KeyedCache(2, "test keys")
    values = cache.values(parts, compute)
    assert sorted(calls) == [(1, 7), (2, 7), (3, 8)]
    assert values.tolist() == [[1, 17], [2, 27], [1, 17], [3, 38], [2, 27]]
    again = cache.values(parts[::-1], compute)  # every key known: nothing computed
    assert len(calls) == 3
    assert again.tolist() == values[::-1].tolist()


def test_values_do_not_depend_on_what_the_cache_met_before() -> None:
    def compute_of(parts: np.ndarray):
        return lambda i: (float(parts[i].sum()),)

    a, b = _parts([1, 2, 3], [4, 5, 6]), _parts([3, 9, 1], [6, 9, 4])
    fresh = KeyedCache(1, "test keys").values(b, compute_of(b))
    warm = KeyedCache(1, "test keys")
    warm.values(a, compute_of(a))
    assert warm.values(b, compute_of(b)).tolist() == fresh.tolist()


def test_a_full_cache_starts_afresh_with_the_same_results() -> None:
    parts = _parts(list(range(10)), [0] * 10)
    cache = KeyedCache(1, "test keys", max_keys=4)
    first = cache.values(parts[:3], lambda i: (float(i),))
    assert cache.values(parts[3:8], lambda i: (float(i + 3),)).ravel().tolist() == [3, 4, 5, 6, 7]
    assert len(cache) == 5  # 3 + 5 > 4: only this batch's keys are kept
    assert cache.values(parts[:3], lambda i: (float(i),)).tolist() == first.tolist()


def test_a_batch_that_overfills_the_cache_keeps_the_values_of_the_keys_it_had_found() -> None:
    """Starting afresh must keep the batch's known keys as well as its new ones: it kept the new
    ones only, and the known ones read the last stored value."""
    cache = KeyedCache(1, "test keys", max_keys=4)
    cache.values(_parts([1, 2, 3], [0, 0, 0]), lambda i: (float(i + 1),))
    parts = _parts([1, 2, 3, 7, 8], [0, 0, 0, 0, 0])
    got = cache.values(parts, lambda i: (float(parts[i, 0]),))
    assert got.ravel().tolist() == [1.0, 2.0, 3.0, 7.0, 8.0]
    assert cache.values(parts, lambda i: (-1.0,)).ravel().tolist() == [1.0, 2.0, 3.0, 7.0, 8.0]


def test_two_keys_that_fold_alike_are_refused() -> None:
    # fold() of (a, b) is (a * 1_000_003 + 0) * 1_000_003 + b + 1: (0, 1_000_003) equals (1, 0)
    parts = _parts([0, 1], [1_000_003, 0])
    assert fold(parts)[0] == fold(parts)[1]
    with pytest.raises(DataError, match="share a surrogate hash key"):
        KeyedCache(1, "test keys").values(parts, lambda i: (0.0,))
    cache = KeyedCache(1, "test keys")  # ... also when one of them is already in the cache
    cache.values(parts[:1], lambda i: (0.0,))
    with pytest.raises(DataError, match="share a surrogate hash key"):
        cache.values(parts[1:], lambda i: (0.0,))


def test_stable_codes_are_the_same_for_a_factorized_column_and_a_plain_one() -> None:
    rows = np.array([0, 2, 3])
    plain = np.array(["fp8", "bf16", "fp4", "fp8"], dtype=object)
    factorized = Factorized(np.array([0, 1, 2, 0]), ("fp8", "bf16", "fp4"))
    assert stable_codes(plain, "precision_test", rows).tolist() == \
        stable_codes(factorized, "precision_test", rows).tolist()
    assert stable_codes(np.array([True, False, True]), "flag_test", np.arange(3)).tolist() == \
        stable_codes(Factorized(np.array([1, 0, 1]), (False, True)), "flag_test", np.arange(3)).tolist()


def test_threads_sharing_the_cache_each_get_their_own_keys_values() -> None:
    """A batch's row chunks look their keys up on threads (surrogate.model._predict_table), all
    in the one process-wide cache: one thread's insert must never hand another a half-replaced
    cache (an IndexError, or another key's values)."""
    from concurrent.futures import ThreadPoolExecutor

    cache = KeyedCache(1, "test keys", max_keys=64)

    def batch(seed: int) -> bool:
        rng = np.random.default_rng(seed)
        for _ in range(100):
            parts = _parts(rng.integers(0, 50, 200).tolist(), rng.integers(0, 3, 200).tolist())
            got = cache.values(parts, lambda i, p=parts: (float(p[i, 0] * 10 + p[i, 1]),))
            if not np.array_equal(got.ravel(), (parts[:, 0] * 10 + parts[:, 1]).astype(float)):
                return False
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(batch, range(8)))
