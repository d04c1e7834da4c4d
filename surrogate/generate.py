"""Generation: draw a space, run the exact simulator over it in parallel, write Parquet chunks.

Work is cut into fixed-size chunks, each simulated as tasks of a few seconds handed to joblib
(local processes through loky by default). The parent writes each finished chunk atomically,
and every `checkpoint_s` seconds the finished tasks of unfinished chunks (surrogate.checkpoint):
a killed run loses at most that much work, and `resume=True` simulates only what is missing.
Sampling is deterministic (space, hardware, seed, method), so a resumed folder is identical to an
uninterrupted one. However it ends, a run stops the local worker processes it started.

Scale-out: `Backend.DASK` and `Backend.RAY` hand the same chunks to a cluster through joblib's
backend mechanism. Install the extra (``pip install 'vtrain-ml[dask]'`` or ``'vtrain-ml[ray]'``)
and point at the cluster with ``DASK_SCHEDULER_ADDRESS=tcp://host:8786`` or
``RAY_ADDRESS=host:6379`` (without one, a local cluster is started). Workers need vtrain-ml
installed; results come back to this process, which alone writes the folder.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.errors import ConfigError
from simulator.fileio import write_json_atomic
from simulator.job.catalog import hardware_fingerprint
from simulator.job.specs import HardwareSpec
from surrogate.checkpoint import Checkpoints, finished_chunk, task_ranges
from surrogate.dataset import (
    MANIFEST,
    SCHEMA_VERSION,
    plan_key,
    read_manifest,
    simulate_records,
    simulator_version,
)
from surrogate.sampling import draw
from surrogate.space import Method, Space


class Backend(StrEnum):
    LOKY = "loky"
    DASK = "dask"
    RAY = "ray"


@dataclass(frozen=True)
class GenerateConfig:
    space: Space
    hardware: Mapping[str, HardwareSpec]  # name -> spec (catalog or a calibrated file)
    n: int
    seed: int = 0
    method: Method = Method.SOBOL
    chunk_size: int = 500
    jobs: int = -1
    backend: Backend = Backend.LOKY
    sources: Mapping[str, str] = field(default_factory=dict)  # name -> catalog id or file given
    checkpoint_s: float = 10.0  # save finished work at least this often (surrogate.checkpoint)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError(f"--n={self.n}: generate at least one sample")
        if self.chunk_size < 1:
            raise ConfigError(f"--chunk-size={self.chunk_size}: must be at least 1")
        if self.jobs == 0:
            raise ConfigError("--jobs=0: give a number of workers (1, 2, ...) or -1 for all cores")
        if not self.checkpoint_s > 0:
            raise ConfigError(f"--checkpoint-s={self.checkpoint_s}: give a positive number of seconds")


@dataclass(frozen=True)
class GenerateReport:
    out: Path
    n: int
    simulated: int  # in this run (less than n when resuming)
    seconds: float
    rejections: dict[str, Any]

    @property
    def samples_per_s(self) -> float:
        return self.simulated / self.seconds if self.seconds > 0 else 0.0


def manifest_for(config: GenerateConfig, rejections: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "n": config.n, "seed": config.seed, "method": config.method.value,
        "chunk_size": config.chunk_size,
        "space": config.space.to_dict(), "space_hash": config.space.content_hash(),
        "hardware": {name: {"hash": hardware_fingerprint(spec), "source": config.sources.get(name, name),
                            "spec": spec.model_dump(mode="json")}
                     for name, spec in config.hardware.items()},
        "simulator_version": simulator_version(),
        "sampling": rejections,
    }


_IDENTITY = ("n", "seed", "method", "chunk_size", "space_hash", "hardware", "simulator_version")


def _check_resume(out: Path, manifest: dict[str, Any], resume: bool) -> None:
    if not (out / MANIFEST).is_file():
        if out.exists() and any(out.glob("chunk-*.parquet")):
            raise ConfigError(f"{out} holds chunks but no {MANIFEST}; choose another --out")
        return
    if not resume:
        raise ConfigError(f"{out} already holds samples; add --resume to continue it or choose another --out")
    old = read_manifest(out)
    for key in _IDENTITY:
        if old.get(key) != manifest[key]:
            what = "hardware profile" if key == "hardware" else key
            raise ConfigError(f"--resume: {what} differs from the run in {out} "
                              f"(was {str(old.get(key))[:80]}); use the same arguments or another --out")


@contextlib.contextmanager
def backend_context(backend: Backend) -> Iterator[None]:
    """joblib's backend for `backend`; dask/ray connect to the cluster named by the usual variables."""
    import joblib

    if backend is Backend.LOKY:
        yield
        return
    if backend is Backend.DASK:
        try:
            from dask.distributed import Client
        except ImportError:
            raise ConfigError("--backend dask needs dask.distributed: pip install 'vtrain-ml[dask]' "
                              "(then set DASK_SCHEDULER_ADDRESS to use an existing cluster)") from None
        with Client(os.environ.get("DASK_SCHEDULER_ADDRESS")), joblib.parallel_config(backend="dask"):
            yield
        return
    try:
        import ray
        from ray.util.joblib import register_ray
    except ImportError:
        raise ConfigError("--backend ray needs ray: pip install 'vtrain-ml[ray]' "
                          "(then set RAY_ADDRESS to use an existing cluster)") from None
    ray.init(address=os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True)
    register_ray()
    with joblib.parallel_config(backend="ray"):
        yield


def generate(config: GenerateConfig, out: str | Path, resume: bool = False,
             progress: bool = True, stop: Callable[[], bool] | None = None) -> GenerateReport:
    """Sample `config.space`, simulate every sample, write the folder `out` (see module doc).
    `stop`: asked after each saved task; True raises `KeyboardInterrupt` there (the CLI's
    record of a Ctrl-C or SIGTERM whose own exception was swallowed on its way)."""
    from tqdm import tqdm

    out = Path(out)
    sample = draw(config.space, config.hardware, config.n, config.seed, config.method)
    manifest = manifest_for(config, sample.summary())
    _check_resume(out, manifest, resume)
    write_json_atomic(out / MANIFEST, manifest)
    # chunks follow pipeline-plan order, so each worker builds every schedule plan about once
    order = sorted(range(config.n), key=lambda i: plan_key(sample.records[i]))
    chunks = [order[s:s + config.chunk_size] for s in range(0, config.n, config.chunk_size)]
    ranges = {i: task_ranges(len(c)) for i, c in enumerate(chunks) if not finished_chunk(out, i)}
    saved = Checkpoints(out, {i: len(r) for i, r in ranges.items()}, config.checkpoint_s)
    work = [(i, t, chunks[i][a:b]) for i, r in ranges.items() for t, (a, b) in enumerate(r)
            if t in saved.pending(i)]
    todo = sum(len(members) for *_, members in work)
    began = time.perf_counter()
    results = _simulate(config, sample.records, work)
    with contextlib.closing(results), tqdm(total=config.n, initial=config.n - todo, unit="sample",
                                           disable=not progress, smoothing=0.1) as bar:
        for (chunk, task, members), df in zip(work, results, strict=True):
            df.insert(0, "sample_index", members)
            saved.add(chunk, task, df)
            bar.update(len(df))
            if stop is not None and stop():
                raise KeyboardInterrupt
    return GenerateReport(out, config.n, todo, time.perf_counter() - began, sample.summary())


def _simulate(config: GenerateConfig, records: Sequence[Mapping[str, Any]],
              work: list[tuple[int, int, list[int]]]) -> Generator[pd.DataFrame, None, None]:
    """The tasks' tables in order, on the configured backend. However the loop ends (done, an
    exception, Ctrl-C, SIGTERM through the CLI), local worker processes are stopped with it:
    loky keeps idle workers for reuse, which a killed generator would otherwise leave behind."""
    import joblib

    hardware = dict(config.hardware)
    tasks = (joblib.delayed(simulate_records)([records[i] for i in members], hardware)
             for *_, members in work)
    finished = False
    try:
        with backend_context(config.backend):
            yield from joblib.Parallel(n_jobs=config.jobs, return_as="generator")(tasks)
        finished = True
    finally:
        if not finished and config.backend is Backend.LOKY:
            stop_local_workers()


def stop_local_workers() -> None:
    """Kill joblib's reusable local (loky) workers now, instead of after their idle timeout."""
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=False, kill_workers=True)
