"""Evaluation plots of a surrogate on held-out rows. Each returns a Figure (never shows it)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def _figure(**kwargs: Any) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(**kwargs)


def predicted_vs_simulated(test: pd.DataFrame) -> Any:
    """Log-log scatter of predicted against simulated iteration time (and the identity line)."""
    fig, ax = _figure(figsize=(5, 5))
    actual, pred = test["iteration_time_s"], test["predicted_iteration_time_s"]
    ax.loglog(actual, pred, ".", ms=2, alpha=0.5)
    lo, hi = float(min(actual.min(), pred.min())), float(max(actual.max(), pred.max()))
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set_xlabel("simulated iteration time (s)")
    ax.set_ylabel("surrogate iteration time (s)")
    ax.set_title("held-out model shapes")
    return fig


def error_histogram(test: pd.DataFrame) -> Any:
    """Absolute percentage error of iteration time and peak memory."""
    fig, ax = _figure(figsize=(6, 4))
    for col, label in (("iteration_time_s", "iteration time"), ("peak_memory_bytes", "peak memory")):
        err = np.abs(test[f"predicted_{col}"] / test[col] - 1) * 100
        ax.hist(np.clip(err, 0, 10), bins=50, alpha=0.6, label=label)
    ax.set_xlabel("absolute percentage error (%, clipped at 10)")
    ax.set_ylabel("jobs")
    ax.legend()
    return fig


def error_by_region(by_region: dict[str, dict[str, float]], region: str) -> Any:
    """Iteration-time MAPE per value of one region of the space (e.g. schedule)."""
    fig, ax = _figure(figsize=(6, 3.5))
    values = by_region[region]
    ax.bar(list(values), [100 * v for v in values.values()])
    ax.set_ylabel("MAPE (%)")
    ax.set_title(f"iteration-time error by {region}")
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    return fig


def evaluation_figures(test: pd.DataFrame, by_region: dict[str, dict[str, float]]) -> dict[str, Any]:
    figures = {"predicted_vs_simulated.png": predicted_vs_simulated(test),
               "error_histogram.png": error_histogram(test)}
    for region in by_region:
        figures[f"error_by_{region}.png"] = error_by_region(by_region, region)
    return figures
