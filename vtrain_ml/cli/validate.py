"""python -m vtrain_ml.validate MEASURED.csv [...] [--hardware H] [--json] [--out F] [--plot F]"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from simulator.fileio import write_text_atomic
from vtrain_ml.accuracy.measurements import read_measurements
from vtrain_ml.accuracy.plots import measured_vs_predicted
from vtrain_ml.accuracy.predict import by_group, jobs_for, predict_ms, score, with_predictions
from vtrain_ml.cli.common import add_common, run


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vtrain_ml.validate",
                                description="Simulate measured training runs and report the error.")
    p.add_argument("csv", nargs="+", help="measurement CSV(s) in vTrain's layout")
    p.add_argument("--hardware", default="a100-80gb",
                   help="GPU type or hardware file, e.g. one written by calibrate (default a100-80gb)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--out", metavar="CSV", help="write every row with its prediction")
    p.add_argument("--plot", metavar="PNG", help="draw predicted against measured")
    add_common(p)
    return p


def _main(args: argparse.Namespace) -> int:
    data = read_measurements(args.csv)
    if data.skipped:
        sys.stderr.write(f"skipped {data.skipped} impossible row(s) (tp*dp*pp != # GPUs)\n")
    predicted = predict_ms(jobs_for(data.rows, args.hardware))
    table = with_predictions(data.rows, predicted)
    summary = score(predicted, data.rows.measured_ms.to_numpy())
    groups = by_group(table)
    worst = table.nlargest(10, "ape")
    if args.out:
        write_text_atomic(args.out, table.to_csv(index=False))
    if args.plot:  # written beside the target, then renamed: never a half-written image
        fig = measured_vs_predicted(table, f"{args.hardware}: MAPE {summary.mape:.1%}")
        fig.savefig(args.plot + ".tmp.png", dpi=130)
        os.replace(args.plot + ".tmp.png", args.plot)
    if args.json:
        out = {**summary.to_dict(), "skipped": data.skipped, "hardware": args.hardware,
               "groups": groups.to_dict(orient="records"),
               "worst": worst[["source", "row", "tp", "dp", "pp", "measured_ms", "predicted_ms",
                               "ape"]].to_dict(orient="records")}
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
        return 0
    sys.stdout.write(_report(summary.to_dict(), groups, worst, data.skipped) + "\n")
    return 0


def _report(summary: dict, groups, worst, skipped: int) -> str:  # type: ignore[no-untyped-def]
    lines = [f"n={summary['n']}  MAPE {summary['mape']:.2%}  median {summary['median_ape']:.2%}  "
             f"P90 {summary['p90_ape']:.2%}  max {summary['max_ape']:.2%}  "
             f"predicted low on {summary['frac_low']:.0%} of rows"
             + (f"  ({skipped} impossible rows skipped)" if skipped else ""),
             "", "error per (tp, dp, pp):", "   tp   dp   pp    n     MAPE   mean signed"]
    for g in groups.itertuples():
        lines.append(f"  {g.tp:3d}  {g.dp:3d}  {g.pp:3d}  {g.n:3d}  {g.mape:7.2%}  {g.mean_signed:+8.2%}")
    lines += ["", "10 worst rows:",
              "  file                      row  tp  dp  pp   measured ms  predicted ms    APE"]
    for w in worst.itertuples():
        lines.append(f"  {w.source:<24}{w.row:5d} {w.tp:3d} {w.dp:3d} {w.pp:3d} {w.measured_ms:12.1f}"
                     f" {w.predicted_ms:13.1f} {w.ape:7.2%}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), argv)
