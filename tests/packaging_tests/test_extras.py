"""A command whose optional dependency is not installed names the extra to install (issue 26,
item 9), in one line and exit code 2, instead of a ModuleNotFoundError traceback.

Each case runs in a fresh interpreter where the dependency cannot be imported (a `None` entry in
`sys.modules` makes `import optuna` raise ModuleNotFoundError, as on a machine without it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from vtrain_ml.cli.common import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
JOB = str(ROOT / "examples" / "mtnlg_530b.yaml")
LAUNCH = ("import sys; blocked, argv = sys.argv[1].split(','), sys.argv[2:]\n"
          "for name in blocked: sys.modules[name] = None\n"
          "from vtrain_ml.__main__ import main; raise SystemExit(main(argv))")


def _run_without(modules: str, *argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", LAUNCH, modules, *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("missing", "argv", "extra"), [
    ("optuna", ["search", "--help"], "surrogate"),
    ("optuna", ["search", "--config", "examples/case_study_1_mtnlg.yaml"], "surrogate"),
    ("pyarrow", ["surrogate", "generate", "--n", "5", "--out", "{tmp}/samples"], "surrogate"),
    ("xgboost", ["surrogate", "train", "--samples", "s", "--out", "{tmp}/model"], "surrogate"),
    ("xgboost", ["surrogate", "predict", "--model", "m", JOB], "surrogate"),
    ("torch", ["profile", "ops", "--device", "cpu", "--models", JOB, "--out", "{tmp}/p"], "profile"),
    ("torch", ["profile", "trace", "--device", "cpu", "--models", JOB, "--out", "{tmp}/p"], "profile"),
])
def test_a_missing_extra_is_named_in_one_line(missing, argv, extra, tmp_path) -> None:
    done = _run_without(missing, *(a.replace("{tmp}", str(tmp_path)) for a in argv))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert lines == [f"error: vtrain-{' '.join(argv[:1 if argv[0] == 'search' else 2])} needs {missing}, "
                     f"which the '{extra}' extra installs: pip install 'vtrain-ml[{extra}]'"]


def test_every_extra_named_is_declared_in_pyproject() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS.values()) <= set(declared)


def test_the_readme_install_line_names_the_extra_the_main_job_needs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "pip install 'vtrain-ml[surrogate]'" in readme
    assert "vtrain-search" in readme.split("pip install 'vtrain-ml[surrogate]'")[1][:400]
