"""The one frozen result of a schedule; the table, JSON, plots and Perfetto trace are views of it.

Metrics follow ElasticFlow's evaluation (Gu et al., ASPLOS'23, Sec. 6): the deadline
satisfaction ratio is the fraction of *all* jobs that finish by their deadline (rejected jobs
count as not satisfied); job completion time (JCT) is finish minus arrival over the jobs that
ran to completion; makespan runs from the first arrival to the last completion; GPU utilization
is allocated GPU-seconds over capacity times makespan (restart time included: the GPUs are held).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from vtrain_ml.scheduler.engine import JobRun


class Outcome(StrEnum):
    MET = "met"
    MISSED = "missed"  # ran, finished after its deadline (or never finished)
    REJECTED = "rejected"  # turned away by admission control, or cannot run on this cluster


@dataclass(frozen=True)
class Allocation:
    time_s: float
    gpus: int
    plan: str  # layout label, "" when the job holds no GPUs


@dataclass(frozen=True)
class JobOutcome:
    name: str
    row: int  # 1-based trace row
    model: str
    arrival_s: float
    deadline_s: float
    iterations: int
    outcome: Outcome
    finish_s: float | None
    restarts: int
    gpu_seconds: float
    history: tuple[Allocation, ...]
    why_missed: str = ""  # for a missed job: the oracle's error on the plans it ran, if any

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s

    @property
    def plans(self) -> list[str]:
        return list(dict.fromkeys(a.plan for a in self.history if a.plan))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "row": self.row, "model": self.model, "arrival_s": self.arrival_s,
                "deadline_s": self.deadline_s, "iterations": self.iterations,
                "outcome": self.outcome.value, "finish_s": self.finish_s, "jct_s": self.jct_s,
                "restarts": self.restarts, "gpu_hours": self.gpu_seconds / 3600, "plans": self.plans,
                "allocations": [[a.time_s, a.gpus, a.plan] for a in self.history],
                "why_missed": self.why_missed}


def outcome_of(run: JobRun) -> JobOutcome:
    history = tuple(Allocation(t, g, p) for t, g, p in run.history)
    if run.status == "rejected":
        outcome = Outcome.REJECTED
    elif run.finish_s is not None and run.finish_s <= run.work.deadline_s * (1 + 1e-12):
        outcome = Outcome.MET
    else:
        outcome = Outcome.MISSED
    gpu_seconds = sum(a.gpus * (b.time_s - a.time_s) for a, b in itertools.pairwise(history))
    w = run.work
    why = _why_missed(run) if outcome is Outcome.MISSED else ""
    return JobOutcome(w.name, w.row + 1, w.shape.model.name, w.arrival_s, w.deadline_s, w.iterations,
                      outcome, run.finish_s, run.restarts, gpu_seconds, history, why)


def _why_missed(run: JobRun) -> str:
    """The oracle's worst under-prediction on the plans the job ran, or that there was none (a
    policy without admission control, FIFO / EDF, promises nothing)."""
    worst: tuple[float, str] | None = None
    for count in sorted({g for _, g, _ in run.history if g > 0}):
        plan = run.curve.at(count)
        excess = plan.iteration_time_s / plan.predicted_time_s - 1
        if excess > 1e-9 and (worst is None or excess > worst[0]):
            worst = (excess, f"the oracle predicted {plan.predicted_time_s:.4g} s per iteration on {count} "
                             f"GPUs ({plan.layout.label}), it ran at {plan.iteration_time_s:.4g} s "
                             f"(+{excess:.1%})")
    if worst is not None:
        return worst[1]
    return f"no plan it ran was mispredicted; it was re-allocated {run.restarts} times"


@dataclass(frozen=True)
class ScheduleResult:
    policy: str
    oracle: str
    num_gpus: int
    gpu: str
    restart_s: float
    jobs: tuple[JobOutcome, ...]
    decisions: int = 0
    oracle_info: dict[str, Any] = field(default_factory=dict)

    @property
    def completed(self) -> list[JobOutcome]:
        return [j for j in self.jobs if j.finish_s is not None]

    def count(self, outcome: Outcome) -> int:
        return sum(j.outcome is outcome for j in self.jobs)

    @property
    def deadline_satisfaction_ratio(self) -> float:
        return self.count(Outcome.MET) / len(self.jobs) if self.jobs else 0.0

    def _jcts(self) -> np.ndarray:
        return np.array([j.jct_s for j in self.completed], dtype=float)

    @property
    def average_jct_s(self) -> float | None:
        jct = self._jcts()
        return float(jct.mean()) if jct.size else None

    @property
    def p95_jct_s(self) -> float | None:
        jct = self._jcts()
        return float(np.percentile(jct, 95)) if jct.size else None

    @property
    def makespan_s(self) -> float:
        done = self.completed
        if not done:
            return 0.0
        return max(j.finish_s or 0.0 for j in done) - min(j.arrival_s for j in self.jobs)

    @property
    def gpu_utilization(self) -> float:
        span = self.makespan_s
        return sum(j.gpu_seconds for j in self.jobs) / (self.num_gpus * span) if span > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "policy": self.policy, "oracle": self.oracle, "num_gpus": self.num_gpus, "gpu": self.gpu,
            "restart_s": self.restart_s, "num_jobs": len(self.jobs),
            "deadline_satisfaction_ratio": self.deadline_satisfaction_ratio,
            "average_jct_s": self.average_jct_s, "p95_jct_s": self.p95_jct_s,
            "makespan_s": self.makespan_s, "gpu_utilization": self.gpu_utilization,
            "met": self.count(Outcome.MET), "missed": self.count(Outcome.MISSED),
            "rejected": self.count(Outcome.REJECTED), "completed": len(self.completed),
            "restarts": sum(j.restarts for j in self.jobs), "decisions": self.decisions,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "oracle_info": self.oracle_info, "jobs": [j.to_dict() for j in self.jobs]}
