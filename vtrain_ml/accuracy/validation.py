"""Predicted against measured runs: time and memory errors, the OOM table, in-sample rows.

Time is scored on rows with a measured time, memory on rows with a measured peak (allocated and,
where given, reserved), and running out of memory as a 2x2 table of the simulator's verdict
(fits / does not fit) against what happened (ran / OOM). The dangerous cell is "predicted to fit,
ran out of memory": a planner that trusts the prediction would launch a job that crashes.

A hardware file written by `calibrate` records the fingerprints of the rows it was fitted on;
rows it has seen are marked in-sample, because their error says how well the fit reproduces its
own data, not how well it predicts a new run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from simulator.job.specs import GiB
from vtrain_ml.accuracy.predict import Prediction, Score, by_group, score
from vtrain_ml.accuracy.runs import Runs


@dataclass(frozen=True)
class OomTable:
    """Counts of (predicted fits?, measured OOM?) over the rows that say whether they ran."""

    fits_ran: int
    fits_oom: int  # predicted to fit, ran out of memory: the error that matters
    oom_ran: int  # predicted not to fit, ran
    oom_oom: int

    def to_dict(self) -> dict[str, int]:
        return {"predicted_fits_measured_ran": self.fits_ran, "predicted_fits_measured_oom": self.fits_oom,
                "predicted_oom_measured_ran": self.oom_ran, "predicted_oom_measured_oom": self.oom_oom}


@dataclass(frozen=True)
class InSample:
    """Rows a hardware file was calibrated on (by fingerprint or, for older files, file hash)."""

    mask: np.ndarray
    files: tuple[str, ...]  # the calibrated hardware file names that saw some rows

    @property
    def count(self) -> int:
        return int(self.mask.sum())


@dataclass(frozen=True)
class Validation:
    table: pd.DataFrame  # one row per run: measured, predicted, errors, fits, in_sample
    time: Score
    memory: Score  # peak allocated
    reserved: Score
    oom: OomTable
    groups: pd.DataFrame
    in_sample: InSample
    unseen_time: Score | None  # time score of the rows the hardware file never saw (if some did)

    def to_dict(self) -> dict[str, Any]:
        columns = ["source", "row", "job", "tag", "tp", "dp", "pp", "measured_ms", "predicted_ms", "ape",
                   "measured_GiB", "predicted_GiB", "memory_ape", "measured_reserved_GiB",
                   "predicted_reserved_GiB", "oom", "predicted_fits", "predicted_required_GiB",
                   "fit_decided_by", "in_sample"]
        rows = self.table[columns].astype(object).where(self.table[columns].notna(), None)
        return {"time": self.time.to_dict(), "memory": self.memory.to_dict(),
                "reserved": self.reserved.to_dict(), "oom": self.oom.to_dict(),
                "in_sample_rows": self.in_sample.count, "in_sample_files": list(self.in_sample.files),
                "unseen_time": self.unseen_time.to_dict() if self.unseen_time else None,
                "groups": self.groups.to_dict(orient="records"),
                "rows": rows.to_dict(orient="records")}


def in_sample_rows(runs: Runs) -> InSample:
    """Which rows the hardware each row is simulated on was calibrated on."""
    mask = np.zeros(len(runs.runs), bool)
    files: list[str] = []
    for i, run in enumerate(runs.runs):
        record = run.job.hardware.calibration or {}
        seen = record.get("row_fingerprints")
        hit = run.fingerprint in set(seen) if seen else record.get("data_hash") == runs.file_hash
        if hit:
            mask[i] = True
            if run.job.hardware.name not in files:
                files.append(run.job.hardware.name)
    return InSample(mask, tuple(files))


def validate(runs: Runs, predictions: list[Prediction]) -> Validation:
    table = runs.table()
    table["predicted_ms"] = [p.iteration_s * 1e3 for p in predictions]
    table["predicted_GiB"] = [p.peak_allocated_bytes / GiB for p in predictions]
    table["predicted_reserved_GiB"] = [p.peak_reserved_bytes / GiB for p in predictions]
    table["predicted_fits"] = [p.fits for p in predictions]
    table["predicted_required_GiB"] = [p.required_bytes / GiB for p in predictions]
    table["fit_decided_by"] = [p.decided_by for p in predictions]
    timed = table.measured_ms.notna()
    table["ape"] = np.where(timed, (table.predicted_ms - table.measured_ms).abs() / table.measured_ms, np.nan)
    table["signed_error"] = np.where(timed, (table.predicted_ms - table.measured_ms) / table.measured_ms,
                                     np.nan)
    ran = ~table.oom
    table["memory_ape"] = np.where(ran, (table.predicted_GiB - table.measured_GiB).abs() / table.measured_GiB,
                                   np.nan)
    insample = in_sample_rows(runs)
    table["in_sample"] = insample.mask
    unseen = timed & ~table.in_sample
    return Validation(
        table=table,
        time=score(table.predicted_ms[timed].to_numpy(), table.measured_ms[timed].to_numpy()),
        memory=_score_column(table[ran], "predicted_GiB", "measured_GiB"),
        reserved=_score_column(table[ran], "predicted_reserved_GiB", "measured_reserved_GiB"),
        oom=_oom_table(table.predicted_fits, table.oom),
        groups=by_group(table, group_keys(table)),
        in_sample=insample,
        unseen_time=(score(table.predicted_ms[unseen].to_numpy(), table.measured_ms[unseen].to_numpy())
                     if insample.count > 0 and unseen.any() else None),
    )


def _oom_table(fits: pd.Series, oom: pd.Series) -> OomTable:
    return OomTable(int((fits & ~oom).sum()), int((fits & oom).sum()), int((~fits & ~oom).sum()),
                    int((~fits & oom).sum()))


def group_keys(table: pd.DataFrame) -> tuple[str, ...]:
    """Group rows by tag and layout, or by layout alone when no row has a tag."""
    return ("tag", "tp", "dp", "pp") if (table.tag != "").any() else ("tp", "dp", "pp")


def _score_column(table: pd.DataFrame, predicted: str, measured: str) -> Score:
    have = table[measured].notna()
    return score(table[predicted][have].to_numpy(), table[measured][have].to_numpy())

