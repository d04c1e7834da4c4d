"""Study trials and exact evaluations -> the `SearchReport` (shared by search and exhaustive)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optuna.trial import FrozenTrial

from vtrain_ml.planner.evaluation import Evaluation, evaluate_exact
from vtrain_ml.planner.report import (
    PlanOutcome,
    SearchReport,
    plan_dict,
    ranked_outcomes,
    summarize,
    surrogate_error,
)
from vtrain_ml.planner.rules import pipeline_notes, precision_notes
from vtrain_ml.planner.space import Candidate, SearchSpace
from vtrain_ml.planner.study import exact_trials, trial_exact


def outcome(space: SearchSpace, candidate: Candidate, exact: Evaluation,
            predicted: Evaluation | None = None) -> PlanOutcome:
    assert candidate.job is not None
    return PlanOutcome(plan_dict(candidate.job, space.config.architecture is not None), exact, predicted)


def outcomes_from_trials(space: SearchSpace, trials: Sequence[FrozenTrial]) -> list[PlanOutcome]:
    """One outcome per exactly evaluated plan (the first trial of a plan if several processes
    verified it)."""
    seen: dict[str, PlanOutcome] = {}
    for t in exact_trials(list(trials)):
        key = t.user_attrs["key"]
        if key in seen:
            continue
        pred = t.user_attrs.get("predicted")
        seen[key] = outcome(space, space.build(t.params), trial_exact(t),
                            Evaluation.from_dict(pred) if pred else None)
    return list(seen.values())


def baseline_outcome(space: SearchSpace) -> PlanOutcome | None:
    """The config's hand-picked plan, simulated exactly (not counted as a search evaluation)."""
    from vtrain_ml.planner.baseline import baseline_candidate

    candidate = baseline_candidate(space)
    if candidate is None or candidate.job is None:
        return None
    return outcome(space, candidate, evaluate_exact(candidate.job))


def make_report(space: SearchSpace, mode: str, outcomes: Sequence[PlanOutcome], exact_evaluations: int,
                trials: int, wall_s: float, surrogate: dict[str, Any] | None = None,
                study: str | None = None, storage: str | None = None,
                baseline: PlanOutcome | None = None, complete: bool | None = None,
                notes: Sequence[str] = ()) -> SearchReport:
    """The report of exact `outcomes`; `baseline`: the hand-picked plan's (simulated here when
    not given), `complete`: every feasible plan was simulated (default: an exhaustive run),
    `notes`: the run's own lines beside the space's (`rules.hardware_notes`)."""
    config = space.config
    best, top, pareto = summarize(config, space.hardware.memory_bytes, outcomes, config.top)
    ranked, n_feasible = ranked_outcomes(config, space.hardware.memory_bytes, outcomes)
    info = dict(surrogate or {})
    if mode == "search":
        info["error"] = surrogate_error(outcomes)
    return SearchReport(
        objective=config.objective, mode=mode, best=best, top=top, pareto=pareto,
        evaluated=tuple(outcomes), exact_evaluations=exact_evaluations, trials=trials, wall_s=wall_s,
        space_size=space.size, baseline=baseline or baseline_outcome(space), surrogate=info, study=study,
        storage=storage, pruned_values=space.pruned_values, ranked=ranked, n_feasible=n_feasible,
        complete=mode == "exhaustive" if complete is None else complete,
        notes=precision_notes(space) + pipeline_notes(space) + tuple(notes), hardware=tuple(space.entries))
