"""python -m vtrain_ml.search: the fastest / cheapest layout (or largest model) for a GPU budget.

    python -m vtrain_ml.search --model mt-nlg-530b --hardware a100-80gb --max-gpus 3360 \\
        --global-batch 1920 --seq 2048 [--objective time|cost|pareto|largest_model] ...
    python -m vtrain_ml.search --config examples/case_study_1_mtnlg.yaml [--exhaustive] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.errors import ConfigError
from vtrain_ml.cli.common import add_common, run
from vtrain_ml.planner.config import DEFAULT_STORAGE, Objective, SearchConfig, config_from_dict, load_config
from vtrain_ml.planner.report import SearchReport, pareto_figure, render_table
from vtrain_ml.planner.verify import VerifyEvent

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# CLI flag -> SearchConfig field (values given on the command line override the --config file)
FLAGS: dict[str, tuple[str, Any, str]] = {
    "model": ("--model", str, "model preset (data/models) to lay out"),
    "hardware": ("--hardware", str, "GPU type (catalog name or hardware YAML file)"),
    "max_gpus": ("--max-gpus", int, "most GPUs a plan may use"),
    "global_batch": ("--global-batch", int, "global batch size (sequences)"),
    "seq": ("--seq", int, "sequence length (overrides the preset's)"),
    "objective": ("--objective", str, "time | cost | pareto | largest_model"),
    "trials": ("--trials", int, "surrogate-scored Optuna trials (default 3000)"),
    "verify_every": ("--verify-every", int, "verify exactly every N trials (default 100)"),
    "verify_top": ("--verify-top", int, "candidates verified per round (default 5)"),
    "initial_samples": ("--initial-samples", int, "exact samples for a focused surrogate (default 24)"),
    "surrogate": ("--surrogate", str, "trained surrogate (surrogate.model.Surrogate.save) to use"),
    "storage": ("--storage", str, "Optuna storage URL (default sqlite:///runs/search.db; "
                                  "journal:///file.log for a journal file, memory for a "
                                  "throwaway run)"),
    "study": ("--study", str, "study name (default: derived from the search's content hash)"),
    "seed": ("--seed", int, "sampler and sampling seed"),
    "n_jobs": ("--n-jobs", int, "processes for exact simulation batches"),
    "train_tokens": ("--train-tokens", float, "token budget: time and cost to train"),
    "price_per_gpu_hour_usd": ("--price", float, "price per GPU-hour in USD"),
    "time_budget_days": ("--time-budget-days", float, "wall-clock budget (largest_model)"),
    "tokens_per_parameter": ("--tokens-per-parameter", float, "tokens per parameter (largest_model)"),
    "top": ("--top", int, "rows of the table (default 10)"),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vtrain_ml.search",
        description="Surrogate-driven Optuna search for the fastest, cheapest or Pareto-optimal "
                    "training layout; candidates are verified with the exact simulator, and the "
                    "answer is always the simulator's.")
    p.add_argument("--config", metavar="FILE", help="search recipe (YAML); flags override it")
    for field, (flag, kind, text) in FLAGS.items():
        p.add_argument(flag, dest=field, type=kind, help=text)
    p.add_argument("--resume", action="store_true",
                   help="continue (or join) an existing study; with --study alone, its stored settings")
    p.add_argument("--exhaustive", action="store_true", help="simulate every valid plan instead")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--plot", metavar="PNG", help="write the time-versus-cost plot")
    p.add_argument("--mlflow", action="store_true", help="log the search to MLflow")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_common(p)
    return p


def build_config(args: argparse.Namespace) -> SearchConfig:
    given = {f: getattr(args, f) for f in FLAGS if getattr(args, f) is not None}
    if args.config:
        return load_config(args.config, given)
    if args.resume and args.study and "model" not in given:
        from vtrain_ml.planner.study import stored_config

        url = given.get("storage") or DEFAULT_STORAGE
        return config_from_dict({**stored_config(url, args.study), **given}, where=f"study {args.study}")
    missing = [FLAGS[f][0] for f in ("max_gpus", "global_batch") if f not in given]
    if "model" not in given:
        missing.insert(0, "--model")
    if missing:
        raise ConfigError(f"missing {', '.join(missing)} (or give a recipe with --config FILE)")
    return config_from_dict(given, where="command line")


class Progress:
    """Progress on stderr: messages, a trial counter (on a terminal) and each verification round."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total = total
        self.quiet = quiet
        self.tty = sys.stderr.isatty()

    def message(self, text: str) -> None:
        if not self.quiet:
            sys.stderr.write(f"{text}\n")

    def trial(self, number: int) -> None:
        if self.tty and not self.quiet and number % 10 == 0:
            sys.stderr.write(f"\r  trial {number + 1}/{self.total}")

    def verified(self, event: VerifyEvent) -> None:
        best = event.best_exact
        where = "no feasible plan yet"
        if best:
            where = (f"best exact {best.iteration_time_s:.2f} s/iteration, ${best.cost_usd:,.0f}, "
                     f"{best.num_gpus} GPUs, {best.parameters / 1e9:.1f}B params")
        start = "\r" if self.tty else ""
        self.message(f"{start}verify round {event.round}: {event.trials}/{self.total} trials, "
                     f"+{event.verified} exact -> {event.exact_evaluations} exact evaluations; {where}")


def _main(args: argparse.Namespace) -> int:
    import optuna

    # Optuna logs every trial at INFO; our progress lines replace that unless --debug
    optuna.logging.set_verbosity(optuna.logging.DEBUG if args.debug else optuna.logging.WARNING)
    config = build_config(args)
    progress = Progress(config.trials, args.quiet or args.json)
    if args.exhaustive:
        from vtrain_ml.planner.exhaustive import run_exhaustive

        report = run_exhaustive(config, progress.message)
    else:
        from vtrain_ml.planner.runner import Hooks, run_search

        hooks = Hooks(message=progress.message, verified=progress.verified, trial=progress.trial)
        report = run_search(config, resume=args.resume, hooks=hooks)
    render(report, config, args)
    return 0


def render(report: SearchReport, config: SearchConfig, args: argparse.Namespace) -> None:
    figure = pareto_figure(report) if args.plot or args.mlflow else None
    if args.plot and figure is not None:
        save_figure_atomic(figure, args.plot)
    if args.mlflow:
        log_to_mlflow(report, config, figure)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=1) + "\n")
        return
    title = {Objective.TIME: "the fastest plan", Objective.COST: "the cheapest plan",
             Objective.PARETO: "time-versus-cost plans",
             Objective.LARGEST_MODEL: "the largest model trained within the budget"}[config.objective]
    sys.stdout.write(f"{report.mode} for {title} (exact simulator numbers):\n")
    sys.stdout.write(render_table(report) + "\n")
    if config.objective is Objective.PARETO and report.pareto:
        sys.stdout.write("\nPareto front (time, cost):\n")
        for o in report.pareto:
            p = o.plan
            sys.stdout.write(f"  {o.exact.iteration_time_s:8.2f} s  ${o.exact.cost_usd:12,.0f}  "
                             f"tp={p['tp']} pp={p['pp']} dp={p['dp']} ({p['num_gpus']} GPUs)\n")
    if args.plot:
        sys.stdout.write(f"\nplot written to {args.plot}\n")


def save_figure_atomic(figure: Figure, path: str) -> None:
    """PNG written to a temporary file and renamed: a killed process leaves no half image."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".png")
    os.close(fd)
    try:
        figure.savefig(tmp, format="png", dpi=120)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def log_to_mlflow(report: SearchReport, config: SearchConfig, figure: Figure | None) -> None:
    """Parameters, metrics, the table of plans and the plot, through vtrain_ml.tracking."""
    try:
        from vtrain_ml import tracking
    except ImportError:
        raise ConfigError("--mlflow needs vtrain_ml.tracking (the surrogate extra)") from None
    import pandas as pd

    params = config.model_dump(mode="json")
    metrics = {"exact_evaluations": report.exact_evaluations, "trials": report.trials,
               "wall_s": report.wall_s}
    if report.best:
        metrics |= {"best_iteration_time_s": report.best.exact.iteration_time_s,
                    "best_cost_usd": report.best.exact.cost_usd, "best_mfu": report.best.exact.mfu}
    for key, value in report.surrogate.get("error", {}).items():
        metrics[f"surrogate_{key}"] = value
    table = pd.DataFrame([{**o.plan, **o.exact.to_dict()} for o in report.top])
    with tracking.start_run("vtrain-search", f"{report.mode}-{config.study_name()}"):
        tracking.log_params(params)
        tracking.log_metrics(metrics)
        tracking.log_table(table, "top_plans.json")
        if figure is not None:
            tracking.log_figure(figure, "pareto.png")


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), argv)

