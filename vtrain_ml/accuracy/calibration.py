"""Fit the few physical parameters of the hardware model to measured iterations.

Robust least squares (scipy `least_squares`, soft-L1 loss) on log(predicted / measured), each
parameter bounded to a physical range and optimized in a normalized (log for times) coordinate.
The parameters are global -- GEMM efficiency and its depth dependence, memory bandwidth
efficiency, per-kernel launch gap and host dispatch cost, collective bus efficiency and
latency intra- and inter-node, p2p efficiency -- never one per row or per layout, so a dozen runs
fitted predict thousands. A parameter that no row depends on (e.g. inter-node latency for
single-GPU runs) is found by moving it once and left at its starting value. Accuracy is reported
by k-fold cross-validation: each fold is predicted by parameters fitted without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
from joblib import Parallel, delayed
from scipy.optimize import least_squares

from simulator.job.specs import Efficiency, HardwareSpec, Job
from vtrain_ml.accuracy.predict import predict_ms


@dataclass(frozen=True)
class Param:
    name: str
    lower: float
    upper: float
    log: bool  # optimize in log space (times spanning decades)
    sets: str  # what it sets, i.e. which jobs inherit its fitted value
    lower_means_none: bool = False  # the lower bound stands for "no such cost": not a warning


PARAMS: tuple[Param, ...] = (
    Param("gemm_max_efficiency", 0.3, 1.0, False, "every matrix multiply's achievable FLOP rate"),
    Param("gemm_k_half", 1.0, 1024.0, True, "how much shallow GEMMs (small hidden per tp) slow down"),
    Param("memory_efficiency", 0.3, 0.95, False, "memory-bound kernels (norms, activations, softmax)"),
    Param("kernel_launch_s", 1e-6, 3e-5, True, "the GPU-side gap between kernels"),
    Param("host_overhead_s", 1e-6, 3e-4, True, "host dispatch per kernel (small, host-bound jobs)"),
    Param("intra_bus_efficiency", 0.2, 1.0, False, "collectives inside a node (tp, dp within a node)"),
    Param("inter_bus_efficiency", 0.1, 1.0, False, "collectives across nodes (dp, tp spanning nodes)"),
    Param("intra_latency_s", 1e-6, 2e-4, True, "small collectives inside a node"),
    Param("inter_latency_s", 1e-6, 5e-4, True, "small collectives across nodes"),
    Param("p2p_efficiency", 0.02, 1.0, False, "pipeline send/receive between stages (pp > 1, across "
                                               "nodes above all)"),
    Param("collective_table_scale", 0.5, 5.0, True, "collective times read from nccl-tests tables"),
    Param("collective_overhead_s", 1e-7, 5e-4, True, "host time per collective call", True),
    Param("microbatch_overhead_s", 1e-6, 2e-2, True, "framework work per micro-batch step", True),
)
BOUND_MARGIN = 0.02  # normalized distance from a bound that counts as "at the bound"
F_SCALE = 0.05  # soft-L1 loss: errors beyond ~5% count linearly, not quadratically
DIFF_STEP = 1e-3  # forward-difference step of the Jacobian, relative (normalized coordinates)

Progress = Callable[[int, float], None]  # (evaluations so far, train MAPE of the latest)


def _to_unit(value: float, p: Param) -> float:
    lo, hi, v = (np.log(p.lower), np.log(p.upper), np.log(value)) if p.log else (p.lower, p.upper, value)
    return float(np.clip((v - lo) / (hi - lo), 0.0, 1.0))


def _from_unit(u: float, p: Param) -> float:
    if p.log:
        return float(np.exp(np.log(p.lower) + u * (np.log(p.upper) - np.log(p.lower))))
    return p.lower + u * (p.upper - p.lower)


def with_params(hardware: HardwareSpec, values: dict[str, float]) -> HardwareSpec:
    return hardware.model_copy(update={"efficiency": hardware.efficiency.model_copy(update=values)})


def start_value(base: HardwareSpec, p: Param) -> float:
    """The base hardware's value, clipped into the parameter's physical range."""
    return float(np.clip(getattr(base.efficiency, p.name), p.lower, p.upper))


@dataclass(frozen=True)
class Fit:
    params: dict[str, float]  # every parameter of `params`, fitted or left at its start
    train_mape: float
    evaluations: int
    affected_rows: dict[str, int] = field(default_factory=dict)  # rows each parameter moves
    at_bound: dict[str, str] = field(default_factory=dict)  # name -> "lower" / "upper"
    frozen: tuple[str, ...] = ()
    capped: bool = False  # stopped at its evaluation budget (the best point found is kept)

    @property
    def unused(self) -> tuple[str, ...]:
        """Parameters no row depends on: left at their start value."""
        return tuple(name for name, n in self.affected_rows.items() if n == 0)


# A fit's work, bounded two ways. It stops when a step lowers the robust loss by less than FTOL
# of it (scipy's default, 1e-8, let a fit crawl along a flat valley of the loss: on the 195 A100
# rows the folds of the cross-validation took 213-331 simulations of their rows where the full
# fit took 113, for train MAPEs within 0.1 point), and it never simulates its rows more than
# `evaluation_cap` times, every simulation counted: scipy's `max_nfev` counts only the steps,
# not the finite-difference Jacobian's simulations, so the former cap of 400 allowed
# 400 x (parameters + 1) = 5,600 simulations of every row, the 12-minute fold of issue 26.
FTOL = 1e-2
JACOBIANS = 20


def evaluation_cap(free: int) -> int:
    """Most simulations of its rows a fit of `free` parameters may make."""
    return JACOBIANS * (free + 1)


def affected_masks(jobs: list[Job], base: HardwareSpec, params: tuple[Param, ...]) -> dict[str, np.ndarray]:
    """Per parameter, the jobs whose predicted time moves when it moves (none: the data cannot
    fit it). Computed once per calibration: a fold's are the rows of its training set."""
    reference = np.log(predict_ms(jobs, base))
    masks = {}
    for p in params:
        u = _to_unit(start_value(base, p), p)
        moves = np.zeros(len(jobs), bool)
        for step in {min(u + 0.3, 1.0), max(u - 0.3, 0.0)} - {u}:  # both ways: max() may hide one
            shifted = np.log(predict_ms(jobs, with_params(base, {p.name: _from_unit(step, p)})))
            moves |= np.abs(shifted - reference) > 1e-6
        masks[p.name] = moves
    return masks


def affected_rows(jobs: list[Job], base: HardwareSpec, params: tuple[Param, ...]) -> dict[str, int]:
    """How many jobs' predicted times move when each parameter moves (0: the data cannot fit it)."""
    return {name: int(mask.sum()) for name, mask in affected_masks(jobs, base, params).items()}


class _Spent(Exception):
    """The fit's evaluation budget is used up."""


@dataclass
class _Objective:
    """The fit's residuals (log predicted / measured), every simulation of the rows counted
    against `cap_rows` (the finite-difference Jacobian's included); the best point seen (by the
    fitted soft-L1 loss) is kept for when the cap stops the fit."""

    jobs: list[Job]
    log_measured: np.ndarray
    base: HardwareSpec
    starts: dict[str, float]
    free: tuple[Param, ...]
    cap_rows: int
    progress: Progress | None = None
    simulated_rows: int = 0
    calls: int = 0
    best: tuple[float, np.ndarray | None] = (np.inf, None)

    def values(self, u: np.ndarray) -> dict[str, float]:
        return {**self.starts, **{p.name: _from_unit(float(x), p) for p, x in zip(self.free, u, strict=True)}}

    def _log_predict(self, u: np.ndarray) -> np.ndarray:
        if self.simulated_rows + len(self.jobs) > self.cap_rows:
            raise _Spent
        self.simulated_rows += len(self.jobs)
        return np.log(predict_ms(self.jobs, with_params(self.base, self.values(u))))

    def residuals(self, u: np.ndarray) -> np.ndarray:
        error = self._log_predict(u) - self.log_measured
        self.calls += 1
        loss = float(np.sum(np.sqrt(1 + (error / F_SCALE) ** 2) - 1))  # soft_l1, as fitted
        if loss < self.best[0]:
            self.best = (loss, np.array(u, dtype=float))
        if self.progress:
            self.progress(self.calls, float(np.mean(np.abs(np.expm1(error)))))
        return error


def fit(jobs: list[Job], measured_ms: np.ndarray, base: HardwareSpec,
        params: tuple[Param, ...] = PARAMS, max_evaluations: int | None = None, freeze: tuple[str, ...] = (),
        progress: Progress | None = None, masks: dict[str, np.ndarray] | None = None) -> Fit:
    """Fit `params` of `base` (except `freeze`, and those no job depends on) to the measured
    iteration times (ms) of `jobs`, in at most `max_evaluations` simulations of all the rows
    (default `evaluation_cap`). `masks`: `affected_masks` of these jobs, if already known."""
    fitted_params = tuple(p for p in params if p.name not in freeze)
    if masks is None:
        masks = affected_masks(jobs, base, fitted_params)
    affected = {p.name: int(masks[p.name].sum()) for p in fitted_params}
    free = tuple(p for p in params if affected.get(p.name, 0) > 0)
    cap = max_evaluations or evaluation_cap(len(free))
    objective = _Objective(jobs, np.log(measured_ms), base,
                           {p.name: float(getattr(base.efficiency, p.name)) for p in params},  # exact
                           free, cap * len(jobs), progress)
    u, capped = np.array([_to_unit(start_value(base, p), p) for p in free]), False
    if free:
        try:
            u = least_squares(objective.residuals, u, bounds=(0.0, 1.0), loss="soft_l1", f_scale=F_SCALE,
                              diff_step=DIFF_STEP, max_nfev=cap, x_scale=1.0, ftol=FTOL).x
        except _Spent:
            u, capped = objective.best[1] if objective.best[1] is not None else u, True
    fitted = objective.values(u)
    pred = predict_ms(jobs, with_params(base, fitted))
    bounds = {p.name: ("lower" if x < BOUND_MARGIN else "upper") for p, x in zip(free, u, strict=True)
              if (x < BOUND_MARGIN and not p.lower_means_none) or x > 1 - BOUND_MARGIN}
    evaluations = round(objective.simulated_rows / max(1, len(jobs)))
    return Fit(fitted, float(np.mean(np.abs(pred - measured_ms) / measured_ms)), evaluations, affected,
               bounds, tuple(freeze), capped)


def job_groups(jobs: list[Job]) -> np.ndarray:
    """A group number per row: rows of the same job (GPU aside) share one. Repeated measurements
    of one job are not independent: a fold that fits on one and tests on the other reports an
    error it would not have on a new job."""
    ids: dict[str, int] = {}
    keys = [job.model_dump_json(exclude={"hardware": True, "cluster": {"gpu"}}) for job in jobs]
    return np.array([ids.setdefault(key, len(ids)) for key in keys])


def folds(n: int, k: int, seed: int = 0, groups: np.ndarray | None = None) -> list[np.ndarray]:
    """k disjoint test-index sets covering 0..n-1 (shuffled with `seed`); with `groups`, the rows
    of a group are always in the same set. Groups numbered 0, 1, ... in row order and all distinct
    give the same sets as no groups."""
    groups = np.arange(n) if groups is None else np.asarray(groups)
    order = np.random.default_rng(seed).permutation(int(groups.max()) + 1 if n else 0)
    return [np.sort(np.flatnonzero(np.isin(groups, part))) for part in np.array_split(order, k)]


def _fold(jobs: list[Job], measured_ms: np.ndarray, base: HardwareSpec, test: np.ndarray,
          params: tuple[Param, ...], freeze: tuple[str, ...],
          masks: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    train = np.setdiff1d(np.arange(len(jobs)), test)
    train_masks = {name: mask[train] for name, mask in masks.items()} if masks is not None else None
    fitted = fit([jobs[i] for i in train], measured_ms[train], base, params, freeze=freeze,
                 masks=train_masks)
    return test, predict_ms([jobs[i] for i in test], with_params(base, fitted.params))


def _task(jobs: list[Job], measured_ms: np.ndarray, base: HardwareSpec, test: np.ndarray | None,
          params: tuple[Param, ...], freeze: tuple[str, ...], masks: dict[str, np.ndarray]
          ) -> tuple[np.ndarray | None, Fit | np.ndarray]:
    """A fold's (test rows, their predictions), or, for `test` None, the fit on every row."""
    if test is None:
        return None, fit(jobs, measured_ms, base, params, freeze=freeze, masks=masks)
    return _fold(jobs, measured_ms, base, test, params, freeze, masks)


def calibrate_with_folds(jobs: list[Job], measured_ms: np.ndarray, base: HardwareSpec, k: int, seed: int = 0,
                         params: tuple[Param, ...] = PARAMS, n_jobs: int = 1, freeze: tuple[str, ...] = (),
                         masks: dict[str, np.ndarray] | None = None
                         ) -> Iterator[tuple[np.ndarray | None, Fit | np.ndarray]]:
    """The fit on every row and the k folds' out-of-fold predictions, all as parallel tasks
    (joblib, `n_jobs` processes), each yielded as it finishes: (None, Fit) for the full fit,
    (test indices, predictions in ms) for a fold. Which rows each parameter moves is found once,
    here, not once per fit."""
    fitted_params = tuple(p for p in params if p.name not in freeze)
    masks = masks if masks is not None else affected_masks(jobs, base, fitted_params)
    tests: list[np.ndarray | None] = [None, *(folds(len(jobs), k, seed, job_groups(jobs)) if k else [])]
    yield from Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
        delayed(_task)(jobs, measured_ms, base, test, params, freeze, masks) for test in tests)


def cross_validate_folds(jobs: list[Job], measured_ms: np.ndarray, base: HardwareSpec, k: int = 5,
                         seed: int = 0, params: tuple[Param, ...] = PARAMS, n_jobs: int = 1,
                         freeze: tuple[str, ...] = ()) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(test indices, their predictions in ms) of each fold as it finishes; folds run in `n_jobs`
    processes (joblib; -1 = all cores)."""
    parts = folds(len(jobs), k, seed, job_groups(jobs))
    masks = affected_masks(jobs, base, tuple(p for p in params if p.name not in freeze))
    yield from Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
        delayed(_fold)(jobs, measured_ms, base, test, params, freeze, masks) for test in parts)


def cross_validate(jobs: list[Job], measured_ms: np.ndarray, base: HardwareSpec, k: int = 5,
                   seed: int = 0, params: tuple[Param, ...] = PARAMS, n_jobs: int = 1,
                   freeze: tuple[str, ...] = ()) -> np.ndarray:
    """Out-of-fold predictions (ms): every row predicted by a fit that never saw it."""
    predicted = np.empty(len(jobs))
    for test, values in cross_validate_folds(jobs, measured_ms, base, k, seed, params, n_jobs, freeze):
        predicted[test] = values
    return predicted


def holdout(jobs: list[Job], measured_ms: np.ndarray, train_mask: np.ndarray, base: HardwareSpec,
            params: tuple[Param, ...] = PARAMS) -> np.ndarray:
    """Predictions of the rows outside `train_mask` from a fit on the rows inside it."""
    fitted = fit([j for j, t in zip(jobs, train_mask, strict=True) if t], measured_ms[train_mask], base,
                 params)
    test = [j for j, t in zip(jobs, train_mask, strict=True) if not t]
    return predict_ms(test, with_params(base, fitted.params))


@dataclass(frozen=True)
class BoundNote:
    """A fitted parameter that ended at its physical bound, and what that means."""

    name: str
    value: float
    side: str
    start: float
    rows: int  # fitted rows it affects
    total_rows: int
    mape_fitted: float
    mape_at_start: float  # train MAPE with only this parameter put back to its start value
    sets: str

    def sentence(self) -> str:
        weak = self.mape_at_start - self.mape_fitted < 0.005
        verdict = ("the data barely determine it (holding it at its start value changes the train MAPE "
                   f"from {self.mape_fitted:.1%} to {self.mape_at_start:.1%})" if weak else
                   f"holding it at its start value would raise the train MAPE from {self.mape_fitted:.1%} "
                   f"to {self.mape_at_start:.1%}: it absorbs an effect the model lacks")
        return (f"{self.name} ended at its {self.side} bound ({self.value:.4g}, start {self.start:.4g}); "
                f"it sets {self.sets} and moves {self.rows} of the {self.total_rows} fitted rows; {verdict}. "
                "Jobs unlike these runs inherit this value and may be predicted worse: fit on runs that "
                f"exercise it, or keep it at its start value with --freeze {self.name}")


def bound_notes(jobs: list[Job], measured_ms: np.ndarray, base: HardwareSpec, result: Fit,
                params: tuple[Param, ...] = PARAMS) -> list[BoundNote]:
    notes = []
    by_name = {p.name: p for p in params}
    for name, side in result.at_bound.items():
        start = start_value(base, by_name[name])
        pred = predict_ms(jobs, with_params(base, {**result.params, name: start}))
        notes.append(BoundNote(name, result.params[name], side, start, result.affected_rows[name], len(jobs),
                               result.train_mape, float(np.mean(np.abs(pred - measured_ms) / measured_ms)),
                               by_name[name].sets))
    return notes


__all__ = ["PARAMS", "BoundNote", "Efficiency", "Fit", "Param", "affected_masks", "affected_rows",
           "bound_notes", "calibrate_with_folds", "cross_validate", "cross_validate_folds", "evaluation_cap",
           "fit", "folds", "holdout", "job_groups", "with_params"]
