"""Calibration recovers known parameters, reports what it cannot determine, and cross-validates
without leaking (the accuracy targets on measured runs: test_measured_accuracy.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.job.catalog import resolve_hardware
from vtrain_ml.accuracy import calibration
from vtrain_ml.accuracy.calibration import (
    PARAMS,
    affected_rows,
    bound_notes,
    cross_validate,
    cross_validate_folds,
    fit,
    folds,
    with_params,
)
from vtrain_ml.accuracy.measurements import read_measurements
from vtrain_ml.accuracy.predict import jobs_for, predict_ms, score
from vtrain_ml.accuracy.runs import read_runs

DATA = Path(__file__).resolve().parents[2] / "data" / "measured"
TRUE = {"gemm_max_efficiency": 0.62, "host_overhead_s": 7e-5, "microbatch_overhead_s": 6e-4}


def _synthetic():
    rows = read_measurements([DATA / "a100_single_node.csv"]).rows.iloc[::4]  # 36 layouts/sizes
    jobs = jobs_for(rows, "a100-80gb")
    base = resolve_hardware("a100-80gb")
    subset = tuple(p for p in PARAMS if p.name in TRUE)
    return jobs, base, subset, predict_ms(jobs, with_params(base, TRUE))


def test_calibration_recovers_known_parameters_exactly_without_noise():
    jobs, base, subset, truth = _synthetic()
    fitted = fit(jobs, truth, base, params=subset)
    for name, value in TRUE.items():
        assert fitted.params[name] == pytest.approx(value, rel=0.01), name


def test_calibration_with_noisy_runs_recovers_the_dominant_parameters_and_the_truth():
    jobs, base, subset, truth = _synthetic()
    noisy = truth * np.random.default_rng(0).normal(1.0, 0.01, size=truth.size)
    fitted = fit(jobs, noisy, base, params=subset)
    # GEMM efficiency and host dispatch dominate these runs; the per-micro-batch overhead is a
    # small share of them, so 1% noise leaves it loosely determined -- but the fitted model
    # predicts the noise-free truth far better than the noise level
    for name in ("gemm_max_efficiency", "host_overhead_s"):
        assert fitted.params[name] == pytest.approx(TRUE[name], rel=0.05), name
    predicted = predict_ms(jobs, with_params(base, fitted.params))
    assert score(predicted, truth).mape < 0.005


NETWORK = {"intra_bus_efficiency", "inter_bus_efficiency", "intra_latency_s", "inter_latency_s",
           "p2p_efficiency", "collective_table_scale", "collective_overhead_s"}
H100_TRUE = {"gemm_max_efficiency": 0.62, "host_overhead_s": 9e-5, "memory_efficiency": 0.55}


def _h100_jobs():  # the 16 shipped single-GPU H100 jobs (three stacks, host- to GPU-bound)
    return [r.job for r in read_runs([DATA / "h100" / "runs.csv"]).runs], resolve_hardware("h100-sxm-80gb")


def test_calibration_recovers_known_h100_parameters_with_every_parameter_free():
    jobs, base = _h100_jobs()
    truth = predict_ms(jobs, with_params(base, H100_TRUE))
    fitted = fit(jobs, truth, base)
    for name, value in H100_TRUE.items():
        assert fitted.params[name] == pytest.approx(value, rel=0.01), name
    # single-GPU runs have no collective or pipeline transfer: nothing to fit there
    assert set(fitted.unused) == NETWORK
    assert all(fitted.params[n] == getattr(base.efficiency, n) for n in NETWORK)


def test_parameters_that_no_run_depends_on_are_found_without_fitting():
    jobs, base = _h100_jobs()
    counts = affected_rows(jobs, base, PARAMS)
    assert {n for n, c in counts.items() if c == 0} == NETWORK
    # every row pays host dispatch; a fully host-bound row may not feel GEMM speed at all
    assert counts["host_overhead_s"] == 16 and 8 <= counts["gemm_max_efficiency"] <= 16


def test_frozen_parameters_keep_their_exact_start_value():
    jobs, base = _h100_jobs()
    truth = predict_ms(jobs, with_params(base, H100_TRUE))
    subset = tuple(p for p in PARAMS if p.name in {*H100_TRUE, "microbatch_overhead_s"})
    fitted = fit(jobs, truth, base, params=subset, freeze=("memory_efficiency", "microbatch_overhead_s"))
    assert fitted.params["memory_efficiency"] == 0.8 and fitted.params["microbatch_overhead_s"] == 0.0
    assert fitted.frozen == ("memory_efficiency", "microbatch_overhead_s")


def test_a_parameter_pushed_past_its_physical_bound_is_reported_with_what_it_sets():
    jobs, base = _h100_jobs()
    # GEMMs at 20% of peak: below the 0.3 floor the fit allows
    truth = predict_ms(jobs, with_params(base, {"gemm_max_efficiency": 0.2}))
    subset = tuple(p for p in PARAMS if p.name in {"gemm_max_efficiency", "microbatch_overhead_s"})
    fitted = fit(jobs, truth, base, params=subset)
    assert fitted.at_bound == {"gemm_max_efficiency": "lower"}  # micro-batch overhead at 0 is no warning
    (note,) = bound_notes(jobs, truth, base, fitted, subset)
    assert (note.name, note.side, note.start) == ("gemm_max_efficiency", "lower", 0.8)
    assert note.value == pytest.approx(0.3)
    assert 8 <= note.rows <= 16 and note.total_rows == 16 and note.mape_at_start > note.mape_fitted
    sentence = note.sentence()
    assert "ended at its lower bound" in sentence and "matrix multiply" in sentence
    assert "--freeze gemm_max_efficiency" in sentence


def test_folds_partition_the_rows_without_overlap():
    parts = folds(23, 5, seed=1)
    assert sorted(np.concatenate(parts).tolist()) == list(range(23))
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1


def test_each_fold_is_fitted_on_exactly_the_rows_outside_it(monkeypatch):
    """The fit of a fold never receives that fold's test rows (a leak would make the cross-validated
    error an in-sample error): each fit call sees exactly the complement of one fold."""
    jobs, base, subset, truth = _synthetic()
    jobs, truth = jobs[:9], truth[:9]  # every row's measured time is distinct: it names the row
    assert len(set(truth.tolist())) == len(truth)
    fitted_rows: list[frozenset[float]] = []

    def spy(fit_jobs, measured_ms, *args, **kwargs):  # type: ignore[no-untyped-def]
        assert len(fit_jobs) == len(measured_ms)
        fitted_rows.append(frozenset(measured_ms.tolist()))
        return fit(fit_jobs, measured_ms, *args, **kwargs)

    monkeypatch.setattr(calibration, "fit", spy)
    tested = [frozenset(truth[test].tolist())
              for test, _ in cross_validate_folds(jobs, truth, base, k=3, params=subset[:1])]
    everything = frozenset(truth.tolist())
    assert len(tested) == len(fitted_rows) == 3
    assert sorted(map(sorted, fitted_rows)) == sorted(sorted(everything - t) for t in tested)
    assert all(not (f & t) for f, t in zip(fitted_rows, tested, strict=True))


def test_cross_validated_error_exceeds_the_training_error_on_noisy_runs():
    """On runs with 5% noise, a fit predicts the rows it saw better than the rows it did not: the
    out-of-fold MAPE must be above the in-sample one (equal if every fold saw all rows)."""
    jobs, base, subset, truth = _synthetic()
    jobs, truth = jobs[:12], truth[:12]
    noisy = truth * np.random.default_rng(1).normal(1.0, 0.05, size=truth.size)
    params = subset[:1]  # gemm_max_efficiency alone: a fast, well-determined fit
    in_sample = score(predict_ms(jobs, with_params(base, fit(jobs, noisy, base, params).params)), noisy).mape
    out_of_fold = score(cross_validate(jobs, noisy, base, k=4, params=params), noisy).mape
    assert out_of_fold > in_sample * 1.02, (out_of_fold, in_sample)
