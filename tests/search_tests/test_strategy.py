"""The search picks its strategy from the space's size and the simulator's measured cost, says
which and why, and every strategy finds what exhaustive enumeration finds."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from tests.search_tests.conftest import tiny_config, tiny_dict
from tests.search_tests.standins import Constant, NoisyOracle
from vtrain_ml.cli.search import main
from vtrain_ml.planner import rules
from vtrain_ml.planner.config import Strategy
from vtrain_ml.planner.exhaustive import run_exhaustive
from vtrain_ml.planner.report import render_table
from vtrain_ml.planner.runner import run_search
from vtrain_ml.planner.space import SearchSpace
from vtrain_ml.planner.strategy import Costs, choose_strategy
from vtrain_ml.planner.study import complete_trials, exact_trials
from vtrain_ml.planner.table import SpaceTable


def _costs(**changes: float) -> Costs:
    base = {"combinations": 560, "feasible": 94, "left": 78, "exact_s": 0.005, "startup_s": 2.0,
            "fit_s": 0.3, "batch": 60}
    return Costs(**{**base, **changes})  # type: ignore[arg-type]


def test_a_few_cheap_plans_are_enumerated_and_many_are_screened() -> None:
    config = tiny_config()
    few = choose_strategy(config, _costs())
    assert few.strategy is Strategy.ENUMERATE and "simulating them all is cheaper" in few.reason
    assert "94 plans" in few.reason and "5.0 ms each" in few.reason
    many = choose_strategy(config, _costs(combinations=2_505_600, feasible=976_752, left=976_452))
    assert many.strategy is Strategy.SCREEN and not many.sampled and "screening is cheaper" in many.reason
    slow = choose_strategy(config, _costs(exact_s=2.0, batch=3))  # a measured profile: seconds a plan
    assert slow.strategy is Strategy.SCREEN


def test_a_space_too_large_to_screen_goes_to_optuna_and_a_large_one_is_sampled() -> None:
    config = tiny_config(screen_limit=1_000_000)
    huge = choose_strategy(config, _costs(combinations=10**9, feasible=400_000, left=400_000))
    assert huge.strategy is Strategy.OPTUNA and "0.10% of it" in huge.reason
    large = choose_strategy(config, _costs(combinations=50_000_000, feasible=400_000, left=400_000))
    assert large.strategy is Strategy.SCREEN and large.sampled
    assert "random sample of 1,000,000" in large.reason


def test_an_asked_for_strategy_is_used() -> None:
    for strategy in Strategy:
        if strategy is not Strategy.AUTO:
            choice = choose_strategy(tiny_config(strategy=strategy.value), _costs())
            assert choice.strategy is strategy and "asked for" in choice.reason


@pytest.mark.parametrize("objective", ["time", "cost"])
@pytest.mark.parametrize("strategy", ["enumerate", "screen"])
def test_each_strategy_finds_the_exhaustive_optimum(strategy: str, objective: str) -> None:
    config = tiny_config(strategy=strategy, objective=objective)
    reference = run_exhaustive(config)
    found = run_search(config, factory=lambda: NoisyOracle(0.05))
    assert found.best is not None and reference.best is not None
    assert found.best.plan == reference.best.plan
    assert found.surrogate["strategy"]["name"] == strategy
    if strategy == "enumerate":  # every plan that passes the static memory bound, once
        feasible = int(rules.feasible(SpaceTable(SearchSpace(config))).sum())
        assert found.complete and found.exact_evaluations == feasible <= reference.exact_evaluations


def test_screening_verifies_until_a_wrong_surrogate_cannot_hide_the_optimum() -> None:
    # 30% errors: the margin grows from the measured errors, so plans predicted up to that much
    # slower than the best exact one are still simulated
    config = tiny_config(strategy="screen")
    reference = run_exhaustive(config)
    rough = run_search(config, factory=lambda: NoisyOracle(0.3))
    fine = run_search(config, factory=lambda: NoisyOracle(0.02))
    assert reference.best is not None and rough.best is not None and fine.best is not None
    assert rough.best.plan == reference.best.plan == fine.best.plan
    assert rough.surrogate["time_margin"] > 0.2 > 0.05 > fine.surrogate["time_margin"]


def test_a_converged_screening_says_why_it_stopped() -> None:
    """A round's line counts the plans that could beat the best before the refit that follows;
    the search then stops with none left, and says so (it had ended after "4,190 plans could
    still beat it" without a word)."""
    from vtrain_ml.planner.context import Hooks

    lines: list[str] = []
    report = run_search(tiny_config(strategy="screen"), hooks=Hooks(message=lines.append),
                        factory=lambda: NoisyOracle(0.02))
    assert report.surrogate["outcome"] == "converged"
    (last,) = [line for line in lines if line.startswith("converged:")]
    assert "could beat the best exact plan" in last and "the surrogate's measured error" in last
    assert f"{100 * report.surrogate['time_margin']:.1f}% faster" in last


@pytest.mark.parametrize("objective", ["time", "cost"])
def test_an_optimality_gap_simulates_less_and_stays_within_it_and_never_loses_to_the_baseline(
        objective: str) -> None:
    """`tolerance`: plans that could only beat the best exact one by less than the gap are not
    simulated; the answer is within the gap of the exact optimum, and no worse than the baseline
    (simulated first)."""
    baseline = {"tp": 1, "pp": 1, "dp": 16, "micro_batch_size": 2, "recompute": "none",
                "distributed_optimizer": True}
    exact = run_search(tiny_config(strategy="screen", objective=objective), factory=lambda: NoisyOracle(0.3))
    gapped = run_search(tiny_config(strategy="screen", objective=objective, tolerance=0.2, baseline=baseline),
                        factory=lambda: NoisyOracle(0.3))
    assert exact.best is not None and gapped.best is not None and gapped.baseline is not None
    assert gapped.exact_evaluations < exact.exact_evaluations
    value = "iteration_time_s" if objective == "time" else "cost_usd"
    best, found = getattr(exact.best.exact, value), getattr(gapped.best.exact, value)
    assert best <= found <= best * 1.2
    assert found <= getattr(gapped.baseline.exact, value)
    assert gapped.surrogate["tolerance"] == 0.2 and "optimality gap 20%" in render_table(gapped)

def test_screening_finds_the_largest_model_within_the_budget() -> None:
    # 18 architectures x the tiny layouts without recompute and with the distributed optimizer:
    # ~1,000 exact simulations for the reference (the full tiny space took 7,552, four minutes);
    # the budget binds: the answer (8 layers of 1536) is inside the grid, not its largest model
    space = {**tiny_dict()["space"], "recompute": ["none"], "distributed_optimizer": [True]}
    config = tiny_config(model=None, strategy="screen", objective="largest_model", tokens_per_parameter=20,
                         time_budget_days=0.1, space=space,
                         architecture={"num_layers": [4, 8, 16], "hidden_size": [512, 1024, 1536],
                                       "head_dim": [64, 128]})
    reference = run_exhaustive(config)
    found = run_search(config, factory=lambda: NoisyOracle(0.05))
    assert reference.best is not None and found.best is not None
    assert (reference.best.plan["num_layers"], reference.best.plan["hidden_size"]) != (16, 1536)
    assert found.best.plan == reference.best.plan
    assert found.exact_evaluations < reference.exact_evaluations / 2


def test_the_report_says_which_strategy_ran_and_why(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "search.yaml"
    recipe.write_text(yaml.safe_dump(tiny_dict(storage="memory")))
    assert main(["--config", str(recipe), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["strategy"]["name"] in {"enumerate", "screen"} and data["strategy"]["reason"]
    assert main(["--config", str(recipe), "--strategy", "screen"]) == 0
    out = capsys.readouterr().out
    assert "search (screen):" in out and "strategy screen: asked for (strategy: screen)" in out


def test_every_strategy_records_its_exact_evaluations_in_the_study(db: str) -> None:
    for strategy in ("enumerate", "screen", "optuna"):
        config = tiny_config(db, study=f"s-{strategy}", strategy=strategy)
        report = run_search(config, factory=Constant if strategy == "optuna" else lambda: NoisyOracle(0.05))
        study = optuna.load_study(study_name=f"s-{strategy}", storage=db)
        exact = exact_trials(complete_trials(study))
        assert len(exact) == report.exact_evaluations > 0
        assert len({t.user_attrs["key"] for t in exact}) == len(exact), "a plan simulated twice"


def test_a_space_larger_than_the_screen_limit_is_screened_on_a_sample_and_climbs_to_the_optimum() -> None:
    config = tiny_config(screen_limit=100)  # 640 combinations: a random sample of 100
    reference = run_exhaustive(config)
    found = run_search(config, factory=lambda: NoisyOracle(0.05))
    assert found.surrogate["strategy"]["name"] == "screen" and found.surrogate["strategy"]["sampled"]
    assert found.surrogate["neighbours_added"] > 0
    assert found.best is not None and reference.best is not None
    assert found.best.plan == reference.best.plan


def test_screenings_margin_follows_the_surrogates_latest_errors() -> None:
    """The margin is 1.5 x the 95th percentile of the latest half of the out-of-sample errors
    (at least 40 of them): a model that has improved is trusted as it is now, not as the model
    of the first rounds was; its floor and ceiling still hold."""
    from types import SimpleNamespace

    from vtrain_ml.planner.screening import Margin

    def guess(t: float) -> SimpleNamespace:
        return SimpleNamespace(iteration_time_s=t, peak_memory_bytes=1.0)

    margin = Margin()
    assert margin.time == margin.initial
    for _ in range(60):  # early rounds: 20% off
        margin.add(guess(1.2), guess(1.0))  # type: ignore[arg-type]
    assert margin.time == pytest.approx(0.3)
    for _ in range(140):  # later rounds: 4% off; the latest 100 errors are all 4%
        margin.add(guess(1.04), guess(1.0))  # type: ignore[arg-type]
    assert margin.time == pytest.approx(1.5 * 0.04)
    for _ in range(200):  # a perfect model still keeps the floor
        margin.add(guess(1.0), guess(1.0))  # type: ignore[arg-type]
    assert margin.time == margin.floor_time


def _sixteen_plans_simulated(monkeypatch: pytest.MonkeyPatch, simulate: Any) -> Any:
    """An in-process `ExactStore` after simulating 16 feasible plans of the tiny space in chunks
    of 8, `simulate` standing in for `evaluate_exact_many`."""
    from vtrain_ml.planner import exact

    monkeypatch.setattr(exact, "evaluate_exact_many", simulate)
    space = SearchSpace(tiny_config())
    table = SpaceTable(space)
    candidates = [table.candidate(int(p)) for p in rules.feasible(table).nonzero()[0][:16]]
    store = exact.ExactStore(optuna.create_study(), space, n_jobs=1)
    store.evaluate(candidates, "exact", chunk=8)
    return store


def test_the_simulators_cost_is_measured_in_cpu_seconds_so_a_loaded_machine_does_not_tip_the_choice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting for a core (another job on a shared machine) stretches the wall clock, not the
    process's CPU time: the in-process simulator's measured cost must not include it, since the
    surrogate's side of the choice is constants (planner.strategy)."""
    from vtrain_ml.planner import exact

    real = exact.evaluate_exact_many

    def waits_for_a_core(jobs, n_jobs):  # type: ignore[no-untyped-def]
        time.sleep(0.05 * len(jobs))
        return real(jobs, n_jobs)

    store = _sixteen_plans_simulated(monkeypatch, waits_for_a_core)
    assert store.evaluated == 16 and store.seconds_per_plan is not None
    assert store.seconds_per_plan < 0.05  # the 50 ms of waiting per plan is not counted


def test_one_slow_plan_does_not_set_the_simulators_measured_cost(monkeypatch) -> None:
    """In-process every plan is timed and the median plan's CPU seconds are the simulator's
    cost: one plan that compiles a kernel or fills a cold memo table (10-50x the others in a
    loaded test run) must not tip a small space's choice from enumeration to screening."""
    from vtrain_ml.planner import exact

    real = exact.evaluate_exact_many
    calls = []

    def one_plan_compiles(jobs, n_jobs):  # type: ignore[no-untyped-def]
        calls.append(len(jobs))
        if len(calls) == 12:  # a plan of the second chunk burns 0.3 s of this thread's CPU
            end = time.thread_time() + 0.3
            while time.thread_time() < end:
                pass
        return real(jobs, n_jobs)

    store = _sixteen_plans_simulated(monkeypatch, one_plan_compiles)
    assert store.evaluated == 16 and set(calls) == {1}
    assert store.seconds_per_plan is not None and store.seconds_per_plan < 0.3 / 8
