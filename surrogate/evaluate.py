"""Scores of a surrogate against exact simulator answers (errors as fractions, not percent).

Iteration time: MAPE, median and P95 absolute percentage error, and Spearman / Kendall rank
correlation (the search ranks candidates, so ordering matters as much as magnitude). Memory: MAPE
and P95. Fits-in-memory: accuracy of predicted memory <= capacity against the simulator's verdict.
Error by region: time MAPE per schedule, per GPU-count decade and per model-size decade.
Throughput: all evaluated rows predicted in one batch, features included.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from simulator.errors import DataError
from simulator.job.specs import HardwareSpec
from surrogate.features import JOB_COLUMNS


def ape(predicted: np.ndarray, actual: np.ndarray) -> np.ndarray:
    return np.abs(predicted - actual) / np.abs(actual)


def _region_errors(df: pd.DataFrame, errors: np.ndarray,
                   hardware: Mapping[str, HardwareSpec] | None) -> dict[str, dict[str, float]]:
    """Mean time error per region; `hardware` maps the table's GPU names to their specs (a
    calibrated file's name is in no catalog, so it must come from the model, never be looked up)."""
    from surrogate.gemm_shapes import NAN_EFFS
    from surrogate.physics import rows_from_columns, stage_params

    columns = {c: df[c].to_numpy() for c in JOB_COLUMNS}
    # parameter counts read no GEMM efficiency: not computing them spares the first run after an
    # install numba's compilation of their array version (~4 s)
    params = stage_params(rows_from_columns(columns, hardware, NAN_EFFS)).total if len(df) else np.array([])
    regions = {
        "schedule": df["schedule"].astype(str).to_numpy(),
        "recompute": df["recompute"].astype(str).to_numpy(),
        "num_gpus": np.array([f"<= {2 ** int(np.ceil(np.log2(n)))}" for n in df["num_gpus"]]),
        "parameters": np.array([f"1e{int(np.floor(np.log10(p)))}" for p in params]),
        "pp": df["pp"].astype(str).to_numpy(),
    }
    out: dict[str, dict[str, float]] = {}
    for name, labels in regions.items():
        out[name] = {str(k): float(errors[labels == k].mean()) for k in sorted(set(labels.tolist()))}
    return out


def evaluate(model: Any, df: pd.DataFrame,
             hardware: Mapping[str, HardwareSpec] | None = None) -> dict[str, Any]:
    """Metrics of `model` (a `Surrogate`) on a samples table with simulator targets.

    hardware: GPU name -> spec of the table's rows (default: the specs the model was trained with).
    """
    for c in ("iteration_time_s", "peak_memory_bytes", "fits_in_memory"):
        if c not in df.columns:
            raise DataError(f"evaluation samples lack column {c}; use a samples folder from generate")
    if len(df) < 2:
        raise DataError("evaluation needs at least 2 samples")
    jobs = df[list(JOB_COLUMNS)]
    start = time.perf_counter()
    pred = model.predict(jobs)
    seconds = time.perf_counter() - start
    t_true = df["iteration_time_s"].to_numpy(dtype=float)
    m_true = df["peak_memory_bytes"].to_numpy(dtype=float)
    t_err = ape(pred["iteration_time_s"].to_numpy(), t_true)
    m_err = ape(pred["peak_memory_bytes"].to_numpy(), m_true)
    fits = pred["fits_in_memory"].to_numpy() == df["fits_in_memory"].to_numpy(dtype=bool)
    return {
        "n": len(df),
        "mape": float(t_err.mean()),
        "median_ape": float(np.median(t_err)),
        "p95_ape": float(np.quantile(t_err, 0.95)),
        "max_ape": float(t_err.max()),
        "spearman": float(stats.spearmanr(pred["iteration_time_s"], t_true).statistic),
        "kendall": float(stats.kendalltau(pred["iteration_time_s"], t_true).statistic),
        "memory_mape": float(m_err.mean()),
        "memory_p95_ape": float(np.quantile(m_err, 0.95)),
        "fits_accuracy": float(fits.mean()),
        "batch_predictions_per_s": float(len(df) / seconds),
        "by_region": _region_errors(df, t_err, hardware or getattr(model, "hardware_", None)),
    }


def baseline_metrics(df_train: pd.DataFrame, df_test: pd.DataFrame) -> dict[str, float]:
    """A trivial baseline: every test job predicted as the median training iteration time."""
    guess = float(np.median(df_train["iteration_time_s"]))
    return {"mape": float(ape(np.full(len(df_test), guess), df_test["iteration_time_s"].to_numpy()).mean())}
