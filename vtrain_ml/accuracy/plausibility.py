"""Measurements in the wrong unit, caught before they are scored or fitted.

A runs file states the GPU (in its job file) and the model; the uncalibrated simulator predicts
its iteration time within tens of percent (the worst datasheet error on the shipped rows is
+83%, docs/accuracy.md) and its allocated memory within a few percent. A measurement 100x or
more away from that prediction is not a slow run: it is a number in another unit (seconds in an
``iteration_ms`` column: every error ~1000x), and fitting or scoring it gives nonsense ("MAPE
101592%" and a written hardware file). Such rows are refused in one line that names the column,
the factor and the unit it most likely holds. No efficiency of the calibrated hardware model can
move a prediction that far (each is bounded to a physical range, calibration.PARAMS).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from simulator.errors import DataError
from vtrain_ml.accuracy.runs import Run

IMPLAUSIBLE = 100.0  # measured / predicted beyond this factor (either way) is another unit
# the unit a time column probably holds, by the power of 1000 it is off by (measured / predicted)
TIME_UNITS = {"iteration_ms": {-1: "seconds (rename the column to iteration_s)",
                               1: "microseconds (divide by 1000)"},
              "iteration_s": {1: "milliseconds (rename the column to iteration_ms)",
                              2: "microseconds (divide by 1e6)"},
              "iteration time (ms)": {-1: "seconds", 1: "microseconds"}}
MEMORY_UNITS = {1: "MiB (divide by 1024)", 3: "bytes (divide by 1024**3)", -1: "TiB"}


@dataclass(frozen=True)
class Implausible:
    run: Run
    column: str
    measured: float  # in the column's unit
    predicted: float  # in the column's unit

    @property
    def ratio(self) -> float:
        return self.measured / self.predicted


def _likely_unit(column: str, ratio: float, base: float) -> str:
    power = round(math.log(ratio, base))
    table = MEMORY_UNITS if column.endswith("GiB") else TIME_UNITS.get(column, {})
    return table.get(power, f"another unit ({ratio:.3g}x the prediction)")


def implausible_times(runs: Sequence[Run], predicted_s: Sequence[float]) -> list[Implausible]:
    out = []
    for run, seconds in zip(runs, predicted_s, strict=True):
        if run.iteration_s is None:
            continue
        scale = 1.0 if run.time_column == "iteration_s" else 1e3
        item = Implausible(run, run.time_column or "iteration_ms", run.iteration_s * scale, seconds * scale)
        if not 1 / IMPLAUSIBLE < item.ratio < IMPLAUSIBLE:
            out.append(item)
    return out


def implausible_memory(runs: Sequence[Run], predicted_bytes: Sequence[float]) -> list[Implausible]:
    gib = 2.0**30
    out = []
    for run, peak in zip(runs, predicted_bytes, strict=True):
        if run.peak_allocated_bytes is None or run.oom:
            continue
        item = Implausible(run, "peak_memory_GiB", run.peak_allocated_bytes / gib, peak / gib)
        if not 1 / IMPLAUSIBLE < item.ratio < IMPLAUSIBLE:
            out.append(item)
    return out


def refuse_implausible(found: Sequence[Implausible], total: int) -> None:
    """One `DataError` line for the rows off by 100x or more (nothing when there are none)."""
    if not found:
        return
    first = found[0]
    run, column = first.run, first.column
    factors = sorted(f.ratio for f in found)
    typical = factors[len(factors) // 2]
    unit = _likely_unit(column, typical, 1024.0 if column.endswith("GiB") else 1000.0)
    raise DataError(
        f"{run.source}: {len(found)} of {total} rows measure {column} {typical:.3g}x what the simulator "
        f"predicts for their GPU and model (row {run.row}: {first.measured:.4g} against "
        f"{first.predicted:.4g}); a factor of {IMPLAUSIBLE:g} or more is a unit, not an error: the "
        f"column '{column}' probably holds {unit}")
