"""The exact evaluations of a study, shared by every strategy and every process working on it.

Every exact simulation is a trial of the study (`planner.study.record_exact`), so a resumed or a
second process sees every result. Two processes must not simulate one plan twice, so a batch is
*claimed* first: one RUNNING trial (source "claim") listing the plans' keys. Then the process
reads the study; a plan is its to simulate when no exact trial holds it yet and no live claim of
another process with a lower trial number lists it. Trial numbers are handed out by the storage
in one order every process sees (the journal's log order, the database's sequence), so each plan
has exactly one winner. Results are recorded chunk by chunk as they come (an interrupted batch
keeps what it finished) and the claim is then closed (PRUNED: finished without a value; samplers
skip trials without parameters). A claim whose process is gone is ignored: at once on the same
host, after `CLAIM_TTL_S` from another one.
"""

from __future__ import annotations

import logging
import os
import socket
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import optuna
from optuna.trial import FrozenTrial, TrialState

from simulator.job.specs import Job
from vtrain_ml.planner.evaluation import Evaluation, evaluate_exact_many
from vtrain_ml.planner.space import Candidate, SearchSpace
from vtrain_ml.planner.study import EXACT_SOURCES, record_exact

log = logging.getLogger(__name__)

CLAIM = "claim"
CLAIM_TTL_S = 1800.0  # a claim from another host older than this is abandoned
POLL_S = 0.2


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class ExactStore:
    """Claims, simulates and records exact evaluations; `done` holds every plan's first exact
    trial in the study, this process's or another's (`refresh` reads the study again)."""

    study: optuna.Study
    space: SearchSpace
    n_jobs: int = 1
    stop: Callable[[], bool] = lambda: False
    owner: str = field(default_factory=lambda: uuid.uuid4().hex)
    done: dict[str, FrozenTrial] = field(default_factory=dict)
    others: set[str] = field(default_factory=set)  # keys in live claims of other processes
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (seconds, plans) simulated
    plan_seconds: list[float] = field(default_factory=list)  # each plan's, simulated in-process
    _seen: int = 0

    @property
    def evaluated(self) -> int:
        """Plans this process simulated."""
        return sum(n for _, n in self.chunks)

    def _clock(self) -> float:
        """In-process simulation is timed in the simulating thread's CPU seconds: another job on
        a shared machine slows the wall clock of the simulator and of the surrogate alike, but the
        strategy choice compares the measured simulator with the surrogate's fixed costs (CPU
        seconds on an idle machine, planner.strategy), so a wall clock would tip it on a loaded
        machine; the process's CPU time would count other threads (a previous search's spinning
        OpenMP threads). Worker processes (n_jobs > 1) divide the wall time, which is what they
        save."""
        return time.thread_time() if self.n_jobs == 1 else time.perf_counter()

    @property
    def seconds_per_plan(self) -> float | None:
        """Seconds per plan simulated by this process (`_clock`); the first chunk, which pays
        the simulator's start-up in this process (imports, empty memo tables), is left out when
        there are others. In-process, the median plan's: one plan that compiles a kernel or
        fills a cold memo table took 10-50x the others' time in a loaded test run, and tipped a
        small space's choice from enumeration to screening (the choice's threshold on case study
        1 is ~140 ms per plan against 3-20 ms typical)."""
        if self.plan_seconds:
            first = self.chunks[0][1] if len(self.chunks) > 1 else 0
            return float(statistics.median(self.plan_seconds[first:] or self.plan_seconds))
        steady = self.chunks[1:] or self.chunks
        plans = sum(n for _, n in steady)
        return sum(s for s, _ in steady) / plans if plans else None

    def refresh(self) -> list[FrozenTrial]:
        """Read the study: new exact trials into `done`, live claims of others into `others`;
        returns every trial read."""
        trials = self.study.get_trials(deepcopy=False)
        for t in trials[self._seen:] if len(trials) >= self._seen else trials:
            key = t.user_attrs.get("key")
            if t.state is TrialState.COMPLETE and t.user_attrs.get("source") in EXACT_SOURCES:
                self.done.setdefault(str(key), t)
        self._seen = len(trials)
        self.others = {k for t in trials if self._live_claim(t, foreign=True) for k in t.user_attrs["keys"]}
        self.others -= set(self.done)
        return trials

    def _live_claim(self, trial: FrozenTrial, foreign: bool) -> bool:
        attrs = trial.user_attrs
        if trial.state is not TrialState.RUNNING or attrs.get("source") != CLAIM:
            return False
        if foreign and attrs.get("owner") == self.owner:
            return False
        if attrs.get("host") == socket.gethostname():
            return _alive(int(attrs.get("pid", -1)))
        started = trial.datetime_start.timestamp() if trial.datetime_start else 0.0
        return time.time() - started < CLAIM_TTL_S

    def claim(self, candidates: Sequence[Candidate]) -> tuple[list[Candidate], int | None]:
        """The candidates this process won (see the module docstring), and its claim's number."""
        todo = [c for c in dict((c.key, c) for c in candidates).values() if c.key not in self.done]
        if not todo:
            return [], None
        self.study.add_trial(optuna.trial.create_trial(
            state=TrialState.RUNNING,
            user_attrs={"source": CLAIM, "keys": [c.key for c in todo], "owner": self.owner,
                        "host": socket.gethostname(), "pid": os.getpid()}))
        trials = self.refresh()
        mine = max(t.number for t in trials if t.user_attrs.get("owner") == self.owner
                   and t.state is TrialState.RUNNING)
        earlier = {k for t in trials if t.number < mine and self._live_claim(t, foreign=True)
                   for k in t.user_attrs["keys"]}
        return [c for c in todo if c.key not in self.done and c.key not in earlier], mine

    def evaluate(self, candidates: Sequence[Candidate], source: str,
                 predicted: Sequence[Evaluation] | None = None,
                 chunk: int | None = None) -> list[tuple[Candidate, Evaluation]]:
        """Simulate and record the candidates this process wins; stops between chunks when
        `stop()` says so. Returns what it simulated, in order."""
        guess = {c.key: p for c, p in zip(candidates, predicted, strict=True)} if predicted else {}
        won, number = self.claim(candidates)
        out: list[tuple[Candidate, Evaluation]] = []
        size = chunk or max(8, 4 * self.n_jobs)
        try:
            for i in range(0, len(won), size):
                if self.stop():
                    break
                part = won[i:i + size]
                began = self._clock()
                results = self._simulate([c.job for c in part if c.job is not None])
                self.chunks.append((self._clock() - began, len(part)))
                for candidate, result in zip(part, results, strict=True):
                    record_exact(self.study, self.space, candidate, result, source, guess.get(candidate.key))
                out += list(zip(part, results, strict=True))
        finally:
            if number is not None:
                self.study.tell(number, state=TrialState.PRUNED)
            self.refresh()
        return out

    def _simulate(self, jobs: list[Job]) -> list[Evaluation]:
        """Exact evaluations of `jobs`; in-process each plan is timed (`seconds_per_plan`)."""
        if self.n_jobs > 1:
            return evaluate_exact_many(jobs, self.n_jobs)
        results: list[Evaluation] = []
        for job in jobs:
            began = self._clock()
            results += evaluate_exact_many([job], 1)
            self.plan_seconds.append(self._clock() - began)
        return results

    def wait_for_others(self, keys: set[str], timeout_s: float) -> bool:
        """Wait until other processes have recorded (or abandoned) `keys`; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while keys & self.others and not self.stop():
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
            self.refresh()
        return True


__all__ = ["CLAIM", "ExactStore"]
