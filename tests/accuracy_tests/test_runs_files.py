"""Runs files that used to pass with nonsense in them (issue 26, item 3).

- the same rows pasted twice: counted once, with a warning per copy; and rows of one job (measured
  twice) never land on both sides of a cross-validation fold;
- seconds in an ``iteration_ms`` column (every time ~1000x off): refused, naming the column and
  the unit it probably holds, and `calibrate` writes no file;
- a measured peak above the GPU's memory: the row is refused, naming the column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import DataError
from tests.accuracy_tests.conftest import SWEEP, h100_job, synthetic_runs, write_job, write_runs
from vtrain_ml.accuracy.calibration import folds, job_groups
from vtrain_ml.accuracy.runs import read_runs
from vtrain_ml.cli.calibrate import main as calibrate
from vtrain_ml.cli.validate import main as validate

TRUTH = {"gemm_max_efficiency": 0.62, "host_overhead_s": 9e-5}
FREEZE = "gemm_k_half,memory_efficiency,kernel_launch_s,microbatch_overhead_s"


def _pasted_twice(path: Path) -> Path:
    lines = path.read_text().splitlines()
    twice = path.with_name("twice.csv")
    twice.write_text("\n".join([*lines, *lines[1:]]) + "\n")
    return twice


def test_rows_pasted_twice_are_counted_once_with_a_warning_each(tmp_path) -> None:
    runs = synthetic_runs(tmp_path, SWEEP, TRUTH)
    once, twice = read_runs([runs]), read_runs([_pasted_twice(runs)])
    assert len(twice.runs) == len(once.runs) == len(SWEEP)
    assert twice.data_hash == once.data_hash
    copies = [p for p in twice.problems if "counted once" in p]
    assert len(copies) == len(SWEEP)
    assert "row 10: the same job and measurements as twice.csv row 2" in copies[0]


def test_a_calibration_of_pasted_rows_reports_what_the_rows_alone_report(tmp_path, capsys) -> None:
    runs = synthetic_runs(tmp_path, SWEEP, TRUTH)
    outputs = []
    for source in (runs, _pasted_twice(runs)):
        out = tmp_path / f"{source.stem}.yaml"
        assert calibrate([str(source), "--hardware", "h100-sxm-80gb", "--out", str(out), "--folds", "2",
                          "--jobs", "1", "--freeze", FREEZE]) == 0
        captured = capsys.readouterr()
        outputs.append([line for line in captured.out.splitlines() if "MAPE" in line])
    assert outputs[0] == outputs[1]
    assert "MAPE" in outputs[0][0] and "on 8 timed rows" in captured.err  # not 16
    assert "skipped 8 row(s) of 16" in captured.err


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=2, max_size=40), st.integers(2, 5), st.integers(0, 3))
def test_rows_of_one_group_are_always_in_the_same_fold(labels, k, seed) -> None:
    groups = np.unique(np.array(labels), return_inverse=True)[1]  # numbered 0, 1, ... in any order
    parts = folds(len(labels), k, seed, groups)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(labels)))
    for part in parts:
        inside = set(groups[part].tolist())
        assert not inside & set(groups[np.setdiff1d(np.arange(len(labels)), part)].tolist())


def test_repeated_measurements_of_one_job_share_a_group(tmp_path) -> None:
    a = write_job(tmp_path, "a", h100_job())
    copy = write_job(tmp_path, "copy_of_a", h100_job())  # another file, the same job
    b = write_job(tmp_path, "b", h100_job(training={"micro_batch_size": 2}))
    path = write_runs(tmp_path, f"job,iteration_ms\n{a},10\n{b},12\n{a},10.4\n{copy},9.8\n")
    runs = read_runs([path])
    assert len(runs.runs) == 4 and not runs.problems  # repeats are data, not copies
    assert job_groups([r.job for r in runs.runs]).tolist() == [0, 1, 0, 0]


def test_seconds_in_an_iteration_ms_column_are_refused_naming_the_column(tmp_path, capsys) -> None:
    runs = synthetic_runs(tmp_path, SWEEP, TRUTH)
    lines = runs.read_text().splitlines()
    in_seconds = [lines[0]] + [",".join([c[0], f"{float(c[1]) / 1e3:.6g}", c[2]])
                               for c in (line.split(",") for line in lines[1:])]
    runs.write_text("\n".join(in_seconds) + "\n")
    out = tmp_path / "never.yaml"
    assert calibrate([str(runs), "--hardware", "h100-sxm-80gb", "--out", str(out), "--folds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: runs.csv: 8 of 8 rows measure iteration_ms 0.00")
    assert "x what the simulator predicts for their GPU and model" in err
    assert "probably holds seconds (rename the column to iteration_s)" in err
    assert not out.exists()
    assert validate([str(runs)]) == 2
    assert "rename the column to iteration_s" in capsys.readouterr().err


def test_a_memory_column_in_mib_is_caught_by_validate(tmp_path, capsys) -> None:
    tiny = h100_job(model={"num_layers": 1, "hidden_size": 64, "num_attention_heads": 1, "seq_length": 128,
                           "vocab_size": 1000})
    job = write_job(tmp_path, "tiny", tiny)
    from simulator import job_from_dict, simulate

    result = simulate(job_from_dict(tiny))
    mib = result.peak_allocated_bytes / 2**20  # MiB in the GiB column: ~1024x, below the 80 GiB
    assert mib < 80
    path = write_runs(tmp_path, f"job,iteration_ms,peak_memory_GiB\n{job},"
                                f"{result.iteration_time_s * 1e3:.4f},{mib:.3f}\n")
    assert validate([str(path)]) == 2
    assert "probably holds MiB (divide by 1024)" in capsys.readouterr().err


def test_a_peak_above_the_gpus_memory_is_refused_naming_the_column(tmp_path) -> None:
    small = write_job(tmp_path, "small", h100_job())
    path = write_runs(tmp_path, f"job,iteration_ms,peak_memory_GiB,reserved_GiB\n{small},10,53953,\n"
                                f"{small},11,40,90\n{small},12,1.5,2\n")
    runs = read_runs([path])
    assert [r.row for r in runs.runs] == [4]
    assert ("row 2, column 'peak_memory_GiB': 53953 GiB is more than the 80 GiB of h100-sxm-80gb, the GPU "
            "its job file names; give GiB (if the value is in MiB, it is 52.7 GiB)") in runs.problems[0]
    assert "row 3, column 'reserved_GiB': 90 GiB is more than the 80 GiB" in runs.problems[1]


def test_pasted_rows_and_one_line_errors_do_not_hide_a_real_bad_file(tmp_path) -> None:
    path = write_runs(tmp_path, "job,iteration_ms\n")
    with pytest.raises(DataError, match="no valid rows"):
        read_runs([path]).require_rows()
