"""Every command checks every output path before it does any work (issue 26, item 1).

Each case runs a command with one output that cannot be written and replaces the command's work
with a function that fails the test if it is called: the command must stop first, with one
line naming the option, and exit code 2 (the result of a long run is never lost to a bad path).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from vtrain_ml.cli import calibrate, profile, schedule, simulate, surrogate, validate

ROOT = Path(__file__).resolve().parents[2]
JOB = str(ROOT / "examples" / "mtnlg_530b.yaml")
RUNS = str(ROOT / "data" / "measured" / "h100" / "runs.csv")
TRACE = str(ROOT / "examples" / "cluster_trace_small.yaml")


def _no_work(*args: object, **kwargs: object) -> None:
    raise AssertionError("the command started its work before checking its output paths")


# (command main, argv with {file} / {folder} placeholders, flag, what to replace with _no_work)
CASES: list[tuple[Callable[[list[str]], int], list[str], str, str]] = [
    (simulate.main, [JOB, "--csv", "{file}"], "--csv", "vtrain_ml.cli.simulate.read_job"),
    (simulate.main, [JOB, "--trace", "{file}"], "--trace", "vtrain_ml.cli.simulate.read_job"),
    (simulate.main, [JOB, JOB, "--csv", "{file}"], "--csv", "vtrain_ml.batch.run_batch"),
    (validate.main, [RUNS, "--out", "{file}"], "--out", "vtrain_ml.cli.validate.read_runs"),
    (validate.main, [RUNS, "--plot", "{file}.png"], "--plot", "vtrain_ml.cli.validate.read_runs"),
    (calibrate.main, [RUNS, "--hardware", "h100-sxm-80gb", "--out", "{file}"], "--out",
     "vtrain_ml.cli.calibrate.read_runs"),
    (calibrate.main, [RUNS, "--hardware", "h100-sxm-80gb", "--out", "ok.yaml", "--plot", "{file}.png"],
     "--plot", "vtrain_ml.cli.calibrate.read_runs"),
    (surrogate.main, ["generate", "--n", "5", "--out", "{folder}"], "--out", "surrogate.generate.generate"),
    (surrogate.main, ["train", "--samples", "s", "--out", "{folder}"], "--out", "surrogate.workflow.train"),
    (surrogate.main, ["retrain", "--model", "m", "--hardware", "a100-80gb", "--out", "{folder}"], "--out",
     "surrogate.workflow.retrain"),
    (schedule.main, [TRACE, "--plot", "{file}.png"], "--plot", "vtrain_ml.cli.schedule.Scheduler"),
    (schedule.main, [TRACE, "--trace", "{file}"], "--trace", "vtrain_ml.cli.schedule.Scheduler"),
    (schedule.main, [TRACE, "--cache", "{folder}"], "--cache", "vtrain_ml.cli.schedule.Scheduler"),
    (schedule.main, ["generate", "--jobs", "3", "--out", "{file}.yaml"], "--out",
     "vtrain_ml.cli.schedule.generate_rows"),
    (profile.main, ["import-trace", "t.json", "--job", JOB, "--out", "{folder}"], "--out",
     "vtrain_ml.cli.profile._import_trace"),
    (profile.main, ["ops", "--device", "cpu", "--models", JOB, "--out", "{folder}"], "--out",
     "vtrain_ml.cli.profile._ops"),
]


def _bad_paths(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """(file output, folder output) that cannot be written, each a different way."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    paths = {"under a file": (str(blocker / "out"), str(blocker / "out")),
             "the other kind": (str(folder), str(blocker))}
    if Path("/proc").is_dir():  # a folder that accepts no new file, even for root
        paths["unwritable folder"] = ("/proc/vtrain-out", "/proc/vtrain-out")
    return paths


@pytest.mark.parametrize("kind", ["under a file", "the other kind", "unwritable folder"])
@pytest.mark.parametrize(("main", "argv", "flag", "work"), CASES,
                         ids=[f"{c[0].__module__.split('.')[-1]} {c[2]} {c[1][0][:8]}" for c in CASES])
def test_an_output_that_cannot_be_written_stops_the_command_before_its_work(
        main, argv, flag, work, kind, tmp_path, monkeypatch, capsys) -> None:
    paths = _bad_paths(tmp_path)
    if kind not in paths:
        pytest.skip("no /proc here")
    file, folder = paths[kind]
    if kind == "the other kind" and any(a.startswith("{file}.") for a in argv):
        pytest.skip("a folder named *.png is not a case worth a row")
    module, _, name = work.rpartition(".")
    __import__(module)
    if module.endswith("profile"):  # sub-commands are dispatched through a table
        monkeypatch.setitem(profile.COMMANDS, argv[0], _no_work)
    else:
        monkeypatch.setattr(sys.modules[module], name, _no_work)
    monkeypatch.chdir(tmp_path)
    code = main([a.replace("{file}", file).replace("{folder}", folder) for a in argv])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0], err


def test_a_writable_output_with_missing_folders_is_accepted(tmp_path) -> None:
    from vtrain_ml.outputs import check_dir_output, check_file_output

    check_file_output("--csv", tmp_path / "new" / "deeper" / "rows.csv")
    check_dir_output("--out", tmp_path / "new" / "samples")
    assert not (tmp_path / "new").exists()  # checking writes nothing that stays
    assert not list(tmp_path.iterdir())
