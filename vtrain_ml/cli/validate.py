"""python -m vtrain_ml.validate RUNS [...] [--hardware H] [--profile DIR] [--json] [--out F] [--plot F]"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from simulator.fileio import write_text_atomic
from vtrain_ml.accuracy.plausibility import implausible_memory, implausible_times, refuse_implausible
from vtrain_ml.accuracy.plots import check_plot_path, measured_vs_predicted, save_figure
from vtrain_ml.accuracy.predict import ProfileModels, Score, predict
from vtrain_ml.accuracy.runs import Runs, read_runs
from vtrain_ml.accuracy.validation import Validation, validate
from vtrain_ml.cli.common import add_common, run
from vtrain_ml.outputs import check_file_output


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vtrain_ml.validate",
        description="Simulate measured training runs and report the time and memory errors and which "
                    "runs that ran out of memory were predicted to fit.")
    p.add_argument("runs", nargs="+", metavar="RUNS",
                   help="runs file(s): CSV or YAML with job, iteration_ms (or iteration_s), "
                        "peak_memory_GiB, reserved_GiB, oom, tag; or vTrain's measurement CSV")
    p.add_argument("--hardware", metavar="NAME_OR_FILE",
                   help="simulate every run on this GPU type or hardware file (e.g. one written by "
                        "calibrate); default: each job's own GPU (a100-80gb for vTrain's CSV)")
    p.add_argument("--profile", metavar="DIR", help="cost kernels from a measured profile directory")
    p.add_argument("--json", action="store_true", help="print the summary and every row as JSON")
    p.add_argument("--out", metavar="CSV", help="write every row with its predictions")
    p.add_argument("--plot", metavar="PNG", help="draw predicted against measured (time and memory)")
    add_common(p)
    return p


def _main(args: argparse.Namespace) -> int:
    check_file_output("--out", args.out, example="validation.csv")
    if args.plot:
        check_plot_path(args.plot)
    runs = read_runs(args.runs, args.hardware)
    report_problems(runs)
    runs.require_rows()
    profile = ProfileModels(Path(args.profile)) if args.profile else None
    predictions = predict([r.job for r in runs.runs], profile=profile)
    refuse_implausible(implausible_times(runs.runs, [p.iteration_s for p in predictions])
                       or implausible_memory(runs.runs, [p.peak_allocated_bytes for p in predictions]),
                       len(runs.runs))
    result = validate(runs, predictions)
    warn_in_sample(result, runs)
    hardware = ", ".join(sorted({r.job.hardware.name for r in runs.runs}))
    if args.out:
        write_text_atomic(args.out, result.table.to_csv(index=False))
    if args.plot:
        memory = f"peak memory: MAPE {result.memory.mape:.1%}" if result.memory.n else None
        fig = measured_vs_predicted(result.table, f"{hardware}: time MAPE {result.time.mape:.1%}", memory)
        save_figure(fig, args.plot)
    if args.json:
        out = {"hardware": hardware, "skipped": runs.skipped, "problems": list(runs.problems),
               **result.to_dict()}
        sys.stdout.write(json.dumps(out, indent=1, default=_jsonable) + "\n")
        return 0
    sys.stdout.write(render(result, runs, hardware) + "\n")
    return 0


def report_problems(runs: Runs) -> None:
    """Each skipped row on its own line, then the count (never silently)."""
    for problem in runs.problems:
        sys.stderr.write(f"warning: {problem}\n")
    if runs.problems:
        sys.stderr.write(f"skipped {runs.skipped} row(s) of {runs.skipped + len(runs.runs)}\n")


def warn_in_sample(result: Validation, runs: Runs) -> None:
    seen = result.in_sample
    if not seen.count:
        return
    files = ", ".join(seen.files)
    if seen.count == len(runs.runs):
        sys.stderr.write(f"warning: {files} was calibrated on these same {seen.count} rows: the errors "
                         "below are in-sample (how well the fit reproduces its own data), not a "
                         f"prediction of new runs; {_cv_sentence(runs)}\n")
    else:
        sys.stderr.write(f"warning: {seen.count} of {len(runs.runs)} rows were used to calibrate {files}: "
                         "their errors are in-sample; the summary also scores the other rows alone\n")


def _cv_sentence(runs: Runs) -> str:
    cvs = {(r.job.hardware.calibration or {}).get("folds"): (r.job.hardware.calibration or {}).get("cv")
           for r in runs.runs}
    known = [(k, cv) for k, cv in cvs.items() if cv]
    if len(known) == 1:
        k, cv = known[0]
        return f"its {k}-fold cross-validated MAPE at calibration was {cv['mape']:.1%}"
    return "calibrate's k-fold cross-validation estimates that"


def _jsonable(value: object) -> object:
    if hasattr(value, "item"):
        return value.item()  # type: ignore[attr-defined]
    return str(value)


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2%}"


def _summary(label: str, s: Score) -> str:
    return (f"{label}: n={s.n}  MAPE {_pct(s.mape)}  median {_pct(s.median_ape)}  P90 {_pct(s.p90_ape)}  "
            f"max {_pct(s.max_ape)}  predicted low on "
            + ("-" if math.isnan(s.frac_low) else f"{s.frac_low:.0%}") + " of rows")


def _name(r: pd.Series) -> str:
    return Path(r.job).stem if r.job else f"{r.source}:{r.row}"


def render(result: Validation, runs: Runs, hardware: str) -> str:
    t = result.table
    lines = [f"{len(runs.runs)} runs from {', '.join(Path(s).name for s in runs.sources)} on {hardware}"
             + (f" ({runs.skipped} rows skipped)" if runs.skipped else ""), ""]
    if result.time.n:
        lines.append(_summary("time", result.time))
        if result.unseen_time:
            lines.append(_summary("time, rows not used for calibration", result.unseen_time))
        lines += _groups(result.groups) + _worst(t[t.ape.notna()], "ape", "ms", "measured_ms", "predicted_ms")
    if result.memory.n:
        lines += ["", _summary("peak memory (allocated)", result.memory)]
        if result.reserved.n:
            lines.append(_summary("peak memory (reserved)", result.reserved))
        lines += _worst(t[t.memory_ape.notna()], "memory_ape", "GiB", "measured_GiB", "predicted_GiB")
    return "\n".join([*lines, "", *_oom(result)])


def _groups(groups: pd.DataFrame) -> list[str]:
    tagged = "tag" in groups
    width = max([3, *(len(str(t)) for t in groups.tag)]) + 1 if tagged else 0
    lines = ["", "error per " + ("tag and " if tagged else "") + "(tp, dp, pp):",
             "  " + ("tag".ljust(width) if tagged else "") + " tp   dp   pp    n     MAPE   mean signed"]
    for g in groups.itertuples():
        tag = str(g.tag).ljust(width) if tagged else ""
        lines.append(f"  {tag}{g.tp:3d}  {g.dp:3d}  {g.pp:3d}  {g.n:3d}  {g.mape:7.2%}  "
                     f"{g.mean_signed:+8.2%}")
    return lines


def _worst(rows: pd.DataFrame, error: str, unit: str, measured: str, predicted: str) -> list[str]:
    worst = rows.nlargest(10, error)
    title = "time" if unit == "ms" else "memory"
    lines = ["", f"{min(10, len(rows))} worst rows ({title}):",
             f"  {'run':<44} tp  dp  pp  {'measured ' + unit:>13} {'predicted ' + unit:>14}    APE"]
    for _, w in worst.iterrows():
        lines.append(f"  {_name(w)[:44]:<44}{w.tp:3d} {w.dp:3d} {w.pp:3d} {w[measured]:13.1f} "
                     f"{w[predicted]:14.1f} {w[error]:7.2%}")
    return lines


def _oom(result: Validation) -> list[str]:
    o, t = result.oom, result.table
    ran, oom = o.fits_ran + o.oom_ran, o.fits_oom + o.oom_oom
    lines = [f"out of memory ({ran} runs ran, {oom} ran out of memory):",
             "                    measured ran   measured OOM",
             f"  predicted fits    {o.fits_ran:12d}   {o.fits_oom:12d}",
             f"  predicted OOM     {o.oom_ran:12d}   {o.oom_oom:12d}",
             "  (predicted to fit: what the caching allocator must reserve for the allocated peak, plus "
             "the context, is within the GPU's memory)"]
    for label, pick in (("ran out of memory but predicted to fit", t.oom & t.predicted_fits),
                        ("predicted not to fit but ran", ~t.oom & ~t.predicted_fits)):
        for _, r in t[pick].iterrows():
            lines.append(f"  {label}: {_name(r)} (predicted {r.predicted_GiB:.1f} GiB allocated, "
                         f"{r.predicted_required_GiB:.1f} GiB to reserve with the context; decided by "
                         f"the {r.fit_decided_by} bytes)")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), argv)
