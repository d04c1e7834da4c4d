"""Runs files of any stack: CSV and YAML, SI units, OOM rows, and one line per bad row."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from simulator.errors import DataError
from tests.accuracy_tests.conftest import h100_job, write_job, write_runs
from vtrain_ml.accuracy.runs import read_runs

GiB = 2**30
DATA = Path(__file__).resolve().parents[2] / "data" / "measured"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_job(tmp_path, "small", h100_job())
    write_job(tmp_path, "big", h100_job(training={"micro_batch_size": 2}))
    return tmp_path


def test_csv_rows_become_jobs_with_measurements_in_si_units(folder):
    path = write_runs(folder, "job,iteration_ms,iteration_s,peak_memory_GiB,reserved_GiB,oom,tag\n"
                              "jobs/small.yaml,160.5,,3.5,4,,mgpt\n"
                              "jobs/big.yaml,,0.25,,,false,\n")
    runs = read_runs([path])
    assert runs.skipped == 0 and len(runs.runs) == 2
    small, big = runs.runs
    assert small.iteration_s == pytest.approx(0.1605) and big.iteration_s == pytest.approx(0.25)
    assert small.peak_allocated_bytes == pytest.approx(3.5 * GiB)
    assert small.peak_reserved_bytes == pytest.approx(4 * GiB)
    assert big.peak_allocated_bytes is None and not big.oom
    assert (small.tag, small.row, small.source, small.job_path) == ("mgpt", 2, "runs.csv", "jobs/small.yaml")
    assert big.job.training.micro_batch_size == 2 and big.job.hardware.name == "h100-sxm-80gb"


def test_a_run_that_ran_out_of_memory_has_no_time_and_is_not_timed(folder):
    path = write_runs(folder, "job,iteration_ms,oom\njobs/small.yaml,100,\njobs/big.yaml,,true\n")
    runs = read_runs([path])
    assert [r.oom for r in runs.runs] == [False, True]
    assert runs.runs[1].iteration_s is None
    assert [r.job_path for r in runs.timed()] == ["jobs/small.yaml"]


def test_comment_lines_are_skipped_and_line_numbers_stay_those_of_the_file(folder):
    path = write_runs(folder, "# measured 2026-11-23\njob,iteration_ms\n# first\njobs/small.yaml,100\n")
    assert [r.row for r in read_runs([path]).runs] == [4]


def test_yaml_runs_file_reads_like_the_csv_and_has_the_same_data_hash(folder):
    csv_path = write_runs(folder, "job,iteration_ms,peak_memory_GiB,tag\njobs/small.yaml,100,3,a\n"
                                  "jobs/big.yaml,150,5,b\n")
    listed = write_runs(folder, "- {job: jobs/big.yaml, iteration_s: 0.15, peak_memory_GiB: 5, tag: b}\n"
                                "- {job: jobs/small.yaml, iteration_ms: 100, peak_memory_GiB: 3, tag: a}\n",
                        "runs.yaml")
    mapping = write_runs(folder, "runs:\n  - {job: jobs/small.yaml, iteration_ms: 100, peak_memory_GiB: 3}\n",
                         "one.yml")
    from_csv, from_yaml = read_runs([csv_path]), read_runs([listed])
    assert [r.row for r in from_yaml.runs] == [1, 2]
    assert from_csv.data_hash == from_yaml.data_hash  # same rows, another file and order
    assert from_csv.file_hash != from_yaml.file_hash
    assert read_runs([mapping]).runs[0].iteration_s == pytest.approx(0.1)


def test_a_different_measurement_changes_the_fingerprint_and_another_gpu_does_not(folder):
    a = read_runs([write_runs(folder, "job,iteration_ms\njobs/small.yaml,100\n", "a.csv")])
    b = read_runs([write_runs(folder, "job,iteration_ms\njobs/small.yaml,101\n", "b.csv")])
    on_a100 = read_runs([folder / "a.csv"], hardware="a100-80gb")
    assert a.runs[0].fingerprint != b.runs[0].fingerprint
    assert on_a100.runs[0].fingerprint == a.runs[0].fingerprint


def test_hardware_replaces_every_jobs_gpu_and_the_measured_gpu_is_kept(folder):
    runs = read_runs([write_runs(folder, "job,iteration_ms\njobs/small.yaml,100\n")], hardware="a100-80gb")
    assert runs.runs[0].job.hardware.name == "a100-80gb"
    assert runs.runs[0].measured_gpu == "h100-sxm-80gb"


def test_a_vtrain_json_config_is_a_job_of_a_runs_file(tmp_path):
    shutil.copy(EXAMPLES / "vtrain_gpt_8gpu.json", tmp_path / "v.json")
    runs = read_runs([write_runs(tmp_path, "job,iteration_ms\nv.json,1234\n")])
    assert runs.runs[0].job.cluster.num_gpus == 8 and runs.runs[0].iteration_s == pytest.approx(1.234)


def test_vtrains_csv_layout_is_detected_by_its_header_and_runs_on_the_80gb_a100():
    runs = read_runs([DATA / "a100_single_node.csv"])
    assert len(runs.runs) == 144 and runs.skipped == 0
    assert {r.job.hardware.name for r in runs.runs} == {"a100-80gb"}
    assert {r.job.training.framework.value for r in runs.runs} == {"megatron-deepspeed"}
    first = runs.runs[0]
    assert first.row == 2 and first.iteration_s == pytest.approx(0.128248067)


def test_the_shipped_h100_runs_file_reads_every_row():
    runs = read_runs([DATA / "h100" / "runs.csv"])
    assert len(runs.runs) == 16 and runs.skipped == 0
    assert {r.job.training.framework.value for r in runs.runs} == {"pytorch"}
    assert all(r.peak_allocated_bytes and r.iteration_s for r in runs.runs)


GOOD = "jobs/small.yaml,100,3,,\n"
# bad row (after the header "job,iteration_ms,peak_memory_GiB,reserved_GiB,oom") -> column, words
BAD_ROWS = {
    "missing_job_file": ("jobs/nope.yaml,100,3,,", "job", "jobs/nope.yaml does not exist"),
    "job_is_a_directory": ("jobs,100,3,,", "job", "is a directory"),
    "empty_job": (",100,3,,", "job", "empty"),
    "job_does_not_validate": ("jobs/invalid.yaml,100,3,,", "job", "does not validate"),
    "non_numeric_time": ("jobs/small.yaml,fast,3,,", "iteration_ms", "'fast' is not a number"),
    "negative_time": ("jobs/small.yaml,-5,3,,", "iteration_ms", "must be positive"),
    "negative_memory": ("jobs/small.yaml,100,-3,,", "peak_memory_GiB", "must be positive"),
    "non_numeric_memory": ("jobs/small.yaml,100,lots,,", "peak_memory_GiB", "is not a number"),
    "reserved_below_allocated": ("jobs/small.yaml,100,3,2,", "reserved_GiB", "below"),
    "no_time": ("jobs/small.yaml,,3,,", "iteration_ms", "no measured time"),
    "oom_with_a_time": ("jobs/small.yaml,100,3,,true", "iteration_ms", "ran out of memory has no time"),
    "oom_not_a_flag": ("jobs/small.yaml,100,3,,maybe", "oom", "not true or false"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_bad_row_is_one_line_naming_file_row_and_column_and_is_skipped(folder, case):
    write_job(folder, "invalid", h100_job(parallel={"tp": 3}))
    line, column, words = BAD_ROWS[case]
    path = write_runs(folder, f"job,iteration_ms,peak_memory_GiB,reserved_GiB,oom\n{GOOD}{line}\n")
    runs = read_runs([path])
    assert len(runs.runs) == 1 and runs.skipped == 1
    (problem,) = runs.problems
    assert problem.startswith(f"{path}: row 3, column '{column}': ")
    assert words in problem and problem.endswith("row skipped")
    assert "\n" not in problem


def test_an_invalid_job_names_the_field_that_is_wrong(folder):
    write_job(folder, "invalid", h100_job(parallel={"tp": 3}))
    path = write_runs(folder, "job,iteration_ms\njobs/invalid.yaml,100\n")
    (problem,) = read_runs([path]).problems
    assert "tensor_parallel_size=3" in problem


def test_yaml_rows_name_their_entry_and_key(folder):
    path = write_runs(folder, "- {job: jobs/small.yaml, iteration_ms: 100}\n"
                              "- {job: jobs/small.yaml, iteration_ms: 100, peak_memry_GiB: 3}\n"
                              "- {job: jobs/small.yaml, iteration_s: true}\n- just text\n", "runs.yaml")
    runs = read_runs([path])
    assert len(runs.runs) == 1
    assert [p.split(": ")[1] for p in runs.problems] == [
        "row 2, column 'peak_memry_GiB'", "row 3, column 'iteration_s'", "row 4"]


def test_a_file_of_only_bad_rows_is_an_error_after_naming_each_row(folder):
    path = write_runs(folder, "job,iteration_ms\njobs/nope.yaml,100\njobs/small.yaml,fast\n")
    runs = read_runs([path])
    assert runs.skipped == 2 and not runs.runs
    with pytest.raises(DataError, match=r"no valid rows in .*runs.csv \(2 skipped"):
        runs.require_rows()


@pytest.mark.parametrize(("header", "words"), [
    ("job,iteration_ms,peak_memory_gib",
     "unknown column(s) 'peak_memory_gib' (did you mean 'peak_memory_GiB'?)"),
    ("iteration_ms,tag", "no 'job' column"),
    ("job,tag", "no 'iteration_ms' or 'iteration_s' column"),
])
def test_a_bad_header_is_one_error_for_the_file(folder, header, words):
    path = write_runs(folder, f"{header}\njobs/small.yaml,100,3\n")
    with pytest.raises(DataError) as err:
        read_runs([path])
    assert words in str(err.value) and str(path) in str(err.value)


def test_a_missing_or_empty_runs_file_is_an_error(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_runs([tmp_path / "nope.csv"])
    with pytest.raises(DataError, match="is a directory"):
        read_runs([tmp_path])
    with pytest.raises(DataError, match="is empty"):
        read_runs([write_runs(tmp_path, "\n# nothing\n")])
    with pytest.raises(DataError, match="list of runs"):
        read_runs([write_runs(tmp_path, "job: x.yaml\n", "r.yaml")])
