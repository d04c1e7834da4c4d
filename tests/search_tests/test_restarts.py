"""Stopping and restarting a search as a user does: Ctrl-C or SIGTERM (a report, the CSV and the
resume command, no traceback), a SIGKILLed search (no idle worker processes left behind), two
processes on one study (no plan simulated twice, the answer of one process), a stop in the
middle resumed without simulating anything again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from tests.search_tests.conftest import tiny_config, tiny_dict
from tests.search_tests.standins import NoisyOracle
from vtrain_ml.planner.exhaustive import run_exhaustive
from vtrain_ml.planner.runner import run_search
from vtrain_ml.planner.storage import open_storage
from vtrain_ml.planner.study import complete_trials, exact_trials, surrogate_trials

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _default_sigint() -> None:  # a shell's background job ignores SIGINT; a terminal's does not
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(check: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except KeyError:  # the study does not exist yet
            pass
        time.sleep(0.5)
    raise AssertionError("the search made too little progress to test anything")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_reports_the_best_plan_so_far_writes_the_csv_and_says_how_to_resume(
        tmp_path: Path, sig: signal.Signals) -> None:
    recipe = tmp_path / "search.yaml"
    recipe.write_text(yaml.safe_dump(tiny_dict(strategy="optuna", trials=100_000, verify_every=20)))
    url, table = f"journal:///{tmp_path / 's.journal'}", tmp_path / "plans.csv"
    command = [sys.executable, "-m", "vtrain_ml.search", "--config", str(recipe), "--storage", url,
               "--csv", str(table)]
    search = subprocess.Popen(command, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    name = tiny_config().study_name()

    def trials() -> int:
        study = optuna.load_study(study_name=name, storage=open_storage(url))
        return len(surrogate_trials(complete_trials(study)))

    _wait_for(lambda: trials() >= 30, 180)
    search.send_signal(sig)
    out, err = search.communicate(timeout=120)
    assert search.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "failed" not in err
    assert "interrupted: the best so far" in out and "recommended: tp=" in out
    assert f"resume it: python -m vtrain_ml.search --resume --study {name} --storage" in out
    assert table.is_file() and len(table.read_text().splitlines()) > 1


WORKERS = """
import sys, time
from tests.search_tests.conftest import tiny_config
from vtrain_ml.planner.evaluation import evaluate_exact_many
from vtrain_ml.planner.space import SearchSpace
space = SearchSpace(tiny_config())
jobs = [c.job for c in map(space.build, space.enumerate()) if c.valid][:40]
evaluate_exact_many(jobs, n_jobs=2)
print("ready", flush=True)
time.sleep(120)
"""


def _children(pid: int) -> list[int]:
    table = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout.split()
    pairs = zip(table[::2], table[1::2], strict=True)
    return [int(p) for p, parent in pairs if int(parent) == pid]


def test_a_killed_search_leaves_no_worker_processes_behind() -> None:
    search = subprocess.Popen([sys.executable, "-c", WORKERS], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                              text=True)
    assert search.stdout is not None and search.stdout.readline().strip() == "ready"
    workers = _children(search.pid)
    assert len(workers) >= 2, "the evaluations should have run in worker processes"
    search.kill()
    search.wait()
    deadline = time.monotonic() + 30  # a worker checks on its parent twice a second
    alive = workers
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [w for w in workers if Path(f"/proc/{w}").exists()
                 and "zombie" not in Path(f"/proc/{w}/status").read_text().lower()]
    states = {w: [line.strip() for line in Path(f"/proc/{w}/status").read_text().splitlines()
                  if line.startswith(("Name", "State", "PPid"))] for w in alive}
    assert not alive, f"worker processes {states} outlived the killed search"


def _search_process(url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.search_tests.worker", url, "40", *extra], cwd=ROOT,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("strategy", ["screen", "enumerate"])
@pytest.mark.parametrize("scheme", ["journal", "sqlite"])
def test_two_processes_on_one_study_simulate_no_plan_twice_and_agree_with_one(
        tmp_path: Path, scheme: str, strategy: str) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}" if scheme == "sqlite" else f"journal:///{tmp_path / 's.journal'}"
    both = [_search_process(url, "--strategy", strategy, "--oracle") for _ in range(2)]
    answers = []
    for process in both:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
        answers.append(out.split()[1])
    study = optuna.load_study(study_name=tiny_config().study_name(), storage=open_storage(url))
    keys = [t.user_attrs["key"] for t in exact_trials(complete_trials(study))]
    assert len(keys) == len(set(keys)), "a plan was simulated twice"
    alone = run_search(tiny_config(strategy=strategy), factory=lambda: NoisyOracle(0.05))
    reference = run_exhaustive(tiny_config())
    assert alone.best is not None and reference.best is not None
    assert answers == [repr(alone.best.exact.iteration_time_s)] * 2
    assert alone.best.plan == reference.best.plan


def test_a_stopped_search_resumes_without_simulating_a_plan_again(db: str) -> None:
    config = tiny_config(db, strategy="screen")
    calls = {"n": 0}

    def stop_after_the_sample() -> bool:
        calls["n"] += 1
        return calls["n"] > 3  # the sample is simulated, then the search is told to stop

    stopped = run_search(config, factory=lambda: NoisyOracle(0.05), stop=stop_after_the_sample)
    assert stopped.surrogate["interrupted"] and stopped.exact_evaluations >= config.initial_samples
    resumed = run_search(config, resume=True, factory=lambda: NoisyOracle(0.05))
    study = optuna.load_study(study_name=config.study_name(), storage=db)
    keys = [t.user_attrs["key"] for t in exact_trials(complete_trials(study))]
    assert len(keys) == len(set(keys)) == resumed.exact_evaluations
    assert resumed.best is not None and not resumed.surrogate["interrupted"]
    assert resumed.best.plan == run_exhaustive(tiny_config()).best.plan  # type: ignore[union-attr]
