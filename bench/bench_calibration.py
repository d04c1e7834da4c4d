"""Wall time of the 195-row A100 calibration with 5-fold cross-validation, as a user runs it.

    PYTHONPATH=. .venv/bin/python bench/bench_calibration.py [--jobs 2] [--folds 5]

Runs `python -m vtrain_ml.calibrate data/measured/a100_single_node.csv
data/measured/a100_multi_node.csv --hardware a100-80gb --folds 5 --jobs 2 --out TMP` in a fresh
process (imports, reading the rows, the fits and the folds, writing the file: everything a user
waits for), prints its progress lines (the ETA bounds among them) and its result as they came,
then the wall time and the machine's load. Target (issue 26): under 2 minutes on 2 cores.
Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("data/measured/a100_single_node.csv", "data/measured/a100_multi_node.csv")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--folds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "a100-calibrated.yaml"
        command = [sys.executable, "-m", "vtrain_ml.calibrate", *RUNS, "--hardware", "a100-80gb",
                   "--folds", str(args.folds), "--jobs", str(args.jobs), "--out", str(out)]
        print("$ " + " ".join(["python", *command[1:-1], "OUT.yaml"]), flush=True)
        before = os.getloadavg()
        began = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True)
        wall = time.perf_counter() - began
        after = os.getloadavg()
    print(done.stderr.rstrip())
    print(done.stdout.rstrip())
    print(f"\nexit code {done.returncode}; wall time {wall:.1f} s on {os.cpu_count()} cores "
          f"(--jobs {args.jobs}); load average before {before[0]:.1f}, after {after[0]:.1f}")


if __name__ == "__main__":
    main()
