"""Resuming killed runs, and one clear message for every kind of bad input."""

import json
import shutil

import pytest

from simulator.costs.profile_format import META_FILE, read_profile
from tests.profiler_tests.conftest import TINY_LLAMA, profile_args
from vtrain_ml.cli.profile import main as profile_main
from vtrain_ml.cli.simulate import main as simulate_main


def _kill_midway(src, dst, keep_rows):
    """A profile directory as a run killed after `keep_rows` ops leaves it: journal only,
    its last line cut in half."""
    lines = (src / "ops.csv").read_text().splitlines(keepends=True)
    dst.mkdir()
    journal = "".join(lines[: keep_rows + 1]) + lines[keep_rows + 1][:20]
    (dst / "ops.csv.journal").write_text(journal)
    return lines


def test_resume_measures_only_what_is_missing(tiny_profile, tmp_path, capsys):
    out = tmp_path / "killed"
    lines = _kill_midway(tiny_profile, out, keep_rows=10)
    assert profile_main(profile_args(out)) == 2  # unfinished run: refuse without --resume
    assert "--resume" in capsys.readouterr().err
    assert profile_main(profile_args(out, "--resume")) == 0
    report = capsys.readouterr().out
    total = len(lines) - 1
    assert f"measured {total - 10} now, 10 already done, 0 failed" in report
    resumed = (out / "ops.csv").read_text()
    for line in lines[1:11]:  # journaled measurements are kept, not re-measured
        assert line in resumed
    assert not (out / "ops.csv.journal").exists()


def test_finished_profile_is_not_overwritten_and_resume_is_a_no_op(tiny_profile, tmp_path, capsys):
    out = tmp_path / "copy"
    shutil.copytree(tiny_profile, out)
    assert profile_main(profile_args(out)) == 2
    assert "already holds" in capsys.readouterr().err
    assert profile_main(profile_args(out, "--resume")) == 0
    assert "measured 0 now" in capsys.readouterr().out
    assert read_profile(out).ops.equals(read_profile(tiny_profile).ops)


def _simulate_error(profile, capsys):
    assert simulate_main([str(TINY_LLAMA), "--profile", str(profile)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_missing_profile_directory(tmp_path, capsys):
    assert "does not exist" in _simulate_error(tmp_path / "nope", capsys)


def test_directory_without_metadata(tmp_path, capsys):
    (tmp_path / "half").mkdir()
    assert "no metadata.json" in _simulate_error(tmp_path / "half", capsys)


def test_other_schema_version(tiny_profile, tmp_path, capsys):
    out = tmp_path / "old"
    shutil.copytree(tiny_profile, out)
    meta = json.loads((out / META_FILE).read_text())
    meta["schema_version"] = 0
    (out / META_FILE).write_text(json.dumps(meta))
    assert "schema version 0" in _simulate_error(out, capsys)


def test_missing_table(tiny_profile, tmp_path, capsys):
    out = tmp_path / "lost"
    shutil.copytree(tiny_profile, out)
    (out / "ops.csv").unlink()
    assert "file is missing" in _simulate_error(out, capsys)


def test_edited_table_fails_its_hash(tiny_profile, tmp_path, capsys):
    out = tmp_path / "edited"
    shutil.copytree(tiny_profile, out)
    (out / "ops.csv").write_text((out / "ops.csv").read_text().replace(",3,", ",4,", 1))
    assert "sha256 mismatch" in _simulate_error(out, capsys)


def test_profile_without_ops_table(tmp_path, capsys):
    from tests.profiler_tests.test_nccl_import import write_nccl_text

    out = tmp_path / "net-only"
    assert profile_main(["import-nccl-tests", str(write_nccl_text(tmp_path)), "--out", str(out)]) == 0
    capsys.readouterr()
    assert "has no ops.csv" in _simulate_error(out, capsys)


@pytest.mark.parametrize(("args", "message"), [
    (["--device", "tpu"], "not a device"),
    (["--device", "cuda"], "no CUDA GPU"),
    (["--models", "gpt-9"], "unknown model preset"),
])
def test_bad_profile_arguments_get_one_line(tmp_path, capsys, args, message):
    import torch

    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    base = profile_args(tmp_path / "x")
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[base.index(flag) + 1] = value
    assert profile_main(base) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
