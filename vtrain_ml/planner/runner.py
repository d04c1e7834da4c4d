"""The search, end to end: space -> study -> (focused) surrogate -> Optuna -> verification -> report.

The final answer is always the exact simulator's: the report is built from exact trials only.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from simulator.catalog import hardware_fingerprint
from simulator.errors import InfeasibleConfigError
from simulator.specs import HardwareSpec
from vtrain_ml.planner.config import SearchConfig
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
    trial: Callable[[int], None] = lambda number: None


def default_factory(seed: int, hardware: HardwareSpec) -> Callable[[], SurrogateModel]:
    def make() -> SurrogateModel:
        from vtrain_ml.planner.focused import FocusedSurrogate

        return FocusedSurrogate(seed=seed, hardware={hardware.name: hardware})

    return make


def check_feasible(space: SearchSpace) -> None:
    """Fail early, with the commonest reasons, when no combination of the space is feasible."""
    params_iter = space.enumerate() if space.size <= 100_000 else None
    reasons: Counter[str] = Counter()
    if params_iter is not None:
        for params in params_iter:
            cand = space.build(params)
            if cand.feasible:
                return
            reasons.update(r.split(";")[0].split(" = ")[0][:80] for r in cand.reasons[:1])
    elif space.sample(1, space.config.seed, max_draws=50_000):
        return
    why = "; ".join(f"{r} ({n}x)" for r, n in reasons.most_common(3)) or "none found in 50,000 draws"
    raise InfeasibleConfigError(f"no valid layout of {space.config.max_gpus} {space.hardware.name} GPUs "
                                f"in the space: {why}")


def load_surrogate(config: SearchConfig, space: SearchSpace, hooks: Hooks) -> SurrogateModel | None:
    """The `--surrogate` file, if given and trained for this hardware; None means train one."""
    if not config.surrogate:
        hooks.message("no --surrogate given: training a focused surrogate on "
                      f"{config.initial_samples} exact samples of the search space")
        return None
    from surrogate.model import Surrogate

    model = Surrogate.load(config.surrogate)
    hashes = getattr(model, "hardware_hashes_", None) or {}
    known = set(hashes.values()) if isinstance(hashes, dict) else set(hashes)
    if known and hardware_fingerprint(space.hardware) not in known:
        hooks.message(f"the surrogate {config.surrogate} was not trained for {space.hardware.name}: "
                      f"training a focused one on {config.initial_samples} exact samples instead")
        return None
    return model


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
    study = open_study(config, resume, hardware_fingerprint(space.hardware))
    given = load_surrogate(config, space, hooks)
    factory = factory or default_factory(config.seed, space.hardware)
    scorer = prepare_scorer(config, space, study, hooks, factory, given)
    verifier = ExactVerifier(space, scorer, config.verify_every, config.verify_top, config.n_jobs,
                             hooks.verified, target_trials=config.trials)
    remaining = config.trials - len(surrogate_trials(complete_trials(study)))
    if remaining > 0:
        study.optimize(SurrogateObjective(space, scorer), n_trials=remaining,
                       callbacks=[verifier, lambda s, t: hooks.trial(t.number)])
    verifier.verify(study)  # the last candidates seen get verified too
    trials = complete_trials(study)
    info: dict[str, Any] = {"focused": given is None, "initial_samples": config.initial_samples,
                            "refits": scorer.refits_, "training_rows": len(scorer.data_)}
    return make_report(space, "search", outcomes_from_trials(space, trials), len(exact_trials(trials)),
                       len(surrogate_trials(trials)), time.perf_counter() - start, info,
                       study.study_name, config.storage_url())
