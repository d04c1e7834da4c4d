"""Per-kernel duration variation in real H100 traces: the default `Efficiency.kernel_time_cv`.

    python bench/measure_kernel_jitter.py [TRACE.json.gz ...]   (default: ../shared/data/traces/h100)

Groups each trace's GPU kernels by (kernel name, grid, the launching operator's input shapes),
so that every group is one kernel on one shape repeated over layers and micro-batches, and prints
the coefficient of variation of their durations (standard deviation / mean; and a robust one,
1.4826 x median absolute deviation / median), weighted by each group's share of GPU time, for
groups of >= 8 launches of >= 20 us. The straggler model (simulator.timeline.stragglers) uses
the mean over the traces of the time-weighted CV. One GPU's traces: this is the transient
variation of a kernel, not the spread between GPUs (`gpu_speed_cv`, from Sinha et al. SC'22).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "data" / "traces" / "h100"


def kernel_groups(path: Path) -> dict[tuple[str, str, str], list[float]]:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    shapes = {e["args"]["External id"]: str(e["args"]["Input Dims"]) for e in events
              if e.get("ph") == "X" and e.get("cat") == "cpu_op"
              and "External id" in e.get("args", {}) and "Input Dims" in e.get("args", {})}
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            shape = shapes.get(e.get("args", {}).get("External id"))
            if shape is not None:
                groups[(e["name"], str(e["args"].get("grid")), shape)].append(float(e["dur"]))
    return groups


def weighted_cv(groups: dict[tuple[str, str, str], list[float]]) -> tuple[float, float, int]:
    """(time-weighted CV, time-weighted robust CV, groups used)."""
    total = cv = robust = 0.0
    used = 0
    for durations in groups.values():
        d = np.array(durations)
        if len(d) < 8 or d.mean() < 20:
            continue
        med = float(np.median(d))
        weight = float(d.sum())
        total += weight
        cv += weight * float(d.std() / d.mean())
        robust += weight * 1.4826 * float(np.median(np.abs(d - med))) / med
        used += 1
    return (cv / total, robust / total, used) if total else (float("nan"), float("nan"), 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    args = ap.parse_args(argv)
    paths = args.traces or sorted(TRACES.glob("*.json.gz"))
    if not paths:
        print(f"no traces (looked in {TRACES})")
        return 0
    values = []
    for path in paths:
        cv, robust, used = weighted_cv(kernel_groups(path))
        if used:
            values.append(cv)
        print(f"{path.name:58s} groups {used:3d}  time-weighted CV {cv:6.2%}  robust {robust:6.2%}")
    print(f"mean over {len(values)} traces: {np.mean(values):.2%} (min {np.min(values):.2%}, "
          f"max {np.max(values):.2%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
