"""Figures of a schedule (matplotlib; returned, never shown): GPU allocation over time, stacked
per job, and the cumulative distribution of job completion times of one or more runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simulator.errors import ConfigError
from vtrain_ml.scheduler.result import ScheduleResult

HOUR = 3600.0


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'vtrain-ml[surrogate]'") from None
    return plt


def allocation_grid(result: ScheduleResult) -> tuple[np.ndarray, np.ndarray]:
    """(times s, GPUs per job per time): each job's allocation as a step function sampled at
    every instant any allocation changes (rows = jobs in trace order)."""
    times = np.unique([a.time_s for j in result.jobs for a in j.history] or [0.0])
    grid = np.zeros((len(result.jobs), len(times)))
    for row, job in enumerate(result.jobs):
        for a in job.history:
            grid[row, np.searchsorted(times, a.time_s):] = a.gpus
    return times, grid


def plot_allocation(ax: Any, result: ScheduleResult) -> None:
    times, grid = allocation_grid(result)
    hours = times / HOUR
    colors = _pyplot().get_cmap("tab20")
    bottom = np.zeros(len(times))
    named = len(result.jobs) <= 20  # a legend entry per job only while it stays readable
    for row in range(len(grid)):
        if grid[row].any():
            top = bottom + grid[row]
            ax.fill_between(hours, bottom, top, step="post", color=colors(row % 20), linewidth=0,
                            label=result.jobs[row].name if named else None)
            bottom = top
    ax.axhline(result.num_gpus, color="k", lw=0.8, ls="--", label=f"{result.num_gpus} GPUs")
    ax.set(xlabel="time (h)", ylabel="GPUs allocated", ylim=(0, result.num_gpus * 1.05),
           title=f"GPU allocation per job ({result.policy}, {result.oracle} oracle)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)


def plot_jct_cdf(ax: Any, results: Sequence[ScheduleResult]) -> None:
    for r in results:
        jct = np.sort([j.jct_s for j in r.completed if j.jct_s is not None]) / HOUR
        if jct.size:
            ax.step(jct, np.arange(1, jct.size + 1) / len(r.jobs), where="post",
                    label=f"{r.policy} / {r.oracle} (met {r.deadline_satisfaction_ratio:.0%})")
    ax.set(xscale="log", xlabel="job completion time (h)", ylabel="fraction of all jobs completed",
           ylim=(0, 1.02), title="JCT CDF")
    ax.legend(fontsize=8, loc="lower right")


def schedule_figure(result: ScheduleResult, compared: Sequence[ScheduleResult] = ()) -> Any:
    """Allocation timeline of `result` and the JCT CDF of it and the `compared` runs."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.6, 1]})
    plot_allocation(left, result)
    plot_jct_cdf(right, [result, *[r for r in compared if r is not result]])
    fig.tight_layout()
    return fig
