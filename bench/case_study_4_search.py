"""Case study 4, Part B: the search recipes through `vtrain_ml.planner` (bench/case_study_4.py).

Per recipe: `load_config` (a recipe this build's planner cannot read -- the GPU type as a knob,
`num_gpus`, `ep`, `precision` recipes are issue 25 item 1's fields -- is reported in one line,
not a traceback), `run_search`, then per GPU type the fastest plan that fits against the
published layout on that GPU (Part A's exact result): both simulated exactly here
(`SearchSpace.build(plan).job`), with cost per million tokens, time to train and the breakdown
terms that differ most; finally the Pareto front (time to train vs cost), published layouts
marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from case_study_4 import DAY_S, Simulated, breakdown_shares, usd_per_million_tokens

from simulator import simulate
from simulator.errors import VTrainError
from simulator.report.result import SimulationResult


def plan_gpu(plan: dict[str, Any], default: str) -> str:
    """The GPU type of a plan: its `hardware` knob (a name or {name: ...}), else the recipe's."""
    hw = plan.get("hardware", default)
    return str(hw.get("name", default)) if isinstance(hw, dict) else str(hw)


def fastest_per_gpu(outcomes: list[Any], default: str) -> dict[str, Any]:
    """GPU type -> the feasible plan outcome with the shortest iteration (time to train)."""
    best: dict[str, Any] = {}
    for o in outcomes:
        if not o.exact.fits_in_memory:
            continue
        gpu = plan_gpu(o.plan, default)
        if gpu not in best or o.exact.iteration_time_s < best[gpu].exact.iteration_time_s:
            best[gpu] = o
    return best


def biggest_differences(ours: dict[str, float], theirs: dict[str, float], n: int = 3) -> str:
    """The n breakdown shares that differ most between two plans, as 'term a% vs b%'."""
    keys = set(ours) | set(theirs)
    ranked = sorted(keys, key=lambda k: -abs(ours.get(k, 0.0) - theirs.get(k, 0.0)))[:n]
    return ", ".join(f"{k} {ours.get(k, 0.0):.0%} vs {theirs.get(k, 0.0):.0%}" for k in ranked)


def _line(label: str, r: SimulationResult, gpus: int) -> str:
    return (f"  {label:<10} {r.iteration_time_s:8.2f} s  {r.tokens_per_s / gpus:7.0f} tok/s/GPU  "
            f"MFU {r.mfu:6.1%}  ${usd_per_million_tokens(r):6.2f}/M tok  "
            f"{(r.time_to_train_s or 0) / DAY_S:6.0f} days  ${(r.cost_to_train_usd or 0) / 1e6:6.1f}M"
            f"  {'fits' if r.fits_in_memory else 'OOM'}")


def _job_of(config: Any, plan: dict[str, Any]) -> Any:
    """The job of a reported plan (its fields named as the job's), built the way a `baseline:`
    of the same fields is: `plan_dict` spells schedule and virtual stages out, the space's knob
    joins them."""
    from vtrain_ml.planner.baseline import baseline_candidate
    from vtrain_ml.planner.space import SearchSpace

    candidate = baseline_candidate(SearchSpace(config.model_copy(update={"baseline": plan})))
    assert candidate is not None and candidate.job is not None, plan
    return candidate.job


def compare(config: Any, report: Any, published: list[Simulated]) -> None:
    model = str(config.model if isinstance(config.model, str) else config.model.get("preset"))
    best = fastest_per_gpu(list(report.ranked or report.evaluated), str(config.hardware))
    for gpu, outcome in sorted(best.items()):
        job = _job_of(config, outcome.plan)
        ours = simulate(job)
        print(f"\n{model} on {gpu}: best plan found {outcome.plan}")
        print(_line("found", ours, job.cluster.num_gpus))
        for pub in (p for p in published if p.case.model == model and p.case.gpu == gpu):
            print(_line("published", pub.result, pub.case.num_gpus) +
                  f"  ({pub.case.precision}, {pub.case.num_gpus} GPUs)")
            diff = biggest_differences(breakdown_shares(ours.breakdown),
                                       breakdown_shares(pub.result.breakdown))
            print(f"  breakdown, found vs published: {diff}")


def plot_front(fronts: dict[str, tuple[list[Any], str]], published: list[Simulated], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(1, len(fronts)), figsize=(6 * max(1, len(fronts)), 4.8))
    panels = list(getattr(axes, "flat", [axes]))
    for ax, (model, (outcomes, default)) in zip(panels, fronts.items(), strict=False):
        for o in outcomes:
            e = o.exact
            if e.time_to_train_s and e.cost_to_train_usd and e.fits_in_memory:
                ax.scatter(e.time_to_train_s / DAY_S, e.cost_to_train_usd / 1e6, s=12,
                           label=plan_gpu(o.plan, default))
        for p in (p for p in published if p.case.model == model):
            r = p.result
            ax.scatter((r.time_to_train_s or 0) / DAY_S, (r.cost_to_train_usd or 0) / 1e6, marker="*",
                       s=120, edgecolors="black", label=f"published {p.case.gpu} x{p.case.num_gpus}")
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=6)
        ax.set(title=f"{model}: Pareto front (time vs cost)", xlabel="days to train",
               ylabel="$M to train", xscale="log")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"\nplot: {path}")


def run(recipes: tuple[Path, ...], published: list[Simulated], plot: Path | None) -> int:
    """Part B; 0 when every recipe ran, 2 when one could not be read by this build's planner."""
    from vtrain_ml.planner.config import load_config
    from vtrain_ml.planner.runner import run_search

    print("\n## Part B: search (Pareto: time to train vs cost)")
    status, fronts = 0, {}
    for recipe in recipes:
        try:
            config = load_config(recipe)
        except VTrainError as exc:
            print(f"\n{recipe.name}: this build's planner cannot read the recipe (the search space's "
                  f"new fields are issue 25 item 1's): {exc}")
            status = 2
            continue
        report = run_search(config)
        print(f"\n{recipe.name}: {report.exact_evaluations} exact evaluations of a "
              f"{report.space_size}-plan space in {report.wall_s:.0f} s; Pareto front "
              f"{len(report.pareto)} plans")
        compare(config, report, published)
        model = str(config.model if isinstance(config.model, str) else config.model.get("preset"))
        fronts[model] = (list(report.pareto), str(config.hardware))
    if plot is not None and fronts:
        plot_front(fronts, published, plot)
    return status
