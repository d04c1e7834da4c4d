"""Peak memory against measured runs: predicted vs `torch.cuda.max_memory_allocated`, per row.

    python bench/bench_memory.py [RUNS.csv ...]     (default: data/measured/h100/runs.csv)

A runs file has `job` (a job file relative to the runs file) and `peak_memory_GiB` (allocated
peak); optional `reserved_GiB` (max_memory_reserved) and `oom` (true: the run ran out of memory,
so it must not be predicted to fit). Prints each row, the MAPE of the allocated peak (and of the
reserved peak where measured), and every out-of-memory row with the prediction. Nothing is
fitted to these rows: the memory model's only measured constants come from probe jobs
(simulator.memory.stages).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from simulator import load_job, simulate  # noqa: E402
from simulator.job.specs import GiB  # noqa: E402

DEFAULT = ROOT / "data" / "measured" / "h100" / "runs.csv"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "oom")


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path, default=[DEFAULT])
    args = ap.parse_args(argv)
    errors: list[float] = []
    reserved_errors: list[float] = []
    oom_lines: list[str] = []
    print(f"{'job':48s} {'predicted':>9s} {'measured':>9s} {'error':>7s}  moment    reserved "
          f"pred/meas  fits")
    for path in args.runs:
        for row in rows(path):
            result = simulate(load_job(path.parent / row["job"]))
            memory = max((s.memory for s in result.stages), key=lambda m: m.allocated_bytes)
            pred = result.peak_allocated_bytes / GiB
            name = Path(row["job"]).stem
            fits = "fits" if result.fits_in_memory else "OOM"
            if _truthy(row.get("oom")):
                verdict = "predicted to fit (WRONG)" if result.fits_in_memory else "predicted OOM"
                oom_lines.append(f"  {name}: measured OOM, predicted {pred:.2f} GiB allocated, "
                                 f"{result.peak_memory_bytes / GiB:.2f} GiB on the device: {verdict}")
                continue
            if not row.get("peak_memory_GiB"):
                continue
            meas = float(row["peak_memory_GiB"])
            err = pred / meas - 1
            errors.append(abs(err))
            res = ""
            if row.get("reserved_GiB"):
                r_meas = float(row["reserved_GiB"])
                r_pred = memory.allocator_reserved_bytes / GiB
                reserved_errors.append(abs(r_pred / r_meas - 1))
                res = f"{r_pred:.2f}/{r_meas:.2f}"
            print(f"{name:48s} {pred:9.2f} {meas:9.2f} {100 * err:+6.1f}%  {memory.moment:9s} "
                  f"{res:>15s}  {fits}")
    if errors:
        print(f"\nallocated peak: {len(errors)} rows, MAPE {100 * sum(errors) / len(errors):.2f}%, "
              f"max {100 * max(errors):.2f}%")
    if reserved_errors:
        print(f"reserved peak: {len(reserved_errors)} rows, MAPE "
              f"{100 * sum(reserved_errors) / len(reserved_errors):.2f}%")
    if oom_lines:
        print("\nout-of-memory runs:\n" + "\n".join(oom_lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
