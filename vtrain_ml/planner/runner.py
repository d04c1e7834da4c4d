"""The search, end to end: space -> study -> baseline and exact sample -> the cheapest strategy
(`planner.strategy`: enumerate, screen or Optuna) -> the report.

The final answer is always the exact simulator's: the report is built from exact trials only.
Every exact evaluation, whichever strategy makes it, is a trial of the study (so `--resume` and
a second process on the same study continue with all of them), and `stop()` is asked between
steps: a stopped search reports what it has and can be resumed.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from simulator.errors import InfeasibleConfigError
from simulator.job.catalog import hardware_fingerprint
from simulator.job.specs import HardwareSpec
from vtrain_ml.planner.baseline import baseline_candidate
from vtrain_ml.planner.config import Objective, SearchConfig, Strategy
from vtrain_ml.planner.context import Hooks, SearchContext
from vtrain_ml.planner.diagnosis import no_feasible_plan
from vtrain_ml.planner.exact import ExactStore
from vtrain_ml.planner.objective import SurrogateObjective
from vtrain_ml.planner.outcomes import make_report, outcome, outcomes_from_trials
from vtrain_ml.planner.report import SearchReport
from vtrain_ml.planner.rules import hardware_notes
from vtrain_ml.planner.scorer import Scorer, SurrogateModel
from vtrain_ml.planner.screening import WAIT_S, Screening
from vtrain_ml.planner.space import Candidate, SearchSpace
from vtrain_ml.planner.strategy import FIT_S, SURROGATE_STARTUP_S, Costs, StrategyChoice, choose_strategy
from vtrain_ml.planner.study import complete_trials, exact_trials, open_study, surrogate_trials, trial_exact
from vtrain_ml.planner.table import SpaceTable
from vtrain_ml.planner.verify import ExactVerifier

log = logging.getLogger(__name__)

PROBE = 4  # exact plans that time the simulator when a given surrogate needs no training sample

__all__ = ["Hooks", "check_feasible", "run_search"]


def default_factory(seed: int, hardware: HardwareSpec | Sequence[HardwareSpec],
                    predict_jobs: int = 1) -> Callable[[], SurrogateModel]:
    """A focused surrogate that knows the search's GPU types (files included) by their names."""
    specs = [hardware] if isinstance(hardware, HardwareSpec) else list(hardware)

    def make() -> SurrogateModel:
        from vtrain_ml.planner.focused import FocusedSurrogate

        return FocusedSurrogate(seed=seed, hardware={h.name: h for h in specs}, predict_jobs=predict_jobs)

    return make


def check_feasible(space: SearchSpace, table: SpaceTable | None = None) -> None:
    """Fail early, saying why in user terms, when no plan of the space is feasible."""
    why = no_feasible_plan(space, table)
    if why is not None:
        raise InfeasibleConfigError(why)


def load_surrogate(config: SearchConfig, space: SearchSpace) -> tuple[SurrogateModel | None, str]:
    """The `--surrogate` file, if given and trained for this hardware (None: train a focused one),
    and the sentence that says which. Loaded before the study opens: a damaged file is an error
    that leaves no empty study behind."""
    if not config.surrogate:
        return None, ("no --surrogate given: training a focused surrogate on the "
                      f"{config.initial_samples} exact samples of the search space and every verified plan")
    from surrogate.model import Surrogate

    model = Surrogate.load(config.surrogate)
    hashes = getattr(model, "hardware_hashes_", None) or {}
    known = set(hashes.values()) if isinstance(hashes, dict) else set(hashes)
    missing = [h.name for h in space.hardware_specs.values() if hardware_fingerprint(h) not in known]
    if known and missing:
        return None, (f"the surrogate {config.surrogate} was not trained for {', '.join(missing)}: "
                      f"training a focused one on {config.initial_samples} exact samples instead")
    return model, f"scoring with the surrogate {config.surrogate}"


def run_search(config: SearchConfig, resume: bool = False, hooks: Hooks | None = None,
               factory: Callable[[], SurrogateModel] | None = None,
               stop: Callable[[], bool] | None = None) -> SearchReport:
    """Search `config`'s space (see the module docstring); `stop()` true ends it early."""
    start = time.perf_counter()
    hooks, stop = hooks or Hooks(), stop or (lambda: False)
    space = SearchSpace(config)
    table = SpaceTable.sampled(space, config.screen_limit, config.seed)
    check_feasible(space, table)
    baseline = baseline_candidate(space)
    given, note = load_surrogate(config, space)
    opened = open_study(config, resume, space_fingerprint(space))
    store = ExactStore(opened.study, space, config.n_jobs, stop)
    store.refresh()
    make = factory or default_factory(config.seed, list(space.hardware_specs.values()), _threads())
    scorer = Scorer(make, given,
                    min_rows=config.initial_samples)
    ctx = SearchContext(opened.config, space, store, scorer, hooks, stop)
    hooks.started(ctx.config, len(surrogate_trials(complete_trials(opened.study))))
    if opened.note:
        hooks.message(opened.note)
    if baseline is not None and not stop():
        store.evaluate([baseline], "baseline")  # first: the answer can only be better
    choice = _prepare(ctx, table)
    hooks.message(f"strategy {choice.strategy.value}: {choice.reason}")
    if choice.strategy is not Strategy.ENUMERATE:
        hooks.message(note)
    info = RUNS[choice.strategy](ctx, table)
    store.refresh()
    if store.others and not stop():
        hooks.message(f"waiting for {len(store.others)} plans other processes are simulating")
        store.wait_for_others(set(store.others), WAIT_S)
    return _report(ctx, table, choice, info, baseline, time.perf_counter() - start)


def space_fingerprint(space: SearchSpace) -> str:
    """The hardware content hash a study records (of each GPU type, joined, for a list)."""
    return "+".join(hardware_fingerprint(h) for h in space.hardware_specs.values())


def _threads() -> int:
    import os

    return max(1, len(os.sched_getaffinity(0)))


def _prepare(ctx: SearchContext, table: SpaceTable) -> StrategyChoice:
    """The exact training sample (or, with a given surrogate, a probe that times the simulator),
    the strategy chosen from what they cost, and the first surrogate fit if it needs one."""
    config, store, scorer = ctx.config, ctx.store, ctx.scorer
    screen = Screening(ctx, table)
    screen.mark_done()
    ctx.notes += hardware_notes(table, screen.feasible)
    if not scorer.ready:
        have = sum(t.user_attrs.get("source") == "sample" for t in store.done.values())
        if have < config.initial_samples and not ctx.stop():
            store.evaluate(screen.sample(config.initial_samples - have, config.seed + have), "sample")
            if store.others:  # another process simulates part of the sample: its rows are needed
                store.wait_for_others(set(store.others), WAIT_S)
    elif store.seconds_per_plan is None and not ctx.stop():
        probe = screen.sample(PROBE, config.seed)
        store.evaluate(probe, "exact", scorer.predict(probe))
    screen.mark_done()
    exact_s = store.seconds_per_plan or _stored_seconds(ctx)
    # the surrogate's start-up is charged even where this process already imported XGBoost: the
    # choice must not depend on what the process did before (an earlier search, a test run's
    # order); the overcharge can only tip a choice toward the exact path
    costs = Costs(table.space.size, len(screen.feasible), int((~screen.done).sum()), exact_s,
                  0.0 if scorer.ready else SURROGATE_STARTUP_S, FIT_S,
                  screen.batch_size())
    ctx.info["costs"] = {"exact_s_per_plan": exact_s, "enumerate_s": costs.enumerate_s(),
                         "screen_s": costs.screen_s()}
    choice = choose_strategy(config, costs)
    if choice.strategy is not Strategy.ENUMERATE and not ctx.stop():
        ctx.teach()
        scorer.refit()
    return choice


def _stored_seconds(ctx: SearchContext) -> float:
    """Seconds per exact plan when this process simulated none (a resumed study whose sample is
    complete): one plan of the study simulated again, timed."""
    from vtrain_ml.planner.evaluation import evaluate_exact

    done = list(ctx.store.done.values())
    if not done:
        return 0.0
    job = ctx.space.build(done[0].params).job
    began = time.thread_time()  # CPU seconds, as ExactStore times its own (planner.exact)
    if job is not None:
        evaluate_exact(job)
    return time.thread_time() - began


def _enumerate(ctx: SearchContext, table: SpaceTable) -> dict[str, Any]:
    """Simulate every plan that passes the static memory bound and has no exact result yet."""
    screen = Screening(ctx, table)
    screen.mark_done()
    todo = [table.candidate(int(screen.feasible[i])) for i in np.flatnonzero(~screen.done)]
    todo = [c for c in todo if c.feasible]
    ctx.hooks.message(f"enumerate: simulating {len(todo):,} plans exactly")
    ctx.store.evaluate(todo, "exact")
    return {"screened": 0, "outcome": "interrupted" if ctx.stop() else "complete"}


def _screen(ctx: SearchContext, table: SpaceTable) -> dict[str, Any]:
    """Screen the table; a sampled one then grows by the neighbours of the best exact plans
    (another value of one knob, or steps along two ordered knobs) and is screened again, until
    the best exact plan stops changing: a hill-climb from the sample's best on the surrogate."""
    info = Screening(ctx, table).run()
    added = 0
    while not table.complete and not ctx.stop() and info["outcome"] == "converged":
        before = ctx.best()
        near = [table.neighbour_rows(row) for row in _best_rows(ctx, table)]
        new = np.setdiff1d(np.concatenate(near), table.rows) if near else np.zeros(0, dtype=np.int64)
        if not len(new):
            break
        table, added = SpaceTable(ctx.space, np.union1d(table.rows, new)), added + len(new)
        info = Screening(ctx, table).run()
        if ctx.best() == before:
            break
    return {**info, "neighbours_added": added}


def _best_rows(ctx: SearchContext, table: SpaceTable) -> list[int]:
    """Flat rows of the `verify_top` best feasible exact plans."""
    from vtrain_ml.planner.objective import constraint_values
    from vtrain_ml.planner.ranking import rank

    done = list(ctx.store.done.values())
    evaluations = [trial_exact(t) for t in done]
    capacity = ctx.space.hardware.memory_bytes
    constraints = [constraint_values(ctx.config, capacity, e) for e in evaluations]
    order = [i for i in rank(ctx.config.objective, evaluations, constraints)
             if all(c <= 0 for c in constraints[i])][: ctx.config.verify_top]
    rows = [table.row_of(done[i].params) for i in order]
    return [r for r in rows if r is not None]


def _optuna(ctx: SearchContext, table: SpaceTable) -> dict[str, Any]:
    """TPE / NSGA-II trials scored by the surrogate, verified every `verify_every` trials."""
    config, study = ctx.config, ctx.store.study
    verifier = ExactVerifier(ctx)
    done = len(surrogate_trials(complete_trials(study)))
    ctx.hooks.trial(done, config.trials)
    if config.trials > done and not ctx.stop():
        counter = itertools.count(done + 1)
        study.optimize(SurrogateObjective(ctx.space, ctx.scorer), n_trials=config.trials - done,
                       callbacks=[verifier, lambda s, t: ctx.hooks.trial(next(counter), config.trials)])
    if not ctx.stop():
        verifier.verify(study)  # the last candidates seen get verified too
    refined = verifier.refine_front() if config.objective is Objective.PARETO and not ctx.stop() else 0
    return {"stopped_early": verifier.stopped_early_, "front_refinement_evaluations": refined,
            "outcome": "interrupted" if ctx.stop() else "patience" if verifier.stopped_early_ else "trials"}


RUNS: dict[Strategy, Callable[[SearchContext, SpaceTable], dict[str, Any]]] = {
    Strategy.ENUMERATE: _enumerate, Strategy.SCREEN: _screen, Strategy.OPTUNA: _optuna,
}


def _report(ctx: SearchContext, table: SpaceTable, choice: StrategyChoice, info: dict[str, Any],
            baseline: Candidate | None, wall_s: float) -> SearchReport:
    config, study, store = ctx.config, ctx.store.study, ctx.store
    trials = complete_trials(study)
    base = None
    if baseline is not None and baseline.job is not None:
        trial = store.done.get(baseline.key)
        exact = trial_exact(trial) if trial is not None else None
        if exact is None:
            from vtrain_ml.planner.evaluation import evaluate_exact

            exact = evaluate_exact(baseline.job)
        base = outcome(ctx.space, baseline, exact)
    interrupted = ctx.stop()
    stopped = info.get("outcome") == "patience"
    details: dict[str, Any] = {
        "focused": not ctx.scorer.given, "initial_samples": config.initial_samples,
        "refits": ctx.scorer.refits_, "training_rows": len(ctx.scorer.data_), "stopped_early": stopped,
        "patience": config.patience,
        "front_refinement_evaluations": info.get("front_refinement_evaluations", 0),
        **info, "strategy": choice.to_dict(), "screened": info.get("screened", 0),
        "interrupted": interrupted, **ctx.info}
    complete = choice.strategy is Strategy.ENUMERATE and not interrupted and table.complete
    outcomes = outcomes_from_trials(ctx.space, trials)
    return make_report(ctx.space, "search", outcomes, len(exact_trials(trials)),
                       len(surrogate_trials(trials)), wall_s, details, study.study_name,
                       config.storage_url(), baseline=base, complete=complete, notes=ctx.notes)
