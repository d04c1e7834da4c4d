"""`surrogate generate --backend dask` on a real dask.distributed cluster (issue 26, item 13).

A `LocalCluster` of two worker processes stands in for a cluster of machines: the generator
connects to it through DASK_SCHEDULER_ADDRESS, as it would to a remote scheduler. Its samples
must equal the local ones bit for bit, and a worker killed in the middle of the run (SIGKILL, as
a lost machine) must cost nothing: the scheduler runs its tasks again elsewhere, and the folder
holds every sample exactly once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from surrogate.checkpoint import Checkpoints
from surrogate.dataset import read_samples
from surrogate.generate import Backend, generate
from tests.surrogate_tests.conftest import tiny_config

distributed = pytest.importorskip("distributed")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster() -> Iterator[distributed.LocalCluster]:
    os.environ.setdefault("PYTHONPATH", str(ROOT))  # the workers import this checkout
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=40) as local:
        yield local


def _folder(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("chunk-*.parquet"))}


def test_samples_on_a_dask_cluster_equal_the_local_ones(cluster, tmp_path, monkeypatch) -> None:
    config = tiny_config(120, chunk_size=60)
    generate(config, tmp_path / "local", progress=False)
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", cluster.scheduler_address)
    report = generate(replace(config, backend=Backend.DASK, jobs=2), tmp_path / "dask", progress=False)
    assert report.simulated == 120
    assert _folder(tmp_path / "dask") == _folder(tmp_path / "local")


def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(cluster, tmp_path, monkeypatch) -> None:
    config = tiny_config(200, chunk_size=100)
    generate(config, tmp_path / "local", progress=False)
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", cluster.scheduler_address)
    with distributed.Client(cluster.scheduler_address) as client:
        pids = client.run(os.getpid)
    killed: list[int] = []
    real_add = Checkpoints.add

    def kill_a_worker_after_the_first_task(self, chunk, task, frame):  # type: ignore[no-untyped-def]
        if not killed:
            victim = sorted(pids.values())[0]
            os.kill(victim, signal.SIGKILL)  # a machine lost while tasks are in flight
            killed.append(victim)
        real_add(self, chunk, task, frame)

    monkeypatch.setattr(Checkpoints, "add", kill_a_worker_after_the_first_task)
    report = generate(replace(config, backend=Backend.DASK, jobs=2), tmp_path / "dask", progress=False)
    assert killed and report.simulated == 200
    samples = read_samples(tmp_path / "dask")
    assert sorted(samples["sample_index"]) == list(range(200))  # none lost, none twice
    pd.testing.assert_frame_equal(samples, read_samples(tmp_path / "local"))
    assert _folder(tmp_path / "dask") == _folder(tmp_path / "local")
