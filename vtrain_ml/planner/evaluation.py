"""One evaluation of a candidate job -- exact (the simulator) or predicted (the surrogate).

Both kinds carry the same fields, derived from the iteration time by the simulator's own formulas
(`simulator.report.metrics`), so a predicted and an exact evaluation of one job differ only where the
surrogate is wrong.
"""

from __future__ import annotations

import atexit
import hashlib
import math
import os
import pickle
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from simulator.graph.flops import model_flops_per_iteration
from simulator.graph.params import total_params
from simulator.job.specs import GiB, Job
from simulator.memory.fit import required_from_peak
from simulator.report.metrics import cost_usd, usd_per_million_tokens, utilization
from simulator.simulate import simulate

CHUNK_JOBS = 32  # most jobs per worker call (at least 4 calls per worker balance the load)
JOB_PARTS = ("model", "training", "parallel", "cluster", "hardware")
# Worker-side memo: digest of a pickled base job -> the job. A pure function of its key (the
# digest names the bytes), so a hit returns what unpickling would, with the same hardware object
# every time; bounded, and cleared wholesale when full.
_BASES: dict[str, Job] = {}
_MAX_BASES = 8


@dataclass(frozen=True)
class Evaluation:
    iteration_time_s: float
    peak_memory_bytes: float
    fits_in_memory: bool
    cost_per_iteration_usd: float
    mfu: float
    parameters: int
    num_gpus: int
    time_to_train_s: float | None = None
    cost_to_train_usd: float | None = None
    # the plan's GPU memory (plans of a hardware list differ); None in evaluations stored before
    memory_capacity_bytes: float | None = None
    # what the device must hold for that peak: the allocator's least reservation and the context
    # (simulator.memory.fit, what `fits_in_memory` compares); None in evaluations stored before
    memory_required_bytes: float | None = None
    # global batch x sequence length; None in evaluations stored before
    tokens_per_iteration: float | None = None

    @property
    def cost_usd(self) -> float:
        """Dollars to train the token budget when one is given, else per iteration."""
        return self.cost_to_train_usd if self.cost_to_train_usd is not None else self.cost_per_iteration_usd

    @property
    def usd_per_million_tokens(self) -> float | None:
        """`simulator.report.metrics.usd_per_million_tokens` ("which GPU should I rent?"), with
        or without a token budget; None for an evaluation stored before it."""
        if not self.tokens_per_iteration:
            return None
        return usd_per_million_tokens(self.cost_per_iteration_usd, self.tokens_per_iteration)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cost_usd": self.cost_usd,
                "usd_per_million_tokens": self.usd_per_million_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        return cls(**{k: v for k, v in data.items() if k not in _DERIVED})


_DERIVED = ("cost_usd", "usd_per_million_tokens")  # properties that `to_dict` writes beside the fields


def evaluation_from_time(job: Job, iteration_time_s: float, peak_memory_bytes: float,
                         fits_in_memory: bool | None = None) -> Evaluation:
    """Cost, MFU and time to train of `job` at a given iteration time."""
    tokens = job.training.train_tokens
    per_iteration = job.training.global_batch_size * job.model.seq_length
    tokens_per_s = per_iteration / iteration_time_s
    to_train = tokens / tokens_per_s if tokens else None
    required = float(required_from_peak(peak_memory_bytes, job.hardware.reserved_memory_GiB * GiB))
    fits = required <= job.hardware.memory_bytes if fits_in_memory is None else fits_in_memory
    return Evaluation(
        iteration_time_s=float(iteration_time_s),
        peak_memory_bytes=float(peak_memory_bytes),
        fits_in_memory=bool(fits),
        cost_per_iteration_usd=cost_usd(iteration_time_s, job),
        mfu=utilization(model_flops_per_iteration(job), iteration_time_s, job),
        parameters=int(total_params(job.model)),
        num_gpus=job.cluster.num_gpus,
        time_to_train_s=to_train,
        cost_to_train_usd=cost_usd(to_train, job) if to_train else None,
        memory_capacity_bytes=job.hardware.memory_bytes,
        memory_required_bytes=required,
        tokens_per_iteration=float(per_iteration),
    )


def evaluate_exact(job: Job) -> Evaluation:
    """Simulate `job` with the exact simulator."""
    result = simulate(job)
    return evaluation_from_time(job, result.iteration_time_s, result.peak_memory_bytes,
                                result.fits_in_memory)


def evaluate_exact_many(jobs: Sequence[Job], n_jobs: int = 1) -> list[Evaluation]:
    """Exact evaluations of many jobs, in order; `n_jobs` > 1 simulates in worker processes.

    The workers (joblib's loky processes, reused between calls, `workers`) receive the first job
    once as a pickled blob keyed by its digest, kept in `_BASES`, and per job only the parts that
    differ from it (`job_deltas`: typically the parallel plan and the cluster). Pickling a whole
    job costs about a third of its simulation, and a job unpickled per call brings a fresh
    hardware object, which misses the simulator's memo tables keyed by hardware identity
    (docs/speed.md).
    """
    if n_jobs <= 1 or len(jobs) < 8:
        return [evaluate_exact(job) for job in jobs]
    base, deltas = job_deltas(jobs)
    blob = pickle.dumps(base, protocol=pickle.HIGHEST_PROTOCOL)
    key = hashlib.sha256(blob).hexdigest()
    count = max(1, min(n_jobs, len(jobs)))
    size = max(1, min(CHUNK_JOBS, math.ceil(len(jobs) / (4 * count))))
    chunks = [deltas[i:i + size] for i in range(0, len(deltas), size)]
    pool = workers(n_jobs)
    parts = [f.result() for f in [pool.submit(_evaluate_chunk, key, blob, chunk) for chunk in chunks]]
    return [e for part in parts for e in part]


WORKER_IDLE_S = 300  # a worker with nothing to do for this long exits (joblib's default)


def workers(n_jobs: int) -> Any:
    """This module's own pool of `n_jobs` loky worker processes, kept between calls. Each worker
    ignores Ctrl-C (the search stops between batches; a terminal's Ctrl-C reaches the whole
    process group) and exits as soon as its parent process is gone, so that a killed search
    leaves no idle workers behind (they would otherwise wait out their idle timeout).

    It is not loky's process-wide reusable executor: joblib's `Parallel` (calibration, sample
    generation) takes that one over when its arguments match and expects the attributes of its
    own subclass, so sharing it failed in whichever caller came second."""
    from joblib.externals.loky import ProcessPoolExecutor

    global _POOL
    pool, size = _POOL
    if pool is None or size != n_jobs or pool._flags.shutdown or pool._flags.broken is not None:
        if pool is not None:
            pool.shutdown(wait=False)
        pool = ProcessPoolExecutor(max_workers=n_jobs, timeout=WORKER_IDLE_S, initializer=_worker_start,
                                   initargs=(os.getpid(),))
        _POOL = (pool, n_jobs)
        # shut down before the interpreter tears its modules down: a pool left to the garbage
        # collector at exit printed loky's "Exception ignored in ... weakref_cb" traceback after
        # every search that simulated in workers (unregistered first: one registration, however
        # many pools a process starts)
        atexit.unregister(stop_workers)
        atexit.register(stop_workers)
    return pool


_POOL: tuple[Any, int] = (None, 0)


def stop_workers() -> None:
    """Shut this module's worker processes down now (the next call starts fresh ones, with empty
    memo tables: what a benchmark of cold evaluations needs)."""
    global _POOL
    pool, _ = _POOL
    if pool is not None:
        pool.shutdown(wait=True)
    _POOL = (None, 0)


def _worker_start(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() != parent:  # loky forks workers from the search process: it is gone already
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


PARENT_POLL_S = 0.5


def job_deltas(jobs: Sequence[Job]) -> tuple[Job, list[dict[str, Any]]]:
    """(the first job, per job the parts that differ from it): ``base.model_copy(update=delta)``
    is the job again (its unchanged parts are the base's own objects)."""
    base = jobs[0]
    deltas = []
    for job in jobs:
        delta = {}
        for part in JOB_PARTS:
            mine, theirs = getattr(job, part), getattr(base, part)
            if mine is not theirs and mine != theirs:
                delta[part] = mine
        deltas.append(delta)
    return base, deltas


def _base_job(key: str, blob: bytes) -> Job:
    base = _BASES.get(key)
    if base is None:
        if len(_BASES) >= _MAX_BASES:
            _BASES.clear()
        base = _BASES[key] = pickle.loads(blob)  # our own bytes, from the parent
    return base


def _evaluate_chunk(key: str, blob: bytes, deltas: list[dict[str, Any]]) -> list[Evaluation]:
    """Worker side of `evaluate_exact_many`: the base job once per process, then each delta."""
    base = _base_job(key, blob)
    return [evaluate_exact(base.model_copy(update=delta) if delta else base) for delta in deltas]
