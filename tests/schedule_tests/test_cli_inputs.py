"""Scheduler command-line values that used to be ignored (issue 26, item 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vtrain_ml.cli.schedule import main

TRACE = str(Path(__file__).resolve().parents[2] / "examples" / "cluster_trace_small.yaml")


@pytest.mark.parametrize(("argv", "words"), [
    (["--gpus", "0"], "--gpus=0: a cluster needs at least one GPU"),
    (["--gpus", "-8"], "--gpus=-8: a cluster needs at least one GPU"),
    (["--jobs", "0"], "--jobs=0"),
])
def test_a_zero_count_is_refused_not_replaced_by_the_default(argv, words, capsys) -> None:
    assert main([TRACE, *argv, "--no-cache", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]
