"""The search, end to end: space -> study -> (focused) surrogate -> Optuna -> verification -> report.

The final answer is always the exact simulator's: the report is built from exact trials only.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from simulator.errors import InfeasibleConfigError
from simulator.job.catalog import hardware_fingerprint
from simulator.job.specs import HardwareSpec
from vtrain_ml.planner.config import Objective, SearchConfig
from vtrain_ml.planner.diagnosis import no_feasible_plan
from vtrain_ml.planner.evaluation import evaluate_exact_many
from vtrain_ml.planner.exhaustive import plan_order
from vtrain_ml.planner.objective import SurrogateObjective
from vtrain_ml.planner.outcomes import make_report, outcomes_from_trials
from vtrain_ml.planner.report import SearchReport
from vtrain_ml.planner.scorer import Scorer, SurrogateModel
from vtrain_ml.planner.space import SearchSpace
from vtrain_ml.planner.study import (
    complete_trials,
    exact_trials,
    open_study,
    record_exact,
    surrogate_trials,
    trial_exact,
)
from vtrain_ml.planner.verify import ExactVerifier, VerifyEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hooks:
    """Progress callbacks; the CLI renders them, tests leave them out."""

    message: Callable[[str], None] = lambda text: None
    verified: Callable[[VerifyEvent], None] = lambda event: None
    trial: Callable[[int, int], None] = lambda done, total: None  # surrogate trials done of total
    started: Callable[[int], None] = lambda done: None  # the study is open, holding `done` trials


def default_factory(seed: int, hardware: HardwareSpec) -> Callable[[], SurrogateModel]:
    def make() -> SurrogateModel:
        from vtrain_ml.planner.focused import FocusedSurrogate

        return FocusedSurrogate(seed=seed, hardware={hardware.name: hardware})

    return make


def check_feasible(space: SearchSpace) -> None:
    """Fail early, saying why in user terms, when no combination of the space is feasible."""
    why = no_feasible_plan(space)
    if why is not None:
        raise InfeasibleConfigError(why)


def load_surrogate(config: SearchConfig, space: SearchSpace) -> tuple[SurrogateModel | None, str]:
    """The `--surrogate` file, if given and trained for this hardware (None: train a focused one),
    and the sentence that says which. Loaded before the study opens: a damaged file is an error
    that leaves no empty study behind."""
    if not config.surrogate:
        return None, ("no --surrogate given: training a focused surrogate on "
                      f"{config.initial_samples} exact samples of the search space")
    from surrogate.model import Surrogate

    model = Surrogate.load(config.surrogate)
    hashes = getattr(model, "hardware_hashes_", None) or {}
    known = set(hashes.values()) if isinstance(hashes, dict) else set(hashes)
    if known and hardware_fingerprint(space.hardware) not in known:
        return None, (f"the surrogate {config.surrogate} was not trained for {space.hardware.name}: "
                      f"training a focused one on {config.initial_samples} exact samples instead")
    return model, f"scoring with the surrogate {config.surrogate}"


def prepare_scorer(config: SearchConfig, space: SearchSpace, study: optuna.Study, hooks: Hooks,
                   factory: Callable[[], SurrogateModel], given: SurrogateModel | None) -> Scorer:
    """Training rows from every exact trial already in the study, plus the focused sample."""
    scorer = Scorer(factory, given, min_rows=config.initial_samples)
    done = exact_trials(complete_trials(study))
    scorer.add([space.build(t.params) for t in done], [trial_exact(t) for t in done])
    have = sum(t.user_attrs.get("source") == "sample" for t in done)
    if given is None and have < config.initial_samples:
        exclude = {str(t.user_attrs["key"]) for t in done}
        batch = sorted(space.sample(config.initial_samples - have, config.seed + have, exclude=exclude),
                       key=plan_order)
        exact = evaluate_exact_many([c.job for c in batch if c.job is not None], config.n_jobs)
        for cand, ev in zip(batch, exact, strict=True):
            record_exact(study, space, cand, ev, "sample")
        scorer.add(batch, exact)
    scorer.refit()
    return scorer


def run_search(config: SearchConfig, resume: bool = False, hooks: Hooks | None = None,
               factory: Callable[[], SurrogateModel] | None = None) -> SearchReport:
    start = time.perf_counter()
    hooks = hooks or Hooks()
    space = SearchSpace(config)
    check_feasible(space)
    given, note = load_surrogate(config, space)
    study = open_study(config, resume, hardware_fingerprint(space.hardware))
    hooks.started(len(surrogate_trials(complete_trials(study))))
    hooks.message(note)
    factory = factory or default_factory(config.seed, space.hardware)
    scorer = prepare_scorer(config, space, study, hooks, factory, given)
    verifier = ExactVerifier(space, scorer, config.verify_every, config.verify_top, config.n_jobs,
                             hooks.verified, target_trials=config.trials, patience=config.patience)
    done = len(surrogate_trials(complete_trials(study)))
    hooks.trial(done, config.trials)
    if config.trials > done:
        counter = itertools.count(done + 1)
        study.optimize(SurrogateObjective(space, scorer), n_trials=config.trials - done,
                       callbacks=[verifier, lambda s, t: hooks.trial(next(counter), config.trials)])
    verifier.verify(study)  # the last candidates seen get verified too
    refined = verifier.refine_front(study) if config.objective is Objective.PARETO else 0
    trials = complete_trials(study)
    info: dict[str, Any] = {"focused": given is None, "initial_samples": config.initial_samples,
                            "refits": scorer.refits_, "training_rows": len(scorer.data_),
                            "stopped_early": verifier.stopped_early_, "patience": config.patience,
                            "front_refinement_evaluations": refined}
    return make_report(space, "search", outcomes_from_trials(space, trials), len(exact_trials(trials)),
                       len(surrogate_trials(trials)), time.perf_counter() - start, info,
                       study.study_name, config.storage_url())
