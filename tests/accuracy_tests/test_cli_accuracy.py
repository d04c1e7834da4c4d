"""`validate` and `calibrate` end to end on tiny runs files: reports, files written, warnings, and
bad input as one line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.accuracy_tests.conftest import SWEEP, h100_job, synthetic_runs, write_job, write_runs
from vtrain_ml.cli.calibrate import main as calibrate
from vtrain_ml.cli.validate import main as validate

TRUTH = {"gemm_max_efficiency": 0.62, "host_overhead_s": 9e-5}
# only the two parameters of TRUTH are fitted: fast, and exactly identifiable
FREEZE = "gemm_k_half,memory_efficiency,kernel_launch_s,microbatch_overhead_s"
# 16,384 hidden x 48 layers on one GPU: ~200B parameters, far beyond 80 GB
HUGE = h100_job(model={"num_layers": 48, "hidden_size": 16384, "num_attention_heads": 128})


@pytest.fixture
def runs_file(tmp_path: Path) -> Path:
    """Two runs with time and memory, one that ran out of memory (predicted to fit: a tiny job)
    and one that ran although predicted not to fit (a huge job)."""
    small = write_job(tmp_path, "small", h100_job())
    big = write_job(tmp_path, "big", h100_job(training={"micro_batch_size": 2}))
    huge = write_job(tmp_path, "huge", HUGE)
    return write_runs(tmp_path, "job,iteration_ms,peak_memory_GiB,reserved_GiB,oom,tag\n"
                                f"{small},100,1.5,2,,a\n{big},150,2.5,,,b\n{big},,,,true,b\n"
                                f"{huge},9000,70,,,c\n")


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines[-1].startswith("error: ")
    return lines[-1]


def test_validate_reports_time_memory_and_the_oom_table(runs_file, capsys):
    assert validate([str(runs_file)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("4 runs from runs.csv on h100-sxm-80gb")
    assert "time: n=3 " in out and "peak memory (allocated): n=3 " in out
    assert "peak memory (reserved): n=1 " in out
    assert "out of memory (3 runs ran, 1 ran out of memory):" in out
    assert "  predicted fits               2              1" in out
    assert "  predicted OOM                1              0" in out
    assert "ran out of memory but predicted to fit: big" in out
    assert "predicted not to fit but ran: huge" in out


def test_validate_json_holds_every_row_with_its_predictions(runs_file, capsys):
    assert validate([str(runs_file), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["oom"] == {"predicted_fits_measured_ran": 2, "predicted_fits_measured_oom": 1,
                             "predicted_oom_measured_ran": 1, "predicted_oom_measured_oom": 0}
    assert report["time"]["n"] == 3 and report["memory"]["n"] == 3 and report["skipped"] == 0
    oom_row = report["rows"][2]
    assert oom_row["oom"] is True and oom_row["measured_ms"] is None and oom_row["predicted_fits"] is True
    assert report["rows"][0]["measured_GiB"] == 1.5 and report["rows"][0]["in_sample"] is False


def test_validate_writes_every_row_and_a_plot(runs_file, tmp_path, capsys):
    args = ["--out", str(tmp_path / "rows.csv"), "--plot", str(tmp_path / "p.png")]
    assert validate([str(runs_file), *args]) == 0
    assert (tmp_path / "p.png").stat().st_size > 1000
    assert (tmp_path / "rows.csv").read_text().count("\n") == 5
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary file left behind


def test_validate_names_each_bad_row_skips_it_and_counts(runs_file, capsys):
    text = runs_file.read_text() + "jobs/gone.yaml,100,,,,\njobs/small.yaml,fast,,,,\n"
    runs_file.write_text(text)
    assert validate([str(runs_file)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"warning: {runs_file}: row 6, column 'job': job file jobs/gone.yaml does not")
    assert err[1].startswith(f"warning: {runs_file}: row 7, column 'iteration_ms': 'fast' is not a number")
    assert err[2] == "skipped 2 row(s) of 6"


def test_validate_of_only_bad_rows_exits_2_after_naming_them(tmp_path, capsys):
    path = write_runs(tmp_path, "job,iteration_ms\nmissing.yaml,100\n")
    assert validate([str(path)]) == 2
    err = capsys.readouterr().err
    assert "row 2, column 'job'" in err
    assert _one_error_line(err).startswith("error: no valid rows in ")


@pytest.mark.parametrize(("plot", "words"), [
    ("/missing/dir/p.png", "folder /missing/dir does not exist"),
    (".", "is a directory"),
    ("p.txt", "'.txt' is not an image format"),
])
def test_validate_plot_path_that_cannot_be_written_is_one_line_exit_2(runs_file, capsys, plot, words):
    assert validate([str(runs_file), "--plot", plot]) == 2
    err = capsys.readouterr().err
    assert words in _one_error_line(err) and len(err.strip().splitlines()) == 1


def test_calibrate_fits_known_parameters_and_records_the_rows_it_saw(tmp_path, capsys):
    runs = synthetic_runs(tmp_path, SWEEP, TRUTH)
    out = tmp_path / "my-h100.yaml"
    code = calibrate([str(runs), "--hardware", "h100-sxm-80gb", "--out", str(out), "--folds", "2",
                      "--jobs", "1", "--freeze", FREEZE, "--plot", str(tmp_path / "cal.png")])
    assert code == 0
    captured = capsys.readouterr()
    assert "start (h100-sxm-80gb): MAPE" in captured.err and "fold 2/2 done" in captured.err
    spec = yaml.safe_load(out.read_text())
    assert spec["name"] == "my-h100"
    assert spec["efficiency"]["gemm_max_efficiency"] == pytest.approx(0.62, rel=1e-3)
    assert spec["efficiency"]["host_overhead_s"] == pytest.approx(9e-5, rel=1e-3)
    record = spec["calibration"]
    assert record["rows"] == 8 and len(record["row_fingerprints"]) == 8
    assert record["cv"]["mape"] < 0.005 and record["frozen"] == FREEZE.split(",")
    assert "p2p_efficiency" in record["not_determined"]
    assert (tmp_path / "cal.png").stat().st_size > 1000
    assert "2-fold cross-validated MAPE" in captured.out


def test_calibrate_on_noisy_runs_reports_a_cross_validated_error_above_the_training_error(tmp_path, capsys):
    """With 5% run-to-run noise no fit is exact: rows a fold never saw are predicted worse than the
    rows the full fit saw. (On exactly-fittable runs both are ~0 and a leaking fold would pass.)"""
    runs = synthetic_runs(tmp_path, SWEEP, TRUTH, noise=0.05)
    out = tmp_path / "noisy.yaml"
    assert calibrate([str(runs), "--hardware", "h100-sxm-80gb", "--out", str(out), "--folds", "4",
                      "--jobs", "1", "--freeze", FREEZE]) == 0
    record = yaml.safe_load(out.read_text())["calibration"]
    assert record["train_mape"] > 0.01
    assert record["cv"]["mape"] > record["train_mape"] * 1.02, record
    assert f"4-fold cross-validated MAPE {record['cv']['mape']:.2%}" in capsys.readouterr().out


def test_validate_with_a_file_calibrated_on_the_same_rows_says_the_error_is_in_sample(tmp_path, capsys):
    runs = synthetic_runs(tmp_path, SWEEP, TRUTH)
    out = tmp_path / "my-h100.yaml"
    calibrate([str(runs), "--hardware", "h100-sxm-80gb", "--out", str(out), "--folds", "2", "--jobs", "1",
               "--freeze", FREEZE])
    capsys.readouterr()
    assert validate([str(runs), "--hardware", str(out)]) == 0
    err = capsys.readouterr().err
    assert "my-h100 was calibrated on these same 8 rows" in err and "in-sample" in err
    assert "2-fold cross-validated MAPE at calibration was" in err
    # one new row: the others are still in-sample, and the new one is scored alone too
    new = write_job(tmp_path, "new", h100_job(training={"micro_batch_size": 2, "global_batch_size": 8}))
    runs.write_text(runs.read_text() + f"{new},80,\n")
    assert validate([str(runs), "--hardware", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    assert "8 of 9 rows were used to calibrate my-h100" in captured.err
    report = json.loads(captured.out)
    assert report["in_sample_rows"] == 8 and report["unseen_time"]["n"] == 1
    assert [r["in_sample"] for r in report["rows"]] == [True] * 8 + [False]


def test_validate_with_another_hardware_file_says_nothing_about_in_sample(runs_file, capsys):
    assert validate([str(runs_file), "--hardware", "h100-sxm-80gb"]) == 0
    assert "in-sample" not in capsys.readouterr().err


def test_calibrate_warns_when_a_parameter_ends_at_its_bound(tmp_path, capsys):
    runs = synthetic_runs(tmp_path, SWEEP, {"gemm_max_efficiency": 0.2, "host_overhead_s": 9e-5})
    code = calibrate([str(runs), "--hardware", "h100-sxm-80gb", "--out", str(tmp_path / "c.yaml"),
                      "--folds", "0", "--freeze", FREEZE])
    assert code == 0
    captured = capsys.readouterr()
    assert "warning: gemm_max_efficiency ended at its lower bound (0.3, start 0.8)" in captured.err
    assert "gemm_max_efficiency              0.8         0.3  at its lower bound" in captured.out
    assert "# warning: gemm_max_efficiency ended at its lower bound" in (tmp_path / "c.yaml").read_text()


def test_calibrate_warns_when_the_job_files_name_another_gpu(tmp_path, capsys):
    runs = synthetic_runs(tmp_path, dict(list(SWEEP.items())[:2]), TRUTH)
    calibrate([str(runs), "--hardware", "a100-80gb", "--out", str(tmp_path / "c.yaml"), "--folds", "0",
               "--freeze", FREEZE])
    assert "the job files name h100-sxm-80gb but are fitted as a100-80gb" in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "words"), [
    (["--freeze", "p2p_eficiency"], "--freeze p2p_eficiency: unknown parameter"),
    (["--folds", "1"], "--folds=1"),
    (["--folds", "9"], "--folds=9 needs at least that many timed rows (got 3)"),
    (["--plot", "/missing/dir/c.png"], "folder /missing/dir does not exist"),
])
def test_calibrate_bad_arguments_are_one_line_exit_2(runs_file, tmp_path, capsys, extra, words):
    out = str(tmp_path / "c.yaml")
    code = calibrate([str(runs_file), "--hardware", "h100-sxm-80gb", "--out", out, *extra])
    assert code == 2
    assert words in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "c.yaml").exists()


def test_calibrate_on_runs_without_any_time_is_one_line_exit_2(tmp_path, capsys):
    job = write_job(tmp_path, "small", h100_job())
    path = write_runs(tmp_path, f"job,iteration_ms,oom\n{job},,true\n")
    assert calibrate([str(path), "--hardware", "h100-sxm-80gb", "--out", str(tmp_path / "c.yaml")]) == 2
    assert "has a measured time" in _one_error_line(capsys.readouterr().err)


def test_calibrate_scores_holdout_runs_before_and_after_and_warns_when_they_get_worse(tmp_path, capsys):
    fitted_dir, same_dir, other_dir = (tmp_path / d for d in ("fit", "same", "other"))
    items = list(SWEEP.items())
    runs = synthetic_runs(fitted_dir, dict(items[:4]), TRUTH)
    same = synthetic_runs(same_dir, dict(items[4:]), TRUTH)  # the same GPU as the fitted rows
    other = synthetic_runs(other_dir, dict(items[4:]), {})  # exactly the datasheet's times
    args = [str(runs), "--hardware", "h100-sxm-80gb", "--out", str(tmp_path / "c.yaml"), "--folds", "0",
            "--freeze", FREEZE]
    assert calibrate([*args, "--holdout", str(same)]) == 0
    captured = capsys.readouterr()
    assert "holdout (runs.csv, 4 rows never fitted): MAPE " in captured.out and "(better)" in captured.out
    assert calibrate([*args, "--holdout", str(other)]) == 0
    captured = capsys.readouterr()
    assert "-> " in captured.out and "(worse)" in captured.out
    assert "predicts the holdout runs worse than h100-sxm-80gb did (0.0% -> " in captured.err


def test_validate_with_a_measured_profile_costs_kernels_from_it(tmp_path, capsys):
    """A GPU-bound job whose GEMMs the H100 operator profile measured (the h4096 mgpt shape: its
    layer GEMMs, e.g. QKV 1x4096x12288x4096, are rows of its ops.csv) is predicted from the
    profile's kernel times, so the prediction moves. (A host-bound job, e.g. Llama h2048 at
    micro-batch 1, would barely move: its kernels hide behind the host's dispatch by design.)"""
    root = Path(__file__).resolve().parents[2]
    job = root / "data" / "measured" / "h100" / "jobs" / "mgpt_h4096_l16_s2048_mb2_ga2_none_flash.yaml"
    runs = write_runs(tmp_path, f"job,iteration_ms\n{job},464.51\n")
    assert validate([str(runs), "--json"]) == 0
    analytic = json.loads(capsys.readouterr().out)["rows"][0]["predicted_ms"]
    profile = root / "data" / "profiles" / "h100-sxm-80gb-ops"
    assert validate([str(runs), "--json", "--profile", str(profile)]) == 0
    profiled = json.loads(capsys.readouterr().out)["rows"][0]["predicted_ms"]
    assert profiled != pytest.approx(analytic, rel=0.02)
    assert validate([str(runs), "--profile", str(tmp_path / "nope")]) == 2
    assert "nope" in _one_error_line(capsys.readouterr().err)
