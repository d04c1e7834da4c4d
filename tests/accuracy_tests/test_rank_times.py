"""calibrate --rank-times: the straggler model's variations recovered from per-rank step times."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from simulator import job_from_dict, simulate
from simulator.errors import ConfigError
from simulator.job.catalog import resolve_hardware
from tests.conftest import job_dict
from vtrain_ml.accuracy.rank_times import effective_kernels, fit_jitter, read_rank_times
from vtrain_ml.cli.calibrate import main


def _rank_times(gpu_cv: float, step_cv: float, ranks: int = 256, steps: int = 40, seed: int = 0
                ) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    speed = 1.0 + gpu_cv * rng.standard_normal(ranks)
    x = 0.5 * speed[:, None] * (1.0 + step_cv * rng.standard_normal((ranks, steps)))
    r, t = np.meshgrid(np.arange(ranks), np.arange(steps), indexing="ij")
    return pd.DataFrame({"rank": r.ravel(), "step": t.ravel(), "compute_ms": 1e3 * x.ravel()})


def test_method_of_moments_recovers_both_variations(tmp_path):
    path = tmp_path / "ranks.csv"
    _rank_times(0.02, 0.01).to_csv(path, index=False)
    fitted = fit_jitter(read_rank_times(path), kernels_per_step=400.0)
    assert fitted.gpu_speed_cv == pytest.approx(0.02, rel=0.15)
    assert fitted.step_cv == pytest.approx(0.01, rel=0.05)
    assert fitted.kernel_time_cv == pytest.approx(0.01 * math.sqrt(400.0), rel=0.05)
    # no persistent spread: the rank means differ only by the averaged step noise
    assert fit_jitter(read_rank_times(path), None).kernel_time_cv is None
    flat = tmp_path / "flat.csv"
    _rank_times(0.0, 0.01).to_csv(flat, index=False)
    assert fit_jitter(read_rank_times(flat)).gpu_speed_cv < 0.003


def test_bad_rank_times_get_one_line(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("rank,compute_ms\n0,1\n")
    with pytest.raises(ConfigError, match="needs columns rank, step and compute_ms"):
        read_rank_times(path)
    path.write_text("rank,step,compute_ms\n0,0,1\n0,1,1\n")
    with pytest.raises(ConfigError, match="at least 2 ranks"):
        read_rank_times(path)


def test_calibrate_writes_a_hardware_file_whose_jitter_the_simulator_uses(tmp_path, capsys):
    job = job_dict(parallel={"tp": 2, "pp": 2, "dp": 2})
    job_path = tmp_path / "job.yaml"
    job_path.write_text(yaml.safe_dump(job))
    k = effective_kernels(job_from_dict(job))
    ranks = tmp_path / "ranks.csv"
    _rank_times(0.03, 0.02 / math.sqrt(k)).to_csv(ranks, index=False)
    out = tmp_path / "mine.yaml"
    code = main(["--hardware", "a100-80gb", "--out", str(out), "--rank-times", str(ranks),
                 "--rank-times-job", str(job_path)])
    assert code == 0
    hw = resolve_hardware(str(out))
    assert hw.efficiency.gpu_speed_cv == pytest.approx(0.03, rel=0.15)
    assert hw.efficiency.kernel_time_cv == pytest.approx(0.02, rel=0.1)
    assert hw.calibration is not None and hw.calibration["ranks"] == 256
    # the file works wherever a GPU name does, and its jitter sets the scale loss
    mine = simulate(job_from_dict({**job, "cluster": {**job["cluster"], "gpu": str(out)}}))
    assert mine.scale_loss is not None
    assert mine.scale_loss.gpu_speed_cv == pytest.approx(hw.efficiency.gpu_speed_cv)
    default = simulate(job_from_dict(job))
    assert mine.breakdown["scale_loss"] > default.breakdown["scale_loss"]


def test_calibrate_needs_runs_or_rank_times(tmp_path, capsys):
    assert main(["--hardware", "a100-80gb", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "--rank-times" in capsys.readouterr().err
