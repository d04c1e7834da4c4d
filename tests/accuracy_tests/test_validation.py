"""Scoring measured runs against predictions: time and memory errors, the OOM table, in-sample rows."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

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


BOTH_A100 = [ROOT / "data" / "measured" / f"a100_{k}_node.csv" for k in ("single", "multi")]


def _in_sample(hardware: str, files: list[Path]) -> int:
    runs = read_runs(files, hardware=hardware)
    predictions = [Prediction(r.iteration_s or 1.0, GiB, GiB, True) for r in runs.runs]
    return validate(runs, predictions).in_sample.count


def test_a_calibrated_file_from_before_row_fingerprints_is_recognised_by_its_file_hash(tmp_path):
    """A file calibrated before row fingerprints existed names only the fitted files' bytes'
    hash (`data_hash`): validating it on both vTrain files is in-sample, on one of them alone it
    is not known. The legacy file is the shipped example with its fingerprints taken out."""
    example = yaml.safe_load((ROOT / "examples" / "a100-80gb-calibrated.yaml").read_text())
    cal = example["calibration"]
    cal["data_hash"] = cal.pop("file_hash")
    del cal["row_fingerprints"]
    legacy = tmp_path / "legacy.yaml"
    legacy.write_text(yaml.safe_dump(example))
    assert _in_sample(str(legacy), BOTH_A100) == 195
    assert _in_sample(str(legacy), BOTH_A100[:1]) == 0


def test_the_shipped_calibrated_example_knows_each_row_it_was_fitted_on():
    """examples/a100-80gb-calibrated.yaml was fitted on both vTrain files (144 single-node and
    51 multi-node rows): every row of either file alone is in-sample too."""
    example = str(ROOT / "examples" / "a100-80gb-calibrated.yaml")
    assert _in_sample(example, BOTH_A100) == 195
    assert _in_sample(example, BOTH_A100[:1]) == 144
