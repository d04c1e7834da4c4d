"""The README's accuracy table against measured runs, asserted at its targets.

The rows that only simulate (peak memory, the OOM table, the datasheet's time errors: seconds) run in
the default suite; the cross-validated calibrations (minutes: each fold is a fit of 13 parameters)
are `slow` and run by `make bench-accuracy`, whose output the README quotes beside
bench/bench_accuracy.py's table. A target the model does not meet is a strict xfail: it fails the
day the model starts meeting it, so that the README and the test move together. Nothing here is
scored on rows a fit has seen.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from simulator.job.catalog import resolve_hardware
from vtrain_ml.accuracy.calibration import cross_validate, holdout
from vtrain_ml.accuracy.measurements import read_measurements
from vtrain_ml.accuracy.predict import jobs_for, predict, predict_ms, score
from vtrain_ml.accuracy.runs import read_runs
from vtrain_ml.accuracy.validation import Validation, validate

DATA = Path(__file__).resolve().parents[2] / "data" / "measured"
SINGLE, MULTI, H100 = "a100_single_node.csv", "a100_multi_node.csv", "h100/**/runs*.csv"


@functools.cache
def _h100_validation() -> Validation:
    runs = read_runs(sorted(DATA.glob(H100)))
    return validate(runs, predict([r.job for r in runs.runs]))


def _uncalibrated(file: str):  # type: ignore[no-untyped-def]
    runs = read_runs([DATA / file]).timed()
    return score(predict_ms([r.job for r in runs]), np.array([r.iteration_s * 1e3 for r in runs]))


# --- default suite: the memory model and the datasheet, no fit --------------------------------------

def test_h100_peak_allocated_memory_mape_is_within_the_6_percent_target():
    memory = _h100_validation().memory
    assert memory.n == 27  # every timed H100 run with a measured peak (README: 27 rows)
    assert memory.mape <= 0.06


def test_every_measured_h100_run_that_ran_out_of_memory_is_predicted_not_to_fit():
    oom = _h100_validation().oom
    assert oom.fits_oom + oom.oom_oom == 3  # the three measured OOM runs (runs_fresh_process.csv)
    assert oom.fits_oom == 0  # the dangerous cell: predicted to fit, crashed
    assert oom.oom_ran == 0  # and no run that ran is refused (README: 0 runs that ran predicted OOM)


def test_uncalibrated_single_node_a100_mape_is_within_the_15_percent_target():
    s = _uncalibrated(SINGLE)
    assert s.n == 144 and s.mape <= 0.15


@pytest.mark.xfail(strict=True, reason="issue 12: uncalibrated multi-node MAPE is 11.9% (every row "
                                       "predicted fast: datasheet network constants), target 8%")
def test_uncalibrated_multi_node_a100_mape_is_within_the_8_percent_target():
    s = _uncalibrated(MULTI)
    assert s.n == 51 and s.mape <= 0.08


# --- slow: cross-validated calibration (make bench-accuracy) ----------------------------------------

@functools.cache
def _cv_mape(pattern: str) -> float:
    """5-fold cross-validated MAPE of the rows of the files matching `pattern` (each row predicted
    by a fit without it)."""
    runs = read_runs(sorted(DATA.glob(pattern))).timed()
    jobs, measured = [r.job for r in runs], np.array([r.iteration_s * 1e3 for r in runs])
    base = resolve_hardware(jobs[0].hardware.name)
    return score(cross_validate(jobs, measured, base, k=5, n_jobs=-1), measured).mape


@pytest.mark.slow
def test_h100_runs_cross_validated_mape_meets_the_8_percent_target():
    assert _cv_mape(H100) <= 0.08


@pytest.mark.slow
def test_single_node_cross_validated_mape_meets_the_6_percent_target():
    assert _cv_mape(SINGLE) <= 0.06


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="issue 12: calibrated single-node CV MAPE is 5.9%, target 5%")
def test_single_node_cross_validated_mape_meets_the_5_percent_target():
    assert _cv_mape(SINGLE) <= 0.05


@pytest.mark.slow
def test_multi_node_cross_validated_mape_meets_the_10_percent_target():
    assert _cv_mape(MULTI) <= 0.10


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="issue 12: calibrated multi-node CV MAPE is 7.7%, target 7%")
def test_multi_node_cross_validated_mape_meets_the_7_percent_target():
    assert _cv_mape(MULTI) <= 0.07


@pytest.mark.slow
def test_fit_on_small_models_predicts_the_39b_rows_within_15_percent():
    rows = read_measurements([DATA / MULTI]).rows
    jobs, measured = jobs_for(rows, "a100-80gb"), rows.measured_ms.to_numpy()
    small = (rows.params_billion < 39).to_numpy()
    predicted = holdout(jobs, measured, small, resolve_hardware("a100-80gb"))
    assert (~small).sum() == 10 and score(predicted, measured[~small]).mape <= 0.15
