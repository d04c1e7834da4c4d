"""`python -m vtrain_ml` lists the commands, the main job first, and runs one by name."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from vtrain_ml.__main__ import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


def test_the_command_list_starts_with_the_search(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    lines = [ln.split()[0] for ln in capsys.readouterr().out.splitlines() if ln.startswith("  vtrain-")]
    assert lines[0] == "vtrain-search"
    assert {"vtrain-search", "vtrain-simulate", "vtrain-validate", "vtrain-calibrate", "vtrain-profile",
            "vtrain-surrogate"} <= set(lines)


def test_every_command_is_a_console_script() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, (module, _) in COMMANDS.items():
        assert scripts[f"vtrain-{name}"] == f"{module}:main"


def test_an_unknown_command_is_one_line_and_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serach"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown command 'serach'") and "search" in err


def test_a_command_runs_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["search", "--help"])
    assert done.value.code == 0
    assert "console script `vtrain-search`" in capsys.readouterr().out
