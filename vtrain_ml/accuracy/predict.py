"""Simulate measured runs and score the predictions (absolute percentage errors)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.costs.analytic import KernelModel
from simulator.job.catalog import hardware_fingerprint
from simulator.job.specs import HardwareSpec, Job
from simulator.network.collectives import NetworkModel
from simulator.report.result import SimulationResult
from simulator.simulate import simulate
from vtrain_ml.accuracy.measurements import row_to_job

log = logging.getLogger(__name__)


def jobs_for(rows: pd.DataFrame, hardware: str) -> list[Job]:
    return [row_to_job(r, hardware) for _, r in rows.iterrows()]


def on_hardware(job: Job, hardware: HardwareSpec | None) -> Job:
    return job if hardware is None else job.model_copy(update={"hardware": hardware})


def predict_ms(jobs: list[Job], hardware: HardwareSpec | None = None) -> np.ndarray:
    """Simulated iteration times (ms); `hardware` replaces the jobs' hardware when given."""
    out = np.empty(len(jobs))
    for i, job in enumerate(jobs):
        out[i] = simulate(on_hardware(job, hardware)).iteration_time_s * 1e3
    return out


def memory_terms(result: SimulationResult) -> tuple[float, float]:
    """(peak allocated, peak reserved) bytes per GPU of a simulation.

    Allocated is what `torch.cuda.max_memory_allocated` measures (`peak_allocated_bytes`);
    reserved is what `torch.cuda.max_memory_reserved` shows: the caching allocator's reservation
    of the fullest GPU at its peak (`StageMemory.allocator_reserved_bytes`, simulator.memory.stages).
    """
    peak = max(result.stages, key=lambda s: s.memory.allocated_bytes).memory
    return float(result.peak_allocated_bytes), float(peak.allocator_reserved_bytes)


@dataclass(frozen=True)
class Prediction:
    iteration_s: float
    peak_allocated_bytes: float
    peak_reserved_bytes: float
    fits: bool  # the simulator's verdict: what the allocator must reserve fits the GPU's memory
    required_bytes: float = 0.0  # that least reservation plus the context (simulator.memory.fit)
    decided_by: str = ""  # "allocated" (the allocated peak alone is over) or "reserved"


@dataclass
class ProfileModels:
    """Kernel and network models from a measured profile directory, built once per hardware and
    precision (reading a profile and fitting its interpolators is the slow part)."""

    path: Path
    cache: dict[tuple[str, str], tuple[KernelModel, NetworkModel | None]] = field(default_factory=dict)

    def for_job(self, job: Job) -> tuple[KernelModel, NetworkModel | None]:
        from simulator.costs.profiled import kernel_model_from_profile, network_from_profile

        key = (hardware_fingerprint(job.hardware), job.training.precision.value)
        if key not in self.cache:
            self.cache[key] = (kernel_model_from_profile(self.path, job),
                               network_from_profile(self.path, job))
        return self.cache[key]


def predict(jobs: list[Job], hardware: HardwareSpec | None = None,
            profile: ProfileModels | None = None) -> list[Prediction]:
    """Time and memory of every job (on `hardware` when given, costed from `profile` when given)."""
    out = []
    for job in jobs:
        job = on_hardware(job, hardware)
        kernels, network = profile.for_job(job) if profile else (None, None)
        result = simulate(job, kernels=kernels, network=network)
        allocated, reserved = memory_terms(result)
        out.append(Prediction(result.iteration_time_s, allocated, reserved, result.fits_in_memory,
                              result.memory_required_bytes, result.memory_decided_by))
    return out


@dataclass(frozen=True)
class Score:
    n: int
    mape: float
    median_ape: float
    p90_ape: float
    max_ape: float
    frac_low: float  # share of rows predicted below the measurement

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "mape": self.mape, "median_ape": self.median_ape,
                "p90_ape": self.p90_ape, "max_ape": self.max_ape, "frac_low": self.frac_low}


def score(predicted: np.ndarray, measured: np.ndarray) -> Score:
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    if measured.size == 0:
        return Score(0, float("nan"), float("nan"), float("nan"), float("nan"), float("nan"))
    ape = np.abs(predicted - measured) / measured
    return Score(int(ape.size), float(ape.mean()), float(np.median(ape)),
                 float(np.quantile(ape, 0.9)), float(ape.max()), float((predicted < measured).mean()))


def with_predictions(rows: pd.DataFrame, predicted: np.ndarray) -> pd.DataFrame:
    out = rows.copy()
    out["predicted_ms"] = predicted
    out["ape"] = np.abs(predicted - out.measured_ms) / out.measured_ms
    out["signed_error"] = (predicted - out.measured_ms) / out.measured_ms
    return out


def by_group(table: pd.DataFrame, keys: tuple[str, ...] = ("tp", "dp", "pp")) -> pd.DataFrame:
    """Time error per group of rows (default: per (tp, dp, pp) layout); rows without a time are
    left out."""
    timed = table[table.ape.notna()]
    grouped = timed.groupby(list(keys))
    return grouped.agg(n=("ape", "size"), mape=("ape", "mean"),
                       mean_signed=("signed_error", "mean")).reset_index()
