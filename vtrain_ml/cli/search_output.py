"""What `vtrain-search` shows and writes: the progress bar, the report, the CSV, plot and MLflow run.

stderr carries the run (where the study lives, how to resume it, a progress bar with ETA, each
verification round); stdout carries the answer (the table, the recommended plan against the
baseline, where the results went), so ``--json > report.json`` and piping stay clean.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.errors import ConfigError
from simulator.fileio import write_text_atomic
from vtrain_ml.planner.config import MEMORY, Objective, SearchConfig
from vtrain_ml.planner.ranking import VerifyEvent
from vtrain_ml.planner.report import SearchReport, pareto_figure, plans_frame, recommendation, render_table
from vtrain_ml.planner.storage import storage_path

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class Progress:
    """stderr: messages, a tqdm bar over the surrogate trials (rate and ETA) on a terminal, and a
    line per verification round (with the ETA too, for logs where a bar would be noise)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.bar: Any = None
        self.best = ""
        self.done = self.total = self.first = 0
        self.began = time.monotonic()

    def message(self, text: str) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            sys.stderr.write(f"{text}\n")

    def trial(self, done: int, total: int) -> None:
        if not self.total:
            self.first, self.total, self.began = done, total, time.monotonic()
        self.done = done
        if self.quiet or not self.tty:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, unit="trial", desc="search", file=sys.stderr,
                            dynamic_ncols=True, smoothing=0.05)
            return
        self.bar.update(done - self.bar.n)

    def eta(self) -> str:
        """Time left at this run's rate of trials (verification rounds included in the rate)."""
        made = self.done - self.first
        if made <= 0 or self.total <= self.done:
            return "0:00"
        left = (time.monotonic() - self.began) / made * (self.total - self.done)
        return f"{int(left // 60)}:{int(left % 60):02d}"

    def verified(self, event: VerifyEvent) -> None:
        best = event.best_exact
        if best is not None:
            self.best = f"best {best.iteration_time_s:.2f} s, ${best.cost_usd:,.0f}"
        if self.bar is not None:
            self.bar.set_postfix_str(f"{event.exact_evaluations} exact, {self.best or 'none feasible yet'}")
        where = "no feasible plan yet"
        if best:
            where = (f"best exact {best.iteration_time_s:.2f} s/iteration, ${best.cost_usd:,.0f}, "
                     f"{best.num_gpus} GPUs, {best.parameters / 1e9:.1f}B params")
        if event.remaining is not None:  # screening: no trials, a shrinking set of contenders
            self.message(f"verify round {event.round}: +{event.verified} exact -> {event.exact_evaluations} "
                         f"exact evaluations; {where}; {event.remaining:,} plans could still beat it "
                         f"(before the surrogate's refit on these)")
            return
        self.message(f"verify round {event.round}: {event.trials}/{self.total} trials (ETA {self.eta()}), "
                     f"+{event.verified} exact -> {event.exact_evaluations} exact evaluations; {where}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def resume_command(command: str, config: SearchConfig) -> str | None:
    """The exact command that resumes (or extends, with a larger --trials) this study."""
    url = config.storage_url()
    if url == MEMORY:
        return None
    return f"{command} --resume --study {config.study_name()} --storage {url}"


def where_it_lives(config: SearchConfig) -> str:
    url = config.storage_url()
    if url == MEMORY:
        return f"study {config.study_name()} in memory (--storage memory: nothing is kept to resume)"
    path = storage_path(url)
    return f"study {config.study_name()} in {path if path is not None else url}"


def render(report: SearchReport, config: SearchConfig, args: argparse.Namespace, command: str) -> None:
    """Every output the arguments ask for, then the answer on stdout."""
    written = []
    figure = pareto_figure(report) if args.plot or args.mlflow else None
    if args.plot and figure is not None:
        save_figure_atomic(figure, args.plot)
        written.append(f"plot {args.plot}")
    if args.csv:
        write_text_atomic(args.csv, plans_frame(report, args.sort).to_csv(index=False))
        written.append(f"every exact evaluation in {args.csv}")
    if args.mlflow:
        written.append(f"MLflow run {log_to_mlflow(report, config, figure)}")
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=1) + "\n")
        return
    title = {Objective.TIME: "the fastest plan", Objective.COST: "the cheapest plan",
             Objective.PARETO: "time-versus-cost plans",
             Objective.LARGEST_MODEL: "the largest model trained within the budget"}[config.objective]
    interrupted = report.surrogate.get("interrupted")
    head = f"{report.mode} for {title} (exact simulator numbers)"
    out = [head + (", interrupted: the best so far:" if interrupted else ":"),
           render_table(report, args.sort)]
    if config.objective is Objective.PARETO and report.pareto:
        out.append("\nPareto front (time, cost), no plan on it dominated by any evaluated plan:")
        for o in report.pareto:
            p = o.plan
            out.append(f"  {o.exact.iteration_time_s:8.2f} s  ${o.exact.cost_usd:12,.0f}  "
                       f"tp={p['tp']} pp={p['pp']} dp={p['dp']} ({p['num_gpus']} {p['hardware']} GPUs, "
                       f"{p['precision']})")
    out += ["", *recommendation(report, config.train_tokens)]
    if report.mode == "search":
        written.insert(0, where_it_lives(config))
        resume = resume_command(command, config)
        if resume:
            optuna = (report.surrogate.get("strategy") or {}).get("name") == "optuna"
            extend = "resume or extend (add --trials N)" if optuna and not interrupted else "resume it"
            out.append(f"{extend}: {resume}")
    if written:
        out.append("results: " + "; ".join(written))
    sys.stdout.write("\n".join(out) + "\n")


def warn_partial_front(report: SearchReport, valid_plans: int | None) -> None:
    """A searched front is only as complete as the plans simulated: say so, with the way out."""
    if report.objective is not Objective.PARETO or report.complete:
        return
    total = f"the {valid_plans:,} valid plans" if valid_plans else "every valid plan"
    sys.stderr.write(f"warning: the Pareto front is partial: it comes from {report.exact_evaluations:,} "
                     f"exact evaluations, not {total} of the space; a plan never simulated may dominate "
                     f"some of its points (--exhaustive simulates them all)\n")


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


def log_to_mlflow(report: SearchReport, config: SearchConfig, figure: Figure | None) -> str:
    """Parameters, metrics, the table of plans and the plot, through vtrain_ml.tracking; returns
    the run id and where it was tracked."""
    try:
        from vtrain_ml import tracking
    except ImportError:
        raise ConfigError("--mlflow needs vtrain_ml.tracking (the surrogate extra)") from None
    params = config.model_dump(mode="json")
    metrics = {"exact_evaluations": report.exact_evaluations, "trials": report.trials,
               "wall_s": report.wall_s}
    if report.best:
        metrics |= {"best_iteration_time_s": report.best.exact.iteration_time_s,
                    "best_cost_usd": report.best.exact.cost_usd, "best_mfu": report.best.exact.mfu}
    for key, value in report.surrogate.get("error", {}).items():
        metrics[f"surrogate_{key}"] = value
    with tracking.start_run("vtrain-search", f"{report.mode}-{config.study_name()}") as run:
        tracking.log_params(params)
        tracking.log_metrics(metrics)
        tracking.log_table(plans_frame(report).head(max(config.top, 1)), "top_plans.json")
        if figure is not None:
            tracking.log_figure(figure, "pareto.png")
        return f"{run.info.run_id} ({tracking.tracking_uri()})"
