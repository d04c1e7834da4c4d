"""One evaluation of a candidate job -- exact (the simulator) or predicted (the surrogate).

Both kinds carry the same fields, derived from the iteration time by the simulator's own formulas
(`simulator.metrics`), so a predicted and an exact evaluation of one job differ only where the
surrogate is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from simulator.metrics import cost_usd, model_flops_per_iteration, utilization
from simulator.params import total_params
from simulator.simulate import simulate
from simulator.specs import Job


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

    @property
    def cost_usd(self) -> float:
        """Dollars to train the token budget when one is given, else per iteration."""
        return self.cost_to_train_usd if self.cost_to_train_usd is not None else self.cost_per_iteration_usd

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cost_usd": self.cost_usd}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        return cls(**{k: v for k, v in data.items() if k != "cost_usd"})


def evaluation_from_time(job: Job, iteration_time_s: float, peak_memory_bytes: float,
                         fits_in_memory: bool | None = None) -> Evaluation:
    """Cost, MFU and time to train of `job` at a given iteration time."""
    tokens = job.training.train_tokens
    tokens_per_s = job.training.global_batch_size * job.model.seq_length / iteration_time_s
    to_train = tokens / tokens_per_s if tokens else None
    fits = peak_memory_bytes <= job.hardware.memory_bytes if fits_in_memory is None else fits_in_memory
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
    )


def evaluate_exact(job: Job) -> Evaluation:
    """Simulate `job` with the exact simulator."""
    result = simulate(job)
    return evaluation_from_time(job, result.iteration_time_s, result.peak_memory_bytes,
                                result.fits_in_memory)


def evaluate_exact_many(jobs: Sequence[Job], n_jobs: int = 1) -> list[Evaluation]:
    """Exact evaluations of many jobs, in order; `n_jobs` > 1 simulates in worker processes."""
    if n_jobs <= 1 or len(jobs) < 8:
        return [evaluate_exact(job) for job in jobs]
    from joblib import Parallel, delayed

    return list(Parallel(n_jobs=n_jobs, batch_size=4)(delayed(evaluate_exact)(job) for job in jobs))
