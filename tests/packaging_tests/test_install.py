"""vtrain-ml as a user installs it: a (non-editable) wheel in a new virtual environment, used
from a directory that is not the repository.

Fast and offline: the new environment is created without pip and sees this test environment's
site-packages through a .pth line (its dependencies are not downloaded again); pip installs the
project into it with --no-deps --no-build-isolation from a copy of the sources. A plain path line
in a .pth file adds the folder but does not run the .pth files inside it, so this environment's
editable install of vtrain-ml stays inactive there: only the wheel's copy can be imported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from vtrain_ml.__main__ import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
CODE = ("simulator", "profiler", "surrogate", "vtrain_ml")


def _code_packages() -> set[str]:
    found = set()
    for top in CODE:
        for folder in [ROOT / top, *(ROOT / top).rglob("*")]:
            if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")):
                found.add(".".join(folder.relative_to(ROOT).parts))
    return found


def _data_packages() -> set[str]:
    """data/ sub-folders Python would call importable (identifier names), as simulator.data.*."""
    found = {"simulator.data"}
    for folder in (ROOT / "data").rglob("*"):
        parts = folder.relative_to(ROOT / "data").parts
        if folder.is_dir() and all(p.isidentifier() for p in parts):
            found.add(".".join(("simulator", "data", *parts)))
    return found


def test_pyproject_lists_every_code_and_data_package() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    missing = sorted((_code_packages() | _data_packages()) - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A new venv holding vtrain-ml installed from a wheel built from a copy of the sources."""
    base = tmp_path_factory.mktemp("install")
    source = base / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for item in (*CODE, "data"):
        shutil.copytree(ROOT / item, source / item, ignore=ignore)
    for item in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / item, source / item)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VTRAIN_DATA_DIR"}}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-build-isolation", "--no-index", "--quiet", str(source)], cwd=base, env=env, timeout=600)
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return elsewhere, env


def test_the_installed_package_imports_its_own_code_and_data(installed: tuple[Path, dict[str, str]]) -> None:
    elsewhere, env = installed
    out = _run(["python", "-c", "import json, simulator, vtrain_ml; "
                "from simulator.job.catalog import data_dir; "
                "print(json.dumps([simulator.__file__, str(data_dir()), vtrain_ml.__version__]))"],
               elsewhere, env)
    module, data, version = json.loads(out)
    venv = Path(env["PATH"].split(os.pathsep)[0]).parent
    assert Path(module).is_relative_to(venv) and Path(data).is_relative_to(venv)
    assert (Path(data) / "hardware" / "aliases.yaml").is_file()
    assert (Path(data) / "spaces" / "default.yaml").is_file()
    assert version == "0.1.0"


def test_every_console_script_runs_from_another_directory(installed: tuple[Path, dict[str, str]]) -> None:
    elsewhere, env = installed
    listing = _run(["vtrain-ml"], elsewhere, env)
    present = [name for name in COMMANDS if f"vtrain-{name} " in listing]
    assert {"search", "simulate", "surrogate", "validate", "calibrate", "profile"} <= set(present)
    for name in present:
        usage = _run([f"vtrain-{name}", "--help"], elsewhere, env)
        assert usage.startswith(f"usage: vtrain-{name}") and f"console script `vtrain-{name}`" in usage


def test_surrogate_generate_reads_the_packaged_default_space_and_simulate_a_preset(
        installed: tuple[Path, dict[str, str]]) -> None:
    elsewhere, env = installed
    out = _run(["vtrain-surrogate", "generate", "--n", "6", "--out", "samples", "--jobs", "1",
                "--no-progress"], elsewhere, env)
    assert "6 samples in samples" in out and (elsewhere / "samples" / "manifest.json").is_file()
    (elsewhere / "job.yaml").write_text(
        "model: llama-2-7b\ntraining: {global_batch_size: 64, micro_batch_size: 1}\n"
        "parallel: {tp: 2, pp: 1, dp: 4}\ncluster: {gpu: A100, num_gpus: 8}\n")
    out = _run(["vtrain-simulate", "job.yaml", "--json"], elsewhere, env)
    assert json.loads(out)["iteration_time_s"] > 0
