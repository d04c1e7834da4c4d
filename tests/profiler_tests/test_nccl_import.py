from pathlib import Path

import numpy as np
import pytest

from profiler.nccl_import import import_files, parse_nccl_tests_text
from simulator.costs.profile_format import read_profile
from simulator.costs.profiled import nccl_table_from_profile
from simulator.errors import DataError
from vtrain_ml.cli.profile import main as profile_main

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl" / "a100"

# nccl-tests all_reduce_perf output of 4 H100s (format of github.com/NVIDIA/nccl-tests)
NCCL_TEXT = (Path(__file__).parent / "all_reduce_4gpu.txt").read_text()


def write_nccl_text(folder: Path) -> Path:
    path = folder / "all_reduce_4gpu.txt"
    path.write_text(NCCL_TEXT)
    return path


def test_nccl_tests_text_rows_are_out_of_place_seconds(tmp_path):
    imported = parse_nccl_tests_text(write_nccl_text(tmp_path))
    assert imported.device_name == "NVIDIA H100 80GB HBM3"
    assert [r["bytes"] for r in imported.rows] == [1024, 4096, 16384, 4194304]
    assert imported.rows[0]["median_s"] == pytest.approx(10.5e-6)
    assert {r["group_size"] for r in imported.rows} == {4}
    assert {r["kind"] for r in imported.rows} == {"all_reduce"}
    assert imported.rows[0]["repeats"] == 20


def test_collective_is_recognised_from_the_file_name(tmp_path):
    path = tmp_path / "reduce_scatter.log"
    path.write_text(NCCL_TEXT)
    assert parse_nccl_tests_text(path).rows[0]["kind"] == "reduce_scatter"
    anonymous = tmp_path / "run1.txt"
    anonymous.write_text(NCCL_TEXT)
    with pytest.raises(DataError, match="which collective"):
        parse_nccl_tests_text(anonymous)


def test_vtrain_lut_tables_import_every_group_size():
    imported = import_files(sorted(DATA.glob("AR_GPU*.csv")))
    assert {r["group_size"] for r in imported.rows} == set(range(2, 9))
    first = next(r for r in imported.rows if r["group_size"] == 2)
    assert first["bytes"] == 1048576 and first["median_s"] == pytest.approx(44210e-9)


def test_imported_all_reduce_becomes_the_network_table(tmp_path, capsys):
    out = tmp_path / "h100"
    assert profile_main(["import-nccl-tests", str(write_nccl_text(tmp_path)), "--out", str(out)]) == 0
    assert "imported 4 rows" in capsys.readouterr().out
    profile = read_profile(out)
    assert profile.meta.hardware == "h100-sxm-80gb"
    table = nccl_table_from_profile(profile)
    assert table is not None and table.covers(4)
    assert table.all_reduce_s(4, 16384) == pytest.approx(12e-6)
    assert np.isclose(table.all_reduce_s(4, 8192), np.exp(np.interp(np.log(8192), np.log([4096, 16384]),
                                                                   np.log([11e-6, 12e-6]))))


def test_import_into_a_profile_of_another_device_is_refused(tmp_path, capsys):
    out = tmp_path / "mixed"
    assert profile_main(["import-nccl-tests", str(write_nccl_text(tmp_path)), "--out", str(out)]) == 0
    other = tmp_path / "all_reduce_a100.txt"
    other.write_text(NCCL_TEXT.replace("H100 80GB HBM3", "A100-SXM4-80GB"))
    assert profile_main(["import-nccl-tests", str(other), "--out", str(out)]) == 2
    assert "another --out" in capsys.readouterr().err


def test_non_nccl_file_is_a_data_error(tmp_path, capsys):
    junk = tmp_path / "all_reduce.txt"
    junk.write_text("hello\n")
    assert profile_main(["import-nccl-tests", str(junk), "--out", str(tmp_path / "o")]) == 2
    assert "column header" in capsys.readouterr().err


def test_profile_all_reduce_replaces_the_network_table(tmp_path, capsys):
    from simulator import load_job, simulate
    from simulator.costs.profiled import network_from_profile
    from simulator.job.enums import CollectiveKind
    from simulator.network.topology import tp_placement
    from tests.profiler_tests.conftest import TINY_LLAMA

    out = tmp_path / "net"
    slow = tmp_path / "all_reduce_2gpu.txt"
    lines = [ln for ln in NCCL_TEXT.splitlines() if not ln.startswith(("#  Rank  2", "#  Rank  3"))]
    slow.write_text("\n".join(ln.replace(ln.split()[5], f"{1000 * float(ln.split()[5]):.2f}", 1)
                              if ln and not ln.startswith("#") else ln for ln in lines))
    assert profile_main(["import-nccl-tests", str(slow), "--out", str(out)]) == 0
    job = load_job(TINY_LLAMA)  # tp=2 inside one node
    network = network_from_profile(out, job)
    assert network is not None
    assert network.time(CollectiveKind.ALL_REDUCE, 1024, tp_placement(job)) == pytest.approx(10.5e-3)
    assert simulate(job, network=network).breakdown["tp_comm"] > 10 * simulate(job).breakdown["tp_comm"]
