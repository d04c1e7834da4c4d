"""Fit the few physical parameters of the hardware model to measured iterations.

Robust least squares (scipy `least_squares`, soft-L1 loss) on log(predicted / measured), each
parameter bounded to a physical range and optimized in a normalized (log for times) coordinate.
The parameters are global -- GEMM efficiency and its depth dependence, memory bandwidth
efficiency, per-kernel launch gap and host dispatch floor, collective bus efficiency and
latency intra- and inter-node, p2p efficiency -- never one per row or per layout, so a dozen runs
fitted predict thousands. Accuracy is reported by k-fold cross-validation: each fold is predicted
by parameters fitted without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from joblib import Parallel, delayed
from scipy.optimize import least_squares

from simulator.specs import Efficiency, HardwareSpec, Job
from vtrain_ml.accuracy.predict import predict_ms


@dataclass(frozen=True)
class Param:
    name: str
    lower: float
    upper: float
    log: bool  # optimize in log space (times spanning decades)


PARAMS: tuple[Param, ...] = (
    Param("gemm_max_efficiency", 0.3, 1.0, False),
    Param("gemm_k_half", 1.0, 1024.0, True),
    Param("memory_efficiency", 0.3, 0.95, False),
    Param("kernel_launch_s", 1e-6, 3e-5, True),
    Param("host_overhead_s", 1e-6, 3e-4, True),
    Param("intra_bus_efficiency", 0.2, 1.0, False),
    Param("inter_bus_efficiency", 0.1, 1.0, False),
    Param("intra_latency_s", 1e-6, 2e-4, True),
    Param("inter_latency_s", 1e-6, 5e-4, True),
    Param("p2p_efficiency", 0.02, 1.0, False),
    Param("collective_table_scale", 0.5, 5.0, True),
    Param("collective_overhead_s", 1e-7, 5e-4, True),
    Param("microbatch_overhead_s", 1e-6, 2e-2, True),
)


def _to_unit(value: float, p: Param) -> float:
    lo, hi, v = (np.log(p.lower), np.log(p.upper), np.log(value)) if p.log else (p.lower, p.upper, value)
    return float(np.clip((v - lo) / (hi - lo), 0.0, 1.0))


def _from_unit(u: float, p: Param) -> float:
    if p.log:
        return float(np.exp(np.log(p.lower) + u * (np.log(p.upper) - np.log(p.lower))))
    return p.lower + u * (p.upper - p.lower)


def with_params(hardware: HardwareSpec, values: dict[str, float]) -> HardwareSpec:
    return hardware.model_copy(update={"efficiency": hardware.efficiency.model_copy(update=values)})


@dataclass(frozen=True)
class Fit:
    params: dict[str, float]
    train_mape: float
    evaluations: int


def fit(jobs: list[Job], measured_ms: np.ndarray, base: HardwareSpec,
        params: tuple[Param, ...] = PARAMS, max_evaluations: int = 400) -> Fit:
    """Fit `params` of `base` to the measured iteration times of `jobs`."""
    start = np.array([_to_unit(max(getattr(base.efficiency, p.name), p.lower), p) for p in params])
    log_measured = np.log(measured_ms)

    def values(u: np.ndarray) -> dict[str, float]:
        return {p.name: _from_unit(float(x), p) for p, x in zip(params, u, strict=True)}

    def residuals(u: np.ndarray) -> np.ndarray:
        return np.log(predict_ms(jobs, with_params(base, values(u)))) - log_measured

    result = least_squares(residuals, start, bounds=(0.0, 1.0), loss="soft_l1", f_scale=0.05,
                           diff_step=1e-3, max_nfev=max_evaluations, x_scale=1.0)
    fitted = values(result.x)
    pred = predict_ms(jobs, with_params(base, fitted))
    mape = float(np.mean(np.abs(pred - measured_ms) / measured_ms))
    return Fit(fitted, mape, int(result.nfev))


def folds(n: int, k: int, seed: int = 0) -> list[np.ndarray]:
    """k disjoint test-index sets covering 0..n-1 (shuffled with `seed`)."""
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(part) for part in np.array_split(order, k)]


def _fold(jobs: list[Job], measured_ms: np.ndarray, base: HardwareSpec, test: np.ndarray,
          params: tuple[Param, ...]) -> np.ndarray:
    train = np.setdiff1d(np.arange(len(jobs)), test)
    fitted = fit([jobs[i] for i in train], measured_ms[train], base, params)
    return predict_ms([jobs[i] for i in test], with_params(base, fitted.params))


def cross_validate(jobs: list[Job], measured_ms: np.ndarray, base: HardwareSpec, k: int = 5,
                   seed: int = 0, params: tuple[Param, ...] = PARAMS, n_jobs: int = 1) -> np.ndarray:
    """Out-of-fold predictions (ms): every row predicted by a fit that never saw it. Folds run
    in `n_jobs` processes (joblib; -1 = all cores)."""
    parts = folds(len(jobs), k, seed)
    runs = Parallel(n_jobs=n_jobs)(delayed(_fold)(jobs, measured_ms, base, test, params) for test in parts)
    predicted = np.empty(len(jobs))
    for test, values in zip(parts, runs, strict=True):
        predicted[test] = values
    return predicted


def holdout(jobs: list[Job], measured_ms: np.ndarray, train_mask: np.ndarray, base: HardwareSpec,
            params: tuple[Param, ...] = PARAMS) -> np.ndarray:
    """Predictions of the rows outside `train_mask` from a fit on the rows inside it."""
    fitted = fit([j for j, t in zip(jobs, train_mask, strict=True) if t], measured_ms[train_mask], base,
                 params)
    test = [j for j, t in zip(jobs, train_mask, strict=True) if not t]
    return predict_ms(test, with_params(base, fitted.params))


__all__ = ["PARAMS", "Efficiency", "Fit", "Param", "cross_validate", "fit", "folds", "holdout",
           "with_params"]
