"""Collectives over torch.distributed (gloo on CPU), launched with torchrun as a user would."""

import os
import subprocess
import sys

import pytest

from simulator.costs.profile_format import read_profile
from simulator.costs.profiled import nccl_table_from_profile


def test_collectives_are_measured_for_every_kind_and_group(tmp_path):
    out = tmp_path / "gloo"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(29400 + os.getpid() % 500), "-m", "vtrain_ml.profile", "collectives",
           "--out", str(out), "--max-bytes", "4KiB", "--repeats", "2", "--warmup", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    profile = read_profile(out)
    frame = profile.collectives
    assert frame is not None and set(frame["source"]) == {"gloo"}
    assert {"all_reduce", "send_recv"} <= set(frame["kind"])
    assert set(frame["bytes"]) == {1024, 4096}
    assert (frame["median_s"] > 0).all()
    table = nccl_table_from_profile(profile)
    assert table is not None and table.covers(2)


def test_collectives_outside_torchrun_is_one_clear_error(tmp_path, capsys, monkeypatch):
    from vtrain_ml.cli.profile import main

    monkeypatch.delenv("RANK", raising=False)
    assert main(["collectives", "--out", str(tmp_path / "x")]) == 2
    assert "torchrun" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["--kinds=all_reduce,broadcast", "--max-bytes=lots"])
def test_bad_collective_arguments(tmp_path, capsys, bad):
    from vtrain_ml.cli.profile import main

    try:
        code = main(["collectives", "--out", str(tmp_path / "x"), bad])
    except SystemExit as exc:  # argparse rejects malformed sizes itself (exit 2, one usage line)
        code = exc.code
    assert code == 2
