"""vtrain-search as a user meets it: where the study went and how to resume it, early stopping,
Pareto fronts without dominated points, the GPU budget, CSV and sorting."""

from __future__ import annotations

import csv
import json
import shlex
from pathlib import Path

import pytest
import yaml

from tests.search_tests.conftest import tiny_config, tiny_dict
from tests.search_tests.standins import Constant, NoisyOracle
from vtrain_ml.cli.search import main
from vtrain_ml.planner.config import Objective
from vtrain_ml.planner.exhaustive import run_exhaustive
from vtrain_ml.planner.report import SearchReport
from vtrain_ml.planner.runner import run_search


def _recipe(tmp_path: Path, **overrides: object) -> str:
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(tiny_dict(**overrides)))
    return str(path)


def test_a_search_says_where_its_study_is_and_the_resume_command_it_prints_works(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default storage is runs/studies/<study>.journal here
    recipe = _recipe(tmp_path, trials=10, verify_every=10, baseline={"tp": 2, "pp": 2, "dp": 4},
                     strategy="optuna")
    assert main(["--config", recipe]) == 0
    out, err = capsys.readouterr()
    name = tiny_config().study_name()
    journal = tmp_path / "runs" / "studies" / f"{name}.journal"
    assert journal.is_file()
    assert f"study {name} in {journal}" in err
    assert "recommended: tp=" in out and "vs the baseline tp=2 pp=2 dp=4 on 16 GPUs" in out
    assert f"results: study {name} in {journal}" in out
    command = next(line for line in out.splitlines() if line.startswith("resume or extend"))
    args = shlex.split(command.split(": ", 1)[1])
    assert args[:3] == ["python", "-m", "vtrain_ml.search"]
    assert args[3:] == ["--resume", "--study", name, "--storage", f"journal:///{journal}"]
    monkeypatch.chdir(tmp_path.parent)  # the printed command works from any directory
    assert main([*args[3:], "--trials", "20", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["trials"] == 20 and report["study"] == name


def test_patience_stops_a_search_whose_best_exact_plan_no_longer_changes() -> None:
    # Constant gives verification nothing to learn from: the best exact plan settles early.
    full = run_search(tiny_config(trials=120, verify_every=10, strategy="optuna"), factory=Constant)
    early = run_search(tiny_config(trials=120, verify_every=10, patience=2, strategy="optuna"),
                       factory=Constant)
    assert full.trials == 120 and not full.surrogate["stopped_early"]
    assert early.surrogate["stopped_early"] and early.trials < 120
    assert early.best is not None and "stopped early" in _table(early)


def _table(report: SearchReport) -> str:
    from vtrain_ml.planner.report import render_table

    return render_table(report)


def _dominated(report: SearchReport) -> list[str]:
    """Plans printed on the front that some exactly evaluated, fitting plan beats on both axes."""
    bad = []
    for o in report.pareto:
        for other in report.evaluated:
            e, x = other.exact, o.exact
            if e.fits_in_memory and e.iteration_time_s <= x.iteration_time_s and e.cost_usd <= x.cost_usd \
                    and (e.iteration_time_s, e.cost_usd) != (x.iteration_time_s, x.cost_usd):
                bad.append(str(o.plan))
    return bad


@pytest.mark.parametrize("strategy", ["screen", "optuna"])
def test_a_searched_pareto_front_has_no_dominated_point_and_is_within_the_error_of_the_exhaustive_one(
        strategy: str) -> None:
    config = tiny_config(objective="pareto", trials=60, verify_every=20, strategy=strategy)
    found = run_search(config, factory=lambda: NoisyOracle(0.05))
    reference = run_exhaustive(config)
    assert found.pareto and not _dominated(found) and not found.complete
    # A searched front is partial: a point of it may be dominated by a plan never simulated, but
    # only by less than the scorer can tell apart (each plan's score may be 5% off either way:
    # 10% between two), never by more
    exact = [(o.exact.iteration_time_s, o.exact.cost_usd) for o in reference.pareto]
    for o in found.pareto:
        t, c = o.exact.iteration_time_s, o.exact.cost_usd
        worse = [(t / et - 1, c / ec - 1) for et, ec in exact if et <= t and ec <= c and (et < t or ec < c)]
        assert all(max(dt, dc) < 0.10 for dt, dc in worse), f"{o.plan} is dominated beyond the error: {worse}"
    assert found.exact_evaluations < reference.exact_evaluations


def test_a_small_pareto_space_is_enumerated_and_a_searched_front_is_called_partial(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = _recipe(tmp_path, objective="pareto", storage="memory", trials=20, verify_every=10)
    assert main(["--config", recipe, "--json"]) == 0
    enumerated = json.loads(capsys.readouterr().out)
    assert enumerated["mode"] == "exhaustive" and enumerated["complete"]
    assert main(["--config", recipe, "--enumerate-below", "0", "--strategy", "optuna"]) == 0
    out, err = capsys.readouterr()
    assert "warning: the Pareto front is partial" in err and "--exhaustive" in err
    assert "fastest on the front:" in out and "cheapest on the front:" in out


@pytest.mark.parametrize("space", [{}, {"use_all_gpus": True}, {"dp": [1, 2, 4, 8, 16, 32]}])
@pytest.mark.parametrize("objective", [Objective.TIME, Objective.COST, Objective.PARETO])
def test_no_plan_ever_uses_more_gpus_than_max_gpus(space: dict[str, object], objective: Objective) -> None:
    config = tiny_config(max_gpus=12, gpus_per_node=4, global_batch=48, objective=objective.value, trials=20,
                         verify_every=10, space={**tiny_dict()["space"], **space})
    for report in (run_search(config, factory=lambda: NoisyOracle(0.1)), run_exhaustive(config)):
        plans = [*report.evaluated, *report.top, *report.pareto]
        assert plans and all(o.plan["num_gpus"] <= 12 and o.exact.num_gpus <= 12 for o in plans)


def test_csv_holds_every_exact_evaluation_in_the_sort_order(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "plans.csv"
    recipe = _recipe(tmp_path, storage="memory")
    assert main(["--config", recipe, "--exhaustive", "--csv", str(table), "--sort", "cost"]) == 0
    out = capsys.readouterr().out
    assert "sorted by cost" in out and f"every exact evaluation in {table}" in out
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == run_exhaustive(tiny_config()).exact_evaluations
    feasible = [r for r in rows if r["feasible"] == "True"]
    assert rows[: len(feasible)] == feasible, "feasible plans first"
    costs = [float(r["cost_usd"]) for r in feasible]
    assert costs == sorted(costs) and {"tp", "pp", "dp", "iteration_time_s", "mfu"} <= set(rows[0])


def test_a_gpu_type_with_no_plan_that_fits_is_named_with_the_reason() -> None:
    """Llama 3.1 405B on 1,024 GPUs at global batch 1,536: pp is 1 or 2 (126 layers, dp divides
    the batch), so 25B parameters per GPU at tp 8: no H100 plan's model states fit its 80 GiB,
    and the results would hold only B200 plans without saying why."""
    import numpy as np

    from vtrain_ml.planner import rules
    from vtrain_ml.planner.config import config_from_dict
    from vtrain_ml.planner.space import SearchSpace
    from vtrain_ml.planner.table import SpaceTable

    data = {"model": "llama-3-405b", "hardware": ["h100-sxm-80gb", "b200"], "global_batch": 1536,
            "seq": 8192, "max_gpus": 1024, "space": {"num_gpus": [1024]}, "storage": "memory"}
    table = SpaceTable(SearchSpace(config_from_dict(data)))
    feasible = np.flatnonzero(rules.feasible(table))
    assert len(feasible)  # B200 plans fit
    (line,) = rules.hardware_notes(table, feasible)
    assert line.startswith("h100-sxm-80gb: none of its plans passes the rules and the static memory bound")
    assert "80 GiB" in line
    one = SpaceTable(SearchSpace(config_from_dict({**data, "hardware": "b200"})))
    assert rules.hardware_notes(one, np.flatnonzero(rules.feasible(one))) == ()


def test_a_front_of_one_plan_is_one_line() -> None:
    from vtrain_ml.planner.evaluation import evaluate_exact
    from vtrain_ml.planner.outcomes import make_report, outcome
    from vtrain_ml.planner.report import recommendation
    from vtrain_ml.planner.space import SearchSpace

    space = SearchSpace(tiny_config(objective="pareto"))
    candidate = next(c for c in map(space.build, space.enumerate()) if c.job is not None)
    plan = outcome(space, candidate, evaluate_exact(candidate.job))
    lines = recommendation(make_report(space, "exhaustive", [plan], 1, 0, 0.1))
    assert len(lines) == 1  # not "fastest on the front: X" and "cheapest on the front: X"
    assert lines[0].startswith("the front is one plan, fastest and cheapest: tp=")


def test_a_pareto_search_with_a_baseline_says_where_the_front_stands_against_it() -> None:
    from dataclasses import replace

    from vtrain_ml.planner.evaluation import evaluate_exact
    from vtrain_ml.planner.outcomes import make_report, outcome
    from vtrain_ml.planner.report import recommendation
    from vtrain_ml.planner.space import SearchSpace

    space = SearchSpace(tiny_config(objective="pareto"))
    plans = [outcome(space, c, evaluate_exact(c.job)) for c in map(space.build, space.enumerate())
             if c.job is not None and c.feasible][:40]
    report = make_report(space, "exhaustive", plans, len(plans), 0, 0.1)
    slowest = max(plans, key=lambda o: o.exact.iteration_time_s)
    fast, cheap = report.pareto[0], report.pareto[-1]
    assert fast is not cheap
    (*_, versus) = recommendation(replace(report, baseline=slowest))
    assert versus.startswith("  vs the baseline tp=")
    speedup = slowest.exact.iteration_time_s / fast.exact.iteration_time_s
    assert f"the front's fastest is {speedup:.3f}x faster and its cheapest $" in versus
