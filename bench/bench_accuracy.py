"""Accuracy against the measured A100 runs (vTrain's data): uncalibrated and cross-validated.

Prints the table quoted in the README and writes docs/accuracy_*.png (predicted vs measured):
- uncalibrated: the datasheet a100-80gb file with its default efficiencies;
- calibrated, k-fold: every row predicted by parameters fitted without it;
- extrapolation: fitted on the 3.6B and 18.4B multi-node rows, predicting the 39.1B rows.
The independent fits run in parallel processes (joblib). Never scores rows it fitted.

Run: python bench/bench_accuracy.py [--folds 5]   (several minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from simulator.catalog import resolve_hardware  # noqa: E402
from vtrain_ml.accuracy.calibration import cross_validate, holdout  # noqa: E402
from vtrain_ml.accuracy.measurements import read_measurements  # noqa: E402
from vtrain_ml.accuracy.plots import measured_vs_predicted  # noqa: E402
from vtrain_ml.accuracy.predict import jobs_for, predict_ms, score, with_predictions  # noqa: E402

FILES = {"single node (2-8 A100)": "a100_single_node.csv",
         "multi node (up to 512 A100)": "a100_multi_node.csv"}


def _task(kind: str, file: str, folds: int) -> tuple[str, str, np.ndarray]:
    rows = read_measurements([ROOT / "data" / "measured" / file]).rows
    jobs, measured = jobs_for(rows, "a100-80gb"), rows.measured_ms.to_numpy()
    base = resolve_hardware("a100-80gb")
    if kind == "uncalibrated":
        return kind, file, predict_ms(jobs)
    if kind == "cv":
        return kind, file, cross_validate(jobs, measured, base, k=folds)
    small = (rows.params_billion < 39).to_numpy()
    return kind, file, holdout(jobs, measured, small, base)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    start = time.perf_counter()
    tasks = [(k, f) for f in FILES.values() for k in ("uncalibrated", "cv")]
    tasks.append(("extrapolate", FILES["multi node (up to 512 A100)"]))
    results = Parallel(n_jobs=args.jobs)(delayed(_task)(k, f, args.folds) for k, f in tasks)
    out = {(k, f): p for k, f, p in results}
    lines = ["| data | rows | model | MAPE | median APE | P90 APE | rows predicted low |",
             "|---|---|---|---|---|---|---|"]
    for label, file in FILES.items():
        rows = read_measurements([ROOT / "data" / "measured" / file]).rows
        measured = rows.measured_ms.to_numpy()
        for kind, name in (("uncalibrated", "datasheet a100-80gb (uncalibrated)"),
                           ("cv", f"calibrated, {args.folds}-fold cross-validated")):
            s = score(out[(kind, file)], measured)
            lines.append(f"| {label} | {s.n} | {name} | {s.mape:.1%} | {s.median_ape:.1%} | "
                         f"{s.p90_ape:.1%} | {s.frac_low:.0%} |")
            if kind == "cv":
                table = with_predictions(rows, out[(kind, file)])
                fig = measured_vs_predicted(table, f"{label}: {args.folds}-fold CV, MAPE {s.mape:.1%}")
                fig.savefig(ROOT / "docs" / f"accuracy_{file.split('_')[1]}.png", dpi=110)
        if "multi" in file:
            big = (rows.params_billion >= 39).to_numpy()
            s = score(out[("extrapolate", file)], measured[big])
            lines.append(f"| 39.1B rows of the multi-node file | {s.n} | fitted on 3.6B + 18.4B "
                         f"rows only | {s.mape:.1%} | {s.median_ape:.1%} | {s.p90_ape:.1%} | "
                         f"{s.frac_low:.0%} |")
    print("\n".join(lines))
    print(f"\n({time.perf_counter() - start:.0f} s wall, {args.jobs} processes)")


if __name__ == "__main__":
    main()
