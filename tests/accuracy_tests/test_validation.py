"""Scoring measured runs against predictions: time and memory errors, the OOM table, in-sample rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.accuracy_tests.conftest import h100_job, write_job, write_runs
from vtrain_ml.accuracy.predict import Prediction
from vtrain_ml.accuracy.runs import read_runs
from vtrain_ml.accuracy.validation import validate

GiB = 2**30
ROOT = Path(__file__).resolve().parents[2]


def test_errors_are_scored_only_where_measured_and_oom_rows_fill_the_table(tmp_path):
    job = write_job(tmp_path, "j", h100_job())
    runs = read_runs([write_runs(tmp_path, "job,iteration_ms,peak_memory_GiB,oom\n"
                                           f"{job},100,4,\n{job},200,,\n{job},,,true\n{job},50,10,\n")])
    predictions = [Prediction(0.110, 3.0 * GiB, 5 * GiB, True),  # 10% slow, 25% low on memory
                   Prediction(0.150, 3.0 * GiB, 5 * GiB, True),  # 25% fast, no memory measured
                   Prediction(1.000, 90.0 * GiB, 95 * GiB, True),  # ran out of memory: no time
                   Prediction(0.050, 10.0 * GiB, 12 * GiB, False)]  # exact, but "does not fit"
    result = validate(runs, predictions)
    assert result.time.n == 3 and result.time.mape == pytest.approx((0.10 + 0.25 + 0.0) / 3)
    assert result.time.frac_low == pytest.approx(1 / 3)
    assert result.memory.n == 2 and result.memory.mape == pytest.approx((0.25 + 0.0) / 2)
    assert result.reserved.n == 0
    assert (result.oom.fits_ran, result.oom.fits_oom, result.oom.oom_ran, result.oom.oom_oom) == (2, 1, 1, 0)
    assert result.in_sample.count == 0 and result.unseen_time is None


def test_a_calibrated_file_from_before_row_fingerprints_is_recognised_by_its_file_hash():
    """examples/a100-80gb-calibrated.yaml was fitted on both vTrain files (its data_hash is their
    bytes' hash): validating it on them is in-sample, on one of them alone it is not known."""
    example = str(ROOT / "examples" / "a100-80gb-calibrated.yaml")
    both = [ROOT / "data" / "measured" / f"a100_{k}_node.csv" for k in ("single", "multi")]
    runs = read_runs(both, hardware=example)
    predictions = [Prediction(r.iteration_s or 1.0, GiB, GiB, True) for r in runs.runs]
    assert validate(runs, predictions).in_sample.count == 195
    one = read_runs(both[:1], hardware=example)
    assert validate(one, predictions[:144]).in_sample.count == 0
