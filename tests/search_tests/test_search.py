"""The search end to end with stand-in surrogates: exact answers, verification, durability."""

from __future__ import annotations

import math

import optuna
import pytest

from simulator import ConfigError, simulate
from tests.search_tests.conftest import tiny_config
from tests.search_tests.standins import Constant, NoisyOracle
from vtrain_ml.planner.config import Objective
from vtrain_ml.planner.evaluation import evaluate_exact
from vtrain_ml.planner.exhaustive import run_exhaustive
from vtrain_ml.planner.ranking import rank
from vtrain_ml.planner.report import render_table
from vtrain_ml.planner.runner import Hooks, run_search
from vtrain_ml.planner.space import SearchSpace
from vtrain_ml.planner.study import complete_trials, exact_trials, surrogate_trials


@pytest.mark.parametrize("strategy", ["screen", "optuna"])
def test_search_finds_the_exhaustive_optimum_with_fewer_exact_evaluations(strategy: str) -> None:
    config = tiny_config(strategy=strategy)
    reference = run_exhaustive(config)
    found = run_search(config, factory=lambda: NoisyOracle(0.05))
    assert found.best is not None and reference.best is not None
    assert found.best.exact.iteration_time_s <= 1.01 * reference.best.exact.iteration_time_s
    assert found.exact_evaluations < reference.exact_evaluations / 2


def test_the_answer_is_the_exact_simulators() -> None:
    config = tiny_config()
    report = run_search(config, factory=lambda: NoisyOracle(0.2))
    assert report.best is not None
    space = SearchSpace(config)
    knobs = {k.name for k in space.searched}
    best = next(o for o in report.evaluated if o is report.best)
    params = {k: v for k, v in best.plan.items() if k in knobs}
    job = space.build(params).job
    assert job is not None
    assert report.best.exact.iteration_time_s == evaluate_exact(job).iteration_time_s


def test_a_useless_surrogate_never_makes_an_out_of_memory_plan_best() -> None:
    # Constant says everything fits and is equally fast: only verification can rank plans.
    config = tiny_config(model={"name": "wide", "num_layers": 8, "hidden_size": 8192,
                                    "num_attention_heads": 64, "vocab_size": 50257, "seq_length": 4096})
    report = run_search(config, factory=Constant)
    assert report.exact_evaluations > 0 and report.top
    space = SearchSpace(config)
    knobs = {k.name for k in space.searched}

    def fits(outcome) -> bool:  # type: ignore[no-untyped-def]  # the simulator's verdict, not the record's
        job = space.build({k: v for k, v in outcome.plan.items() if k in knobs}).job
        return simulate(job).fits_in_memory

    assert all(fits(o) for o in report.top)
    out_of_memory = [o for o in report.evaluated if not fits(o)]
    assert out_of_memory, "the space should hold plans that do not fit, or this test proves nothing"


def test_verification_records_exact_trials_and_refits_on_a_growing_set(db: str) -> None:
    oracle = NoisyOracle(0.05)
    config = tiny_config(db, strategy="optuna")
    report = run_search(config, factory=lambda: oracle)
    assert oracle.fit_rows_ == sorted(oracle.fit_rows_) and len(set(oracle.fit_rows_)) >= 3
    assert oracle.fit_rows_[0] == config.initial_samples
    study = optuna.load_study(study_name=config.study_name(), storage=db)
    sources = [t.user_attrs["source"] for t in complete_trials(study)]
    assert sources.count("sample") == config.initial_samples
    assert sources.count("exact") == report.exact_evaluations - config.initial_samples
    assert report.surrogate["error"]["verified_points"] == sources.count("exact")


@pytest.mark.parametrize("strategy", ["optuna", "screen", "enumerate"])
def test_same_seed_same_answer(strategy: str) -> None:
    """Per strategy: `auto` picks one from the simulator's measured cost, which a loaded machine
    can tip near the boundary (the choice is printed; `--strategy` pins it)."""
    a = run_search(tiny_config(trials=20, strategy=strategy), factory=lambda: NoisyOracle(0.1))
    b = run_search(tiny_config(trials=20, strategy=strategy), factory=lambda: NoisyOracle(0.1))
    assert [o.plan for o in a.evaluated] == [o.plan for o in b.evaluated]


def test_pareto_front_is_non_dominated_and_sorted() -> None:
    report = run_search(tiny_config(objective="pareto", trials=48, verify_every=16),
                        factory=lambda: NoisyOracle(0.05))
    front = report.pareto
    assert len(front) >= 2
    times = [o.exact.iteration_time_s for o in front]
    costs = [o.exact.cost_usd for o in front]
    assert times == sorted(times) and costs == sorted(costs, reverse=True)
    assert report.to_dict()["pareto"][0]["plan"]["num_gpus"] >= 1


def test_rank_puts_feasible_first_and_maximizes_parameters() -> None:
    from vtrain_ml.planner.evaluation import Evaluation

    def ev(params: int, time: float) -> Evaluation:
        return Evaluation(time, 1.0, True, 1.0, 0.5, params, 8, None, None)

    evs = [ev(10, 1.0), ev(30, 1.0), ev(20, 1.0)]
    assert rank(Objective.LARGEST_MODEL, evs, [(0.0,), (0.5,), (-0.1,)]) == [2, 0, 1]
    assert rank(Objective.TIME, [ev(1, 3.0), ev(1, 2.0)], [(0.0,), (0.0,)]) == [1, 0]


def test_resume_continues_without_losing_finished_trials(db: str) -> None:
    first = run_search(tiny_config(db, trials=20, strategy="optuna"), factory=lambda: NoisyOracle(0.05))
    study = optuna.load_study(study_name=tiny_config().study_name(), storage=db)
    before = {t.number: t.values for t in complete_trials(study)}
    second = run_search(tiny_config(db, trials=40, strategy="optuna"), resume=True,
                        factory=lambda: NoisyOracle(0.05))
    after = {t.number: t.values for t in complete_trials(study)}
    assert all(after[n] == v for n, v in before.items())
    assert second.trials == 40 and first.trials == 20
    assert second.exact_evaluations > first.exact_evaluations


def test_resume_of_a_missing_study_is_a_clear_error(db: str) -> None:
    with pytest.raises(ConfigError, match=r"no study .* to resume"):
        run_search(tiny_config(db), resume=True, factory=Constant)


def test_running_a_search_twice_continues_its_study_and_simulates_nothing_again(db: str) -> None:
    notes: list[str] = []
    # pinned: `auto` picks from measured timings, so a loaded machine could enumerate one run only
    config = tiny_config(db, strategy="screen")
    first = run_search(config, factory=lambda: NoisyOracle(0.05))
    second = run_search(config, factory=lambda: NoisyOracle(0.05), hooks=Hooks(message=notes.append))
    assert any("already exists for this recipe: continuing it" in n for n in notes)
    assert second.study == first.study
    assert second.exact_evaluations == first.exact_evaluations  # every plan was simulated once
    assert first.best is not None and second.best is not None
    assert second.best.plan == first.best.plan


def test_a_changed_recipe_under_a_used_study_name_gets_a_study_of_its_own(db: str) -> None:
    notes: list[str] = []
    run_search(tiny_config(db, study="mine"), factory=Constant)
    changed = tiny_config(db, study="mine", global_batch=64)
    report = run_search(changed, factory=Constant, hooks=Hooks(message=notes.append))
    assert report.study == f"mine-{changed.space_hash()}"
    assert any("study mine was created by a different search" in n and report.study in n for n in notes)
    again = run_search(changed, factory=Constant)  # the third run finds the renamed study
    assert again.study == report.study and again.exact_evaluations == report.exact_evaluations


def test_a_bad_baseline_fails_before_any_work(db: str) -> None:
    config = tiny_config(db, baseline={"tp": 8, "pp": 8, "dp": 8})  # 512 GPUs > max_gpus=16
    with pytest.raises(ConfigError, match=r"baseline .* is not a valid plan"):
        run_search(config, factory=Constant)
    assert optuna.get_all_study_names(storage=db) == [], "the search started before the check"


def test_the_baseline_is_simulated_first_and_the_answer_is_never_slower(db: str) -> None:
    config = tiny_config(db, strategy="optuna", baseline={"tp": 2, "pp": 2, "dp": 4, "micro_batch_size": 1})
    report = run_search(config, factory=Constant)  # a useless surrogate: the baseline still counts
    study = optuna.load_study(study_name=config.study_name(), storage=db)
    first = min(exact_trials(complete_trials(study)), key=lambda t: t.number)
    assert first.user_attrs["source"] == "baseline"
    assert report.best is not None and report.baseline is not None
    assert report.best.exact.iteration_time_s <= report.baseline.exact.iteration_time_s


def test_report_json_has_the_documented_keys(db: str) -> None:
    report = run_search(tiny_config(db, trials=20), factory=lambda: NoisyOracle(0.05))
    data = report.to_dict()
    assert {"best", "pareto", "exact_evaluations", "trials", "wall_s"} <= set(data)
    assert {"plan", "iteration_time_s", "cost_usd"} <= set(data["best"])
    assert data["trials"] == len(surrogate_trials(complete_trials(optuna.load_study(
        study_name=tiny_config().study_name(), storage=db))))
    assert math.isfinite(data["wall_s"])
    assert "exact evaluations" in render_table(report)


@pytest.mark.slow
def test_a_given_surrogate_is_used_instead_of_training_a_focused_one(tmp_path) -> None:
    from vtrain_ml.planner.evaluation import evaluate_exact_many
    from vtrain_ml.planner.focused import FocusedSurrogate
    from vtrain_ml.planner.scorer import training_rows

    space = SearchSpace(tiny_config())
    sample = space.sample(40, seed=7)
    rows = training_rows(sample, evaluate_exact_many([c.job for c in sample if c.job is not None]))
    path = tmp_path / "surrogate"
    FocusedSurrogate(seed=0).fit(rows).save(path)
    report = run_search(tiny_config(surrogate=str(path), trials=20, verify_every=10, strategy="screen"))
    assert report.surrogate["focused"] is False
    # no focused sample: every exact evaluation is a verified candidate (the first few time the
    # simulator for the choice of strategy, predicted by the given surrogate too)
    assert report.exact_evaluations == report.surrogate["error"]["verified_points"] > 0
    assert report.best is not None


def test_an_infeasible_plan_does_not_push_feasible_ones_off_the_pareto_front() -> None:
    from vtrain_ml.planner.evaluation import Evaluation

    def ev(time: float, cost: float) -> Evaluation:
        return Evaluation(time, 1.0, True, cost, 0.5, 1, 8, None, None)

    evs = [ev(1.0, 1.0), ev(2.0, 2.0), ev(3.0, 0.5)]  # the first is infeasible and dominates the second
    order = rank(Objective.PARETO, evs, [(0.5,), (0.0,), (0.0,)])
    assert order == [1, 2, 0]
