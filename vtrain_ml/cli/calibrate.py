"""python -m vtrain_ml.calibrate MEASURED.csv [...] --hardware a100-80gb --out my-a100.yaml"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from simulator.catalog import resolve_hardware
from simulator.errors import ConfigError
from simulator.fileio import write_text_atomic
from vtrain_ml.accuracy.calibration import PARAMS, cross_validate, fit, with_params
from vtrain_ml.accuracy.measurements import read_measurements
from vtrain_ml.accuracy.predict import jobs_for, score
from vtrain_ml.cli.common import add_common, run


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vtrain_ml.calibrate",
                                description="Fit the hardware model's physical parameters to measured "
                                            "iterations and write a hardware file.")
    p.add_argument("csv", nargs="+", help="measurement CSV(s) in vTrain's layout")
    p.add_argument("--hardware", required=True, help="GPU type or hardware file to start from")
    p.add_argument("--out", required=True, help="hardware YAML to write")
    p.add_argument("--folds", type=int, default=5, help="k of the k-fold cross-validation (0: skip)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=-1, help="processes for the folds (-1: all cores)")
    add_common(p)
    return p


def _main(args: argparse.Namespace) -> int:
    if args.folds == 1 or args.folds < 0:
        raise ConfigError(f"--folds={args.folds}: use 0 (no cross-validation) or k >= 2")
    base = resolve_hardware(args.hardware)
    data = read_measurements(args.csv)
    if data.skipped:
        sys.stderr.write(f"skipped {data.skipped} impossible row(s) (tp*dp*pp != # GPUs)\n")
    if args.folds and len(data.rows) < args.folds:
        raise ConfigError(f"--folds={args.folds} needs at least that many rows (got {len(data.rows)})")
    jobs = jobs_for(data.rows, args.hardware)
    measured = data.rows.measured_ms.to_numpy()
    sys.stderr.write(f"fitting {len(PARAMS)} parameters to {len(jobs)} rows...\n")
    fitted = fit(jobs, measured, base)
    cv = None
    if args.folds:
        sys.stderr.write(f"{args.folds}-fold cross-validation...\n")
        cv = score(cross_validate(jobs, measured, base, args.folds, args.seed, n_jobs=args.jobs),
                   measured)
    calibrated = with_params(base, fitted.params)
    record = {
        "base": base.name, "fitted_on": [Path(c).name for c in args.csv],
        "data_hash": data.content_hash, "rows": len(jobs), "skipped_rows": data.skipped,
        "train_mape": fitted.train_mape, "folds": args.folds, "seed": args.seed,
        "cv": cv.to_dict() if cv else None, "date": dt.date.today().isoformat(),
    }
    name = Path(args.out).stem
    spec = calibrated.model_copy(update={"name": name, "calibration": record})
    header = (f"# Calibrated from {base.name} on {', '.join(record['fitted_on'])} "
              f"(data hash {data.content_hash}) by `python -m vtrain_ml.calibrate`.\n")
    body = yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
    write_text_atomic(args.out, header + body)
    lines = [f"{'parameter':<24}{'start':>12}{'fitted':>12}"]
    for p in PARAMS:
        lines.append(f"{p.name:<24}{getattr(base.efficiency, p.name):12.4g}{fitted.params[p.name]:12.4g}")
    lines.append(f"\ntrain MAPE {fitted.train_mape:.2%} on {len(jobs)} rows")
    if cv:
        lines.append(f"{args.folds}-fold cross-validated MAPE {cv.mape:.2%} (median {cv.median_ape:.2%}, "
                     f"P90 {cv.p90_ape:.2%})")
    lines.append(f"wrote {args.out}; use it with --hardware {args.out}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), argv)
