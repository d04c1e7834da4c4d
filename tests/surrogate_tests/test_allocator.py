"""A large batch keeps its freed memory for the next one (glibc's M_TOP_PAD), once per process,
unless the user says otherwise; a small batch (one job, a search's trial) leaves the allocator
alone."""

from __future__ import annotations

import platform
import warnings

import pytest

import surrogate.model as surrogate_model
from surrogate.allocator import retain_freed_memory
from surrogate.dataset import read_samples
from surrogate.encoding import OutOfSpaceWarning
from surrogate.features import JOB_COLUMNS


@pytest.fixture(autouse=True)
def _fresh() -> None:
    retain_freed_memory.cache_clear()


@pytest.mark.parametrize("env", [{"VTRAIN_NO_MALLOPT": "1"}, {"MALLOC_TOP_PAD_": "131072"}])
def test_the_users_setting_leaves_the_allocator_alone(env: dict[str, str], monkeypatch) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert retain_freed_memory() is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="M_TOP_PAD is glibc's")
def test_glibc_takes_the_pad(monkeypatch) -> None:
    monkeypatch.delenv("VTRAIN_NO_MALLOPT", raising=False)
    monkeypatch.delenv("MALLOC_TOP_PAD_", raising=False)
    assert retain_freed_memory() is True


def test_only_a_batch_cut_into_chunks_sets_it(tiny_model, tiny_samples, monkeypatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(surrogate_model, "retain_freed_memory", lambda: calls.append(1))
    rows = read_samples(tiny_samples)[list(JOB_COLUMNS)].head(40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        tiny_model.model.predict(rows)
        assert calls == []
        monkeypatch.setattr(surrogate_model, "PARALLEL_ROWS", 20)
        tiny_model.model.predict(rows)
    assert calls == [1]
