"""Simulate measured rows and score the predictions (absolute percentage errors)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from simulator.simulate import simulate
from simulator.specs import HardwareSpec, Job
from vtrain_ml.accuracy.measurements import row_to_job


def jobs_for(rows: pd.DataFrame, hardware: str) -> list[Job]:
    return [row_to_job(r, hardware) for _, r in rows.iterrows()]


def predict_ms(jobs: list[Job], hardware: HardwareSpec | None = None) -> np.ndarray:
    """Simulated iteration times (ms); `hardware` replaces the jobs' hardware when given."""
    out = np.empty(len(jobs))
    for i, job in enumerate(jobs):
        if hardware is not None:
            job = job.model_copy(update={"hardware": hardware})
        out[i] = simulate(job).iteration_time_s * 1e3
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
    ape = np.abs(predicted - measured) / measured
    return Score(int(ape.size), float(ape.mean()), float(np.median(ape)),
                 float(np.quantile(ape, 0.9)), float(ape.max()), float((predicted < measured).mean()))


def with_predictions(rows: pd.DataFrame, predicted: np.ndarray) -> pd.DataFrame:
    out = rows.copy()
    out["predicted_ms"] = predicted
    out["ape"] = np.abs(predicted - out.measured_ms) / out.measured_ms
    out["signed_error"] = (predicted - out.measured_ms) / out.measured_ms
    return out


def by_group(table: pd.DataFrame) -> pd.DataFrame:
    """Error per (tp, dp, pp) layout."""
    grouped = table.groupby(["tp", "dp", "pp"])
    return grouped.agg(n=("ape", "size"), mape=("ape", "mean"),
                       mean_signed=("signed_error", "mean")).reset_index()
