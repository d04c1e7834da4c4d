"""Several processes on one study, and a killed search resumed without losing a finished trial."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.search_tests.conftest import tiny_config
from tests.search_tests.standins import Constant
from vtrain_ml.planner.runner import run_search
from vtrain_ml.planner.storage import open_storage
from vtrain_ml.planner.study import complete_trials, exact_trials, surrogate_trials

ROOT = Path(__file__).resolve().parents[2]


def _worker(url: str, trials: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.search_tests.worker", url, str(trials), *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("scheme", ["sqlite", "journal"])
def test_two_processes_work_on_one_study(tmp_path: Path, scheme: str) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}" if scheme == "sqlite" else f"journal:///{tmp_path / 's.log'}"
    run_search(tiny_config(url, trials=2, verify_every=2, strategy="optuna"), factory=Constant)  # the study
    workers = [_worker(url, 40, "0", "--resume"), _worker(url, 40, "1", "--resume")]
    for w in workers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err.decode()[-2000:]
    study = optuna.load_study(study_name=tiny_config().study_name(), storage=open_storage(url))
    trials = study.get_trials(deepcopy=False)
    assert not [t for t in trials if t.state is TrialState.FAIL]
    assert len({t.number for t in trials}) == len(trials)
    assert len(surrogate_trials(complete_trials(study))) >= 40
    keys = [t.user_attrs["key"] for t in exact_trials(complete_trials(study))]
    assert len(keys) == len(set(keys)), "two processes simulated one plan twice"


def test_a_killed_search_resumes_without_losing_finished_trials(tmp_path: Path) -> None:
    # the default storage: a journal file whose fsync is batched (vtrain_ml.planner.storage);
    # SIGKILL must still lose nothing, because every append is flushed to the OS at once. The
    # worker kills itself right after its 25th surrogate trial is finished (not after a wait,
    # whose progress would depend on this machine's load).
    url = f"journal:///{tmp_path / 'k.journal'}"
    worker = _worker(url, 100_000, "0", "--kill-after", "25")
    _, err = worker.communicate(timeout=240)
    assert worker.returncode == -signal.SIGKILL, err.decode()[-2000:]
    name = tiny_config().study_name()
    study = optuna.load_study(study_name=name, storage=open_storage(url))
    assert len(surrogate_trials(complete_trials(study))) >= 25  # every finished trial is on disk
    finished = {t.number: tuple(t.values) for t in complete_trials(study)}
    report = run_search(tiny_config(url, trials=60, strategy="optuna"), resume=True, factory=Constant)
    study = optuna.load_study(study_name=name, storage=open_storage(url))
    after = {t.number: tuple(t.values) for t in complete_trials(study)}
    assert all(after.get(n) == v for n, v in finished.items())
    assert report.trials >= 60


def test_a_lock_left_by_a_killed_search_does_not_stall_the_next_one(tmp_path: Path) -> None:
    # a search SIGKILLed inside an append leaves the journal's lock file; Optuna's own backend
    # waits 30 s before breaking it, which every resumed search paid
    path = tmp_path / "s.journal"
    url = f"journal:///{path}"
    optuna.create_study(study_name="x", storage=open_storage(url))
    Path(f"{path}.lock").symlink_to(path)
    began = time.monotonic()
    study = optuna.load_study(study_name="x", storage=open_storage(url))
    study.set_user_attr("written", True)
    assert time.monotonic() - began < 20
    assert optuna.load_study(study_name="x", storage=open_storage(url)).user_attrs["written"]
