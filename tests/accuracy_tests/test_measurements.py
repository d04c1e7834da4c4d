"""Reading measured-iteration CSVs: both vTrain layouts, and clear errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import simulate
from simulator.errors import DataError
from vtrain_ml.accuracy.measurements import read_measurements, row_to_job
from vtrain_ml.accuracy.predict import jobs_for

SHARED = Path(__file__).resolve().parents[2] / "data" / "measured"
SINGLE_HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
                 "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)")


def write(tmp_path: Path, text: str, name: str = "m.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_single_node_layout_is_read_with_every_row():
    data = read_measurements([SHARED / "a100_single_node.csv"])
    assert len(data.rows) == 144 and data.skipped == 0
    assert set(data.rows.tp * data.rows.dp * data.rows.pp == data.rows.num_gpus) == {True}


def test_multi_node_layout_is_detected_by_its_parameters_column():
    data = read_measurements([SHARED / "a100_multi_node.csv"])
    assert len(data.rows) == 51
    assert sorted(data.rows.params_billion.unique()) == [3.6, 18.4, 39.1]


def test_rows_become_jobs_under_the_measured_conditions():
    row = read_measurements([SHARED / "a100_multi_node.csv"]).rows.iloc[0]
    job = row_to_job(row, "a100-80gb")
    assert job.training.recompute.value == "full" and job.training.precision.value == "fp16"
    assert job.model.vocab_size == 50257 and job.cluster.inter_node_bandwidth_Gbps == 800
    assert (job.parallel.tp, job.dp, job.parallel.pp) == (int(row.tp), int(row.dp), int(row.pp))


def test_impossible_rows_are_skipped_and_counted(tmp_path):
    rows = "\n8,8,1,1024,16,12,1024,2,2,2,100\n8,8,1,1024,16,12,1024,2,2,1,90\n"
    path = write(tmp_path, SINGLE_HEADER + rows)
    data = read_measurements([path])
    assert data.skipped == 1 and len(data.rows) == 1


def test_non_numeric_cell_names_file_row_and_column(tmp_path):
    path = write(tmp_path, SINGLE_HEADER + "\n8,8,1,1024,16,12,1024,2,2,2,fast\n")
    with pytest.raises(DataError, match=r"m.csv: row 2, column 'iteration time \(ms\)'"):
        read_measurements([path])


def test_missing_and_unknown_columns_are_named(tmp_path):
    header = SINGLE_HEADER.replace("micro batch", "microbatch")
    path = write(tmp_path, header + "\n8,8,1,1024,16,12,1024,2,2,2,100\n")
    expected = r"missing column\(s\) \['micro batch'\].*unknown column\(s\) \['microbatch'\]"
    with pytest.raises(DataError, match=expected):
        read_measurements([path])


def test_missing_file_and_file_of_only_bad_rows_are_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_measurements([tmp_path / "nope.csv"])
    path = write(tmp_path, SINGLE_HEADER + "\n8,8,1,1024,16,12,1024,2,2,1,90\n")
    with pytest.raises(DataError, match="no valid measurement rows"):
        read_measurements([path])


def test_the_multi_node_runs_cannot_have_fit_a_40gb_a100():
    """Why validation assumes the 80 GB A100: many measured runs exceed 40 GiB per GPU."""
    rows = read_measurements([SHARED / "a100_multi_node.csv"]).rows
    too_big = [not simulate(job).fits_in_memory for job in jobs_for(rows, "a100-40gb")]
    fits_80 = [simulate(job).fits_in_memory for job in jobs_for(rows, "a100-80gb")]
    assert sum(too_big) >= 10 and all(fits_80)
