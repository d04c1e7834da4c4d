"""A calibration's work is bounded and counted honestly (issue 26, item 8).

The 12-minute fold: scipy's `max_nfev` counts the optimizer's steps, not the simulations of its
finite-difference Jacobian (one per free parameter per step), so a cap of 400 allowed thousands of
simulations of every row and the ETA, an average of the folds done, said "29 s left". Here every
simulation of the rows counts against the cap, the rows each parameter moves are found once per
calibration (not once per fold), and the ETA the command prints is bounded by the cap.
"""

from __future__ import annotations

import numpy as np
import pytest

import vtrain_ml.accuracy.calibration as calibration
from simulator.job.catalog import resolve_hardware
from tests.accuracy_tests.conftest import SWEEP, synthetic_runs
from vtrain_ml.accuracy.calibration import PARAMS, evaluation_cap, fit
from vtrain_ml.accuracy.predict import predict_ms
from vtrain_ml.accuracy.runs import read_runs
from vtrain_ml.cli.calibrate import main as calibrate

TRUTH = {"gemm_max_efficiency": 0.62, "host_overhead_s": 9e-5, "memory_efficiency": 0.55}


@pytest.fixture
def rows(tmp_path):  # type: ignore[no-untyped-def]
    runs = read_runs([synthetic_runs(tmp_path, SWEEP, TRUTH)])
    return [r.job for r in runs.runs], np.array([r.iteration_s * 1e3 for r in runs.runs]), runs


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def counted(jobs, hardware=None):  # type: ignore[no-untyped-def]
        calls.append(len(jobs))
        return predict_ms(jobs, hardware)

    monkeypatch.setattr(calibration, "predict_ms", counted)
    return calls


def test_a_fit_never_simulates_its_rows_more_often_than_its_cap(rows, monkeypatch) -> None:
    jobs, measured, _ = rows
    base = resolve_hardware("h100-sxm-80gb")
    masks = calibration.affected_masks(jobs, base, PARAMS)
    calls = _counting(monkeypatch)
    fitted = fit(jobs, measured, base, max_evaluations=12, masks=masks)
    assert fitted.capped and fitted.evaluations == 12
    assert len(calls) == 12 + 1  # the capped evaluations (Jacobian included) and the final prediction
    assert all(n == len(jobs) for n in calls)
    # what it stopped at is the best point it saw, not the last one tried
    assert fitted.train_mape < np.mean(np.abs(predict_ms(jobs, base) - measured) / measured)


def test_the_default_cap_scales_with_the_free_parameters() -> None:
    assert evaluation_cap(3) < evaluation_cap(13) and evaluation_cap(13) == 20 * 14


def test_a_calibration_finds_the_rows_each_parameter_moves_once_and_bounds_its_eta(
        rows, tmp_path, monkeypatch, capsys) -> None:
    _, _, runs = rows
    seen: list[int] = []
    real = calibration.affected_masks

    def once(jobs, base, params):  # type: ignore[no-untyped-def]
        seen.append(len(jobs))
        return real(jobs, base, params)

    monkeypatch.setattr(calibration, "affected_masks", once)
    monkeypatch.setattr("vtrain_ml.cli.calibrate.affected_masks", once)
    out = tmp_path / "c.yaml"
    assert calibrate([runs.sources[0], "--hardware", "h100-sxm-80gb", "--out", str(out), "--folds", "3",
                      "--jobs", "1", "--freeze", "gemm_k_half,kernel_launch_s,microbatch_overhead_s"]) == 0
    err = capsys.readouterr().err
    assert seen == [len(runs.runs)]  # once, for the whole calibration: the folds take their rows of it
    assert f"4 fits in 1 process(es), each at most {evaluation_cap(3)} simulations of its rows" in err
    assert err.count("left (at most ~") == 3 and "fold 3/3 done" in err and "fit on all 8 rows done" in err
