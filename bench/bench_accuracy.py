"""Accuracy against measured runs: the issue-12 target table (H100 runs of three stacks, vTrain's
A100 rows), uncalibrated and calibrated by k-fold cross-validation.

Prints the table quoted in the README and writes docs/accuracy_*.png (predicted vs measured):
- H100 (`data/measured/h100/**/runs*.csv`: every runs file there: the shared runs, the runs
  measured one job per process and, once measured, `oom_candidates/runs.csv`): time uncalibrated
  and calibrated 5-fold on the h100-sxm-80gb datasheet file; peak memory (allocated, and reserved
  where measured) and the OOM table from the simulator's memory model (no calibrated parameter);
- A100 (vTrain's rows, Megatron-DeepSpeed): uncalibrated datasheet a100-80gb and calibrated k-fold
  per file, and the multi-node 39.1B rows predicted from a fit on the 3.6B and 18.4B rows only.
Every calibrated number is out-of-sample: a row is predicted by parameters fitted without it.
The independent fits run in parallel processes (joblib). Rerun after any simulator change: the
numbers are recomputed from the data, nothing is cached.

Run: python bench/bench_accuracy.py [--folds 5] [--jobs 2]   (several minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from simulator.job.catalog import resolve_hardware  # noqa: E402
from vtrain_ml.accuracy.calibration import cross_validate, holdout  # noqa: E402
from vtrain_ml.accuracy.plots import measured_vs_predicted  # noqa: E402
from vtrain_ml.accuracy.predict import Score, predict, predict_ms, score  # noqa: E402
from vtrain_ml.accuracy.runs import Runs, read_runs  # noqa: E402
from vtrain_ml.accuracy.validation import validate  # noqa: E402

MEASURED = ROOT / "data" / "measured"
A100 = {"single": MEASURED / "a100_single_node.csv", "multi": MEASURED / "a100_multi_node.csv"}


def h100_files() -> list[Path]:
    return sorted(MEASURED.glob("h100/**/runs*.csv"))


def _runs(key: str) -> Runs:
    return read_runs(h100_files() if key == "h100" else [A100[key]])


def _base(key: str) -> str:
    return "h100-sxm-80gb" if key == "h100" else "a100-80gb"


def _task(key: str, kind: str, folds: int) -> tuple[str, str, np.ndarray]:
    """Predictions (ms) of the timed rows of `key`: uncalibrated, k-fold, or extrapolated."""
    timed = _runs(key).timed()
    jobs = [r.job for r in timed]
    measured = np.array([r.iteration_s * 1e3 for r in timed])  # type: ignore[operator]
    base = resolve_hardware(_base(key))
    if kind == "uncalibrated":
        return key, kind, predict_ms(jobs)
    if kind == "cv":
        return key, kind, cross_validate(jobs, measured, base, k=folds)
    small = np.array([j.model.hidden_size < 8192 for j in jobs])  # 3.6B and 18.4B, not the 39.1B
    return key, kind, holdout(jobs, measured, small, base)


def _row(target: str, data: str, model: str, s: Score, goal: float | None) -> str:
    met = "" if goal is None else ("met" if s.mape <= goal else "**not met**")
    goal_text = "" if goal is None else f"<= {goal:.0%}"
    return (f"| {target} | {data} | {s.n} | {model} | {_pct(s.mape)} | {_pct(s.median_ape)} | "
            f"{_pct(s.p90_ape)} | {goal_text} | {met} |")


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1%}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    start = time.perf_counter()
    tasks = [(k, kind) for k in ("h100", "single", "multi") for kind in ("uncalibrated", "cv")]
    tasks.append(("multi", "extrapolate"))
    results = Parallel(n_jobs=args.jobs)(delayed(_task)(k, kind, args.folds) for k, kind in tasks)
    out = {(k, kind): p for k, kind, p in results}
    cv_name = f"calibrated, {args.folds}-fold cross-validated"
    lines = ["| target | data | rows | model | MAPE | median APE | P90 APE | target | |",
             "|---|---|---|---|---|---|---|---|---|"]
    h100 = _runs("h100")
    names = ", ".join(str(p.relative_to(MEASURED)) for p in h100_files())
    measured = np.array([r.iteration_s * 1e3 for r in h100.timed()])  # type: ignore[operator]
    lines.append(_row("H100 time", names, "datasheet h100-sxm-80gb", score(out[("h100", "uncalibrated")],
                                                                            measured), None))
    lines.append(_row("H100 time", names, cv_name, score(out[("h100", "cv")], measured), 0.08))
    report = validate(h100, predict([r.job for r in h100.runs]))
    lines.append(_row("H100 peak memory", names, "allocated, simulator's memory model", report.memory, 0.06))
    if report.reserved.n:
        lines.append(_row("H100 peak memory", names, "reserved, simulator's memory model", report.reserved,
                          None))
    oom = report.oom
    lines += [_a100_row(k, kind, out, cv_name) for k in ("single", "multi")
              for kind in ("uncalibrated", "cv")]
    multi = _runs("multi").timed()
    big = np.array([r.job.model.hidden_size >= 8192 for r in multi])
    measured_multi = np.array([r.iteration_s * 1e3 for r in multi])  # type: ignore[operator]
    lines.append(_row("A100 extrapolation", "39.1B rows of the multi-node file", "fitted on 3.6B + 18.4B "
                      "rows only", score(out[("multi", "extrapolate")], measured_multi[big]), 0.15))
    print("\n".join(lines))
    measured_oom = oom.fits_oom + oom.oom_oom
    verdict = ("not tested: no measured OOM row yet; run bench/measure_runs.py on "
               "data/measured/h100/oom_candidates" if not measured_oom else
               "met" if oom.fits_oom == 0 else "**not met**")
    print(f"\nH100 out of memory (target: a run that ran out of memory is never predicted to fit): "
          f"{measured_oom} measured OOM, {oom.fits_oom} of them predicted to fit ({verdict}); "
          f"{oom.oom_ran} run(s) that ran were predicted not to fit")
    _plots(args.folds, out, h100, report)
    print(f"\n({time.perf_counter() - start:.0f} s wall, {args.jobs} processes)")


def _a100_row(key: str, kind: str, out: dict, cv_name: str) -> str:  # type: ignore[type-arg]
    timed = _runs(key).timed()
    measured = np.array([r.iteration_s * 1e3 for r in timed])  # type: ignore[operator]
    goals = {("single", "uncalibrated"): 0.15, ("multi", "uncalibrated"): 0.08, ("single", "cv"): 0.05,
             ("multi", "cv"): 0.07}
    data = "single node (2-8 A100)" if key == "single" else "multi node (up to 512 A100)"
    model = "datasheet a100-80gb" if kind == "uncalibrated" else cv_name
    return _row(f"A100 time, {key} node", data, model, score(out[(key, kind)], measured), goals[(key, kind)])


def _plots(folds: int, out: dict, h100: Runs, report) -> None:  # type: ignore[no-untyped-def, type-arg]
    for key in ("single", "multi"):
        runs = _runs(key)
        table = runs.table().assign(predicted_ms=out[(key, "cv")])
        s = score(table.predicted_ms.to_numpy(), table.measured_ms.to_numpy())
        fig = measured_vs_predicted(table, f"A100 {key} node: {folds}-fold CV, MAPE {s.mape:.1%}")
        fig.savefig(ROOT / "docs" / f"accuracy_{key}.png", dpi=110)
    table = report.table.copy()
    table.loc[table.measured_ms.notna(), "predicted_ms"] = out[("h100", "cv")]
    s = score(out[("h100", "cv")], table.measured_ms.dropna().to_numpy())
    fig = measured_vs_predicted(table, f"H100: {folds}-fold CV, time MAPE {s.mape:.1%}",
                                f"H100 peak allocated: MAPE {report.memory.mape:.1%}")
    fig.savefig(ROOT / "docs" / "accuracy_h100.png", dpi=110)


if __name__ == "__main__":
    main()
