"""python -m vtrain_ml.calibrate RUNS [...] --hardware h100-sxm-80gb --out my-h100.yaml [--folds 5]"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml

from simulator.errors import ConfigError
from simulator.fileio import write_text_atomic
from simulator.job.catalog import resolve_hardware
from simulator.job.loaders import load_job
from simulator.job.specs import HardwareSpec
from vtrain_ml.accuracy.calibration import (
    PARAMS,
    BoundNote,
    Fit,
    affected_masks,
    bound_notes,
    calibrate_with_folds,
    evaluation_cap,
    job_groups,
    with_params,
)
from vtrain_ml.accuracy.plausibility import implausible_times, refuse_implausible
from vtrain_ml.accuracy.plots import before_after, check_plot_path, save_figure
from vtrain_ml.accuracy.predict import Score, predict_ms, score
from vtrain_ml.accuracy.rank_times import JitterFit, effective_kernels, fit_jitter, read_rank_times
from vtrain_ml.accuracy.runs import Runs, read_runs
from vtrain_ml.cli.common import add_common, run
from vtrain_ml.cli.validate import report_problems
from vtrain_ml.outputs import check_file_output


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vtrain_ml.calibrate",
                                description="Fit the hardware model's physical parameters to measured "
                                            "iterations and write a hardware file.")
    p.add_argument("runs", nargs="*", metavar="RUNS",
                   help="runs file(s) (CSV/YAML: job, iteration_ms, ...) or vTrain's measurement CSV")
    p.add_argument("--hardware", required=True, help="GPU type or hardware file to start from")
    p.add_argument("--out", required=True, help="hardware YAML to write")
    p.add_argument("--folds", type=int, default=5, help="k of the k-fold cross-validation (0: skip)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=-1, help="processes for the folds (-1: all cores)")
    p.add_argument("--freeze", default="", metavar="NAMES",
                   help="comma-separated parameters to keep at their starting value, e.g. p2p_efficiency")
    p.add_argument("--plot", metavar="PNG", help="draw predicted against measured before and after")
    p.add_argument("--holdout", nargs="+", default=[], metavar="RUNS",
                   help="other runs files, never fitted: their error before and after calibration shows "
                        "what the fit does to runs unlike the fitted ones")
    p.add_argument("--rank-times", metavar="CSV",
                   help="per-rank step times (rank, step, compute_ms): fit the straggler model's "
                        "gpu_speed_cv (and kernel_time_cv with --rank-times-job) before the times")
    p.add_argument("--rank-times-job", metavar="JOB",
                   help="the job the rank times come from (counts the kernels of its step)")
    add_common(p)
    return p


def _freeze(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    known = [p.name for p in PARAMS]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"--freeze {','.join(unknown)}: unknown parameter; known: {', '.join(known)}")
    return names


def _main(args: argparse.Namespace) -> int:
    if args.folds == 1 or args.folds < 0:
        raise ConfigError(f"--folds={args.folds}: use 0 (no cross-validation) or k >= 2")
    freeze = _freeze(args.freeze)
    check_file_output("--out", args.out, example="my-gpu.yaml")
    if args.plot:
        check_plot_path(args.plot)
    base = resolve_hardware(args.hardware)
    jitter = _rank_times(args) if args.rank_times else None
    if jitter is not None:
        base = base.model_copy(update={"efficiency": base.efficiency.model_copy(update={
            k: v for k, v in (("gpu_speed_cv", jitter.gpu_speed_cv),
                              ("kernel_time_cv", jitter.kernel_time_cv)) if v is not None})})
        if not args.runs:
            return _write_jitter_only(args, base, jitter)
    if not args.runs:
        raise ConfigError("give RUNS (measured iterations) and/or --rank-times CSV to calibrate from")
    runs = read_runs(args.runs, args.hardware)
    report_problems(runs)
    others = read_runs(args.holdout, args.hardware) if args.holdout else None
    if others is not None:
        report_problems(others)
    timed = runs.require_rows().timed()
    if not timed:
        raise ConfigError(f"no row of {', '.join(args.runs)} has a measured time (OOM rows have none); "
                          "calibration fits times")
    distinct = len(set(job_groups([r.job for r in timed]).tolist()))
    if args.folds and distinct < args.folds:
        same = "; rows of one job count once: they stay in one fold" if distinct < len(timed) else ""
        raise ConfigError(f"--folds={args.folds} needs at least that many timed rows (got {distinct}{same})")
    _warn_other_gpus(runs, base)
    jobs = [r.job for r in timed]
    measured = np.array([r.iteration_s * 1e3 for r in timed])  # type: ignore[operator]
    before = predict_ms(jobs, base)
    refuse_implausible(implausible_times(timed, (before / 1e3).tolist()), len(timed))
    sys.stderr.write(f"start ({base.name}): MAPE {score(before, measured).mape:.2%} on {len(jobs)} timed rows"
                     + (f" ({len(runs.runs) - len(jobs)} rows without a time are not used)"
                        if len(runs.runs) > len(jobs) else "") + "\n")
    fitted, out_of_fold = _fit_and_cross_validate(args, jobs, measured, base, freeze)
    cv = score(out_of_fold, measured) if out_of_fold is not None else None
    notes = bound_notes(jobs, measured, base, fitted)
    for note in notes:
        sys.stderr.write(f"warning: {note.sentence()}\n")
    holdout_line = _holdout(others, base, fitted) if others is not None else None
    _write(args, runs, base, fitted, cv, score(before, measured), notes, jitter)
    if args.plot:
        after = out_of_fold if out_of_fold is not None else predict_ms(jobs, with_params(base, fitted.params))
        after_label = (f"calibrated, {args.folds}-fold CV: MAPE {cv.mape:.1%}" if cv else
                       f"calibrated, in-sample (no CV): MAPE {fitted.train_mape:.1%}")
        table = runs.table()[[r.iteration_s is not None for r in runs.runs]].reset_index(drop=True)
        fig = before_after(table.assign(predicted_ms=before), table.assign(predicted_ms=after),
                           f"{base.name}: MAPE {score(before, measured).mape:.1%}", after_label)
        save_figure(fig, args.plot)
    sys.stdout.write(_render(args, base, fitted, cv, score(before, measured))
                     + (f"\n{holdout_line}" if holdout_line else "") + "\n")
    return 0


def _holdout(others: Runs, base: HardwareSpec, fitted: Fit) -> str:
    """The never-fitted runs' error before and after: a fit that helps its rows may hurt others."""
    timed = others.timed()
    if not timed:
        return "--holdout: no timed rows to score"
    jobs = [r.job for r in timed]
    measured = np.array([r.iteration_s * 1e3 for r in timed])  # type: ignore[operator]
    before = score(predict_ms(jobs, base), measured).mape
    after = score(predict_ms(jobs, with_params(base, fitted.params)), measured).mape
    verdict = "worse" if after > before else "better"
    line = (f"holdout ({', '.join(Path(s).name for s in others.sources)}, {len(jobs)} rows never fitted): "
            f"MAPE {before:.2%} -> {after:.2%} ({verdict})")
    if after > before:
        sys.stderr.write(f"warning: the calibrated file predicts the holdout runs worse than {base.name} "
                         f"did ({before:.1%} -> {after:.1%}): fit on runs like them too\n")
    return line


def _warn_other_gpus(runs: Runs, base: HardwareSpec) -> None:
    measured_on = {r.measured_gpu for r in runs.runs} - {"", base.name}
    if base.calibration:
        measured_on -= {str(base.calibration.get("base", ""))}
    if measured_on:
        sys.stderr.write(f"warning: the job files name {', '.join(sorted(measured_on))} but are fitted as "
                         f"{base.name}; pass the GPU they ran on with --hardware\n")


def _fit_and_cross_validate(args: argparse.Namespace, jobs: list, measured: np.ndarray, base: HardwareSpec,
                            freeze: tuple[str, ...]) -> tuple[Fit, np.ndarray | None]:
    """The fit on every row and the k folds, as k + 1 parallel fits, each capped in simulations
    (calibration.evaluation_cap): the ETA is a bound from that cap and the measured time of one
    simulation of the rows, not an average of folds that may differ tenfold."""
    fitted_params = tuple(p for p in PARAMS if p.name not in freeze)
    began = time.monotonic()
    masks = affected_masks(jobs, base, fitted_params)
    per_evaluation = (time.monotonic() - began) / max(1, 1 + 2 * len(fitted_params))
    free = sum(bool(m.any()) for m in masks.values())
    cap, fits, workers = evaluation_cap(free), 1 + args.folds, _workers(args.jobs)
    total = _bound(fits, workers, cap, per_evaluation)
    sys.stderr.write(f"fitting {free} parameters to {len(jobs)} rows"
                     + (f" and {args.folds} folds" if args.folds else "")
                     + f": {fits} fits in {workers} process(es), each at most {cap} simulations of its rows "
                     f"(~{per_evaluation:.2f} s each here): at most ~{total}\n")
    predicted, fitted = np.empty(len(jobs)), None
    start = time.monotonic()
    tasks = calibrate_with_folds(jobs, measured, base, args.folds, args.seed, n_jobs=args.jobs, freeze=freeze,
                                 masks=masks)
    for done, (test, value) in enumerate(tasks, start=1):
        left = _left(fits - done, workers, cap, per_evaluation, (time.monotonic() - start) / done)
        if isinstance(value, Fit):
            fitted = value
            stop = f"stopped at its cap of {cap}" if value.capped else "converged"
            what = (f"fit on all {len(jobs)} rows done: {value.evaluations} simulations ({stop}), train MAPE "
                    f"{value.train_mape:.2%}")
        else:
            assert test is not None
            predicted[test] = value
            what = (f"fold {done - (fitted is not None)}/{args.folds} done: MAPE "
                    f"{score(value, measured[test]).mape:.2%} on its {len(test)} held-out rows")
        sys.stderr.write(f"  {what}, {time.monotonic() - start:.0f} s; {left}\n")
    assert fitted is not None
    return fitted, (predicted if args.folds else None)


def _workers(n_jobs: int) -> int:
    cores = os.cpu_count() or 1
    return max(1, cores + 1 + n_jobs if n_jobs < 0 else n_jobs)


def _left(fits: int, workers: int, cap: int, per_evaluation_s: float, per_fit_s: float) -> str:
    """What is left: the pace so far (fits done in parallel), and the bound from the cap."""
    if not fits:
        return "done"
    typical = math.ceil(fits / workers) * per_fit_s * workers
    return f"about {typical:.0f} s left (at most ~{_bound(fits, workers, cap, per_evaluation_s)})"


def _bound(fits: int, workers: int, cap: int, per_evaluation_s: float) -> str:
    """Time for `fits` capped fits on `workers` processes (rounds of fits times a fit's cap)."""
    return f"{math.ceil(fits / workers) * cap * per_evaluation_s:.0f} s" if fits else "0 s"


def _rank_times(args: argparse.Namespace) -> JitterFit:
    kernels = effective_kernels(load_job(args.rank_times_job)) if args.rank_times_job else None
    fitted = fit_jitter(read_rank_times(args.rank_times), kernels)
    kernel = ("kept (no --rank-times-job)" if fitted.kernel_time_cv is None
              else f"{fitted.kernel_time_cv:.4f}")
    sys.stderr.write(f"rank times: {fitted.ranks} ranks x {fitted.steps} steps: gpu_speed_cv "
                     f"{fitted.gpu_speed_cv:.4f}, step-to-step {fitted.step_cv:.4f}, kernel_time_cv "
                     f"{kernel}\n")
    return fitted


def _write_jitter_only(args: argparse.Namespace, base: HardwareSpec, jitter: JitterFit) -> int:
    record = {"base": base.name, "rank_times": Path(args.rank_times).name, **jitter.to_dict(),
              "date": dt.date.today().isoformat()}
    spec = base.model_copy(update={"name": Path(args.out).stem, "calibration": record})
    header = f"# Straggler variation of {base.name} from {record['rank_times']} (vtrain_ml.calibrate).\n"
    write_text_atomic(args.out, header + yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
    sys.stdout.write(f"wrote {args.out}; use it with --hardware {args.out}\n")
    return 0


def _write(args: argparse.Namespace, runs: Runs, base: HardwareSpec, fitted: Fit, cv: Score | None,
           before: Score, notes: list[BoundNote], jitter: JitterFit | None = None) -> None:
    timed = runs.timed()
    record = {
        "base": base.name, "fitted_on": [Path(c).name for c in args.runs],
        "data_hash": runs.data_hash, "file_hash": runs.file_hash, "rows": len(timed),
        "skipped_rows": runs.skipped, "train_mape": fitted.train_mape, "start_mape": before.mape,
        "folds": args.folds, "seed": args.seed, "cv": cv.to_dict() if cv else None,
        "frozen": list(fitted.frozen), "not_determined": list(fitted.unused),
        "at_bound": dict(fitted.at_bound), "date": dt.date.today().isoformat(),
        # which rows this file has seen: validate calls their errors in-sample
        "row_fingerprints": sorted(r.fingerprint for r in timed),
        "rank_times": jitter.to_dict() if jitter is not None else None,
    }
    spec = with_params(base, fitted.params).model_copy(update={"name": Path(args.out).stem,
                                                               "calibration": record})
    header = (f"# Calibrated from {base.name} on {', '.join(record['fitted_on'])} "
              f"(data hash {runs.data_hash}) by `python -m vtrain_ml.calibrate`.\n")
    if notes:
        header += "".join(f"# warning: {n.name} ended at its {n.side} bound\n" for n in notes)
    write_text_atomic(args.out, header + yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))


def _render(args: argparse.Namespace, base: HardwareSpec, fitted: Fit, cv: Score | None,
            before: Score) -> str:
    lines = [f"{'parameter':<24}{'start':>12}{'fitted':>12}  note"]
    for p in PARAMS:
        note = ("frozen" if p.name in fitted.frozen else
                "no row depends on it: kept" if p.name in fitted.unused else
                f"at its {fitted.at_bound[p.name]} bound" if p.name in fitted.at_bound else "")
        start, value = getattr(base.efficiency, p.name), fitted.params[p.name]
        lines.append(f"{p.name:<24}{start:12.4g}{value:12.4g}  {note}")
    lines.append(f"\nstart MAPE {before.mape:.2%} ({base.name}), train MAPE {fitted.train_mape:.2%} "
                 f"on {before.n} rows (in-sample)")
    if cv:
        lines.append(f"{args.folds}-fold cross-validated MAPE {cv.mape:.2%} (median {cv.median_ape:.2%}, "
                     f"P90 {cv.p90_ape:.2%}): the error to expect on new runs like these")
    lines.append(f"wrote {args.out}; use it with --hardware {args.out}")
    if args.plot:
        lines.append(f"plot: {args.plot}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), argv)
