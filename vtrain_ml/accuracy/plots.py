"""Predicted-vs-measured scatter on log axes with y = x and a +-10% band."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from simulator.errors import ConfigError


def measured_vs_predicted(table: pd.DataFrame, title: str) -> Any:
    """Return a matplotlib Figure (never shown); `table` has measured_ms, predicted_ms, source."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'vtrain-ml[surrogate]'") from None
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for source, part in table.groupby("source"):
        ax.scatter(part.measured_ms / 1e3, part.predicted_ms / 1e3, s=14, alpha=0.75, label=source)
    lo = float(min(table.measured_ms.min(), table.predicted_ms.min())) / 1e3 * 0.8
    hi = float(max(table.measured_ms.max(), table.predicted_ms.max())) / 1e3 * 1.25
    line = np.geomspace(lo, hi, 50)
    ax.plot(line, line, "k-", lw=1, label="y = x")
    ax.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.2, label="+-10%")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured iteration (s)",
           ylabel="predicted iteration (s)", title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
