"""Predicted-vs-measured scatter plots on log axes with y = x and a +-10% band.

Every function returns a matplotlib Figure and never shows it; `save_figure` writes one
atomically after `check_plot_path` has refused a path that cannot be written (before any work).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.errors import ConfigError
from vtrain_ml.outputs import probe_folder


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'vtrain-ml[surrogate]'") from None
    return plt


def check_plot_path(path: str) -> None:
    """One clear error for a plot path that cannot be written, before the long work starts."""
    plt = _pyplot()
    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"--plot {path} is a directory; give a file name such as {target / 'plot.png'}")
    folder = target.parent
    if not folder.is_dir():
        raise ConfigError(f"--plot {path}: folder {folder} does not exist; create it or choose "
                          "another path")
    probe_folder("--plot", path, folder)
    kinds = plt.figure().canvas.get_supported_filetypes()
    plt.close("all")
    suffix = target.suffix.lstrip(".").lower()
    if suffix not in kinds:
        raise ConfigError(f"--plot {path}: '{target.suffix or 'no extension'}' is not an image format; "
                          f"use one of {', '.join('.' + k for k in sorted(kinds))} (e.g. .png)")


def save_figure(fig: Any, path: str, dpi: int = 130) -> None:
    """Written beside the target, then renamed: never a half-written image."""
    target = Path(path)
    tmp = target.with_name(f".{target.stem}.tmp{target.suffix}")
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write --plot {path}: {exc.strerror or exc}") from None
    finally:
        _pyplot().close(fig)


def _scatter(ax: Any, measured: pd.Series, predicted: pd.Series, groups: pd.Series, unit: str,
             title: str) -> None:
    for name, index in groups.groupby(groups).groups.items():
        ax.scatter(measured[index], predicted[index], s=14, alpha=0.75, label=str(name))
    lo = float(min(measured.min(), predicted.min())) * 0.8
    hi = float(max(measured.max(), predicted.max())) * 1.25
    line = np.geomspace(lo, hi, 50)
    ax.plot(line, line, "k-", lw=1, label="y = x")
    ax.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.2, label="+-10%")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel=f"measured ({unit})",
           ylabel=f"predicted ({unit})", title=title)
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for axis in (ax.xaxis, ax.yaxis):  # plain numbers, not 4x10^1
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=7)


def _groups(table: pd.DataFrame) -> pd.Series:
    if "tag" in table and (table.tag != "").any():
        return table.tag.where(table.tag != "", table.source)
    return table.source


def measured_vs_predicted(table: pd.DataFrame, title: str, memory_title: str | None = None) -> Any:
    """Iteration time (and, with `memory_title`, peak memory) predicted against measured; `table`
    has measured_ms, predicted_ms, source (tag, measured_GiB, predicted_GiB optional)."""
    plt = _pyplot()
    panels = 2 if memory_title else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 5), squeeze=False)
    timed = table[table.measured_ms.notna()]
    _scatter(axes[0][0], timed.measured_ms / 1e3, timed.predicted_ms / 1e3, _groups(timed),
             "iteration s", title)
    if memory_title:
        have = table[table.measured_GiB.notna()]
        _scatter(axes[0][1], have.measured_GiB, have.predicted_GiB, _groups(have), "peak allocated GiB",
                 memory_title)
    fig.tight_layout()
    return fig


def before_after(before: pd.DataFrame, after: pd.DataFrame, before_title: str, after_title: str) -> Any:
    """Calibration's effect: the same rows predicted by the starting hardware and by the fit."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, table, title in ((axes[0], before, before_title), (axes[1], after, after_title)):
        _scatter(ax, table.measured_ms / 1e3, table.predicted_ms / 1e3, _groups(table), "iteration s", title)
    fig.tight_layout()
    return fig
