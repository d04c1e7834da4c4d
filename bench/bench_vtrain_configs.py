"""Every vTrain config file of a directory, loaded and simulated in one process (not a test:
prints, never asserts).

    .venv/bin/python bench/bench_vtrain_configs.py PATH_TO_VTRAIN_CONFIG_DIR

vTrain's repository (github.com/VIA-Research/vTrain, folder `config/`, 1,844 JSON files) is the
intended input: `git clone https://github.com/VIA-Research/vTrain` and give `vTrain/config`. Each
file is loaded with vTrain's semantics (`simulator.job.vtrain_config`) and, when it loads, simulated;
the counts are: loaded (and simulated), rejected where vTrain's own `validate_config` rejects it
too, and failed (any other error: a file vTrain accepts that vtrain-ml does not, or a crash).
Each outcome is also checked against the line-by-line transcription of vTrain's validate_config
in tests/compat_tests (same accept/reject, same derived tp, dp, pp, num_gpus and micro-batch).
Issue 13's target: seconds for the 1,844 files, not minutes (the speed work aims at < 10 s).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not an installed copy

from simulator.errors import VTrainError
from simulator.job.loaders import read_job
from simulator.job.vtrain_config import VTrainRejects
from simulator.simulate import simulate
from tests.compat_tests.test_vtrain_configs import vtrain_validate_config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config_dir", type=Path, help="vTrain's config/ directory (or any folder of them)")
    args = parser.parse_args()
    files = sorted(args.config_dir.rglob("*.json"))
    if not files:
        print(f"no .json files under {args.config_dir}", file=sys.stderr)
        return 2
    counts: collections.Counter[str] = collections.Counter()
    failures: collections.Counter[str] = collections.Counter()
    by_folder: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    load_s = sim_s = 0.0
    outcomes: dict[Path, tuple[int, ...] | None] = {}
    start = time.perf_counter()
    for path in files:
        folder = path.parent.relative_to(args.config_dir).as_posix()
        t0 = time.perf_counter()
        try:
            job = read_job(path).job
        except VTrainRejects:
            outcome = "rejected as vTrain does"
            outcomes[path] = None
        except VTrainError as exc:
            outcome = "failed"
            failures[str(exc).removeprefix(f"{path}: ")[:120]] += 1
        else:
            t1 = time.perf_counter()
            load_s += t1 - t0
            simulate(job)
            sim_s += time.perf_counter() - t1
            outcome = "loaded and simulated"
            outcomes[path] = (job.parallel.tp, job.dp, job.parallel.pp, job.cluster.num_gpus,
                              job.training.micro_batch_size)
        counts[outcome] += 1
        by_folder[folder][outcome] += 1
    total = time.perf_counter() - start
    agree = sum(outcomes.get(path, "failed") == _vtrain_outcome(path) for path in files)
    print(f"{len(files)} vTrain config files under {args.config_dir}")
    for outcome in ("loaded and simulated", "rejected as vTrain does", "failed"):
        print(f"  {outcome:<24}{counts[outcome]:>6}")
    print("by folder:")
    for folder, c in sorted(by_folder.items()):
        print(f"  {folder:<24}" + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    for message, n in failures.most_common(10):
        print(f"  failed x{n}: {message}")
    print(f"agrees with vTrain's validate_config (accept/reject and derived tp, dp, pp, num_gpus, "
          f"micro-batch): {agree} of {len(files)} files")
    print(f"total {total:.2f} s in one process ({total / len(files) * 1e3:.2f} ms per file): loading the "
          f"files that load {load_s:.2f} s, simulating them {sim_s:.2f} s")
    return 0


def _vtrain_outcome(path: Path) -> tuple[int, ...] | None:
    """What vTrain's own validate_config makes of the file (transcribed; None: it asserts)."""
    try:
        c = vtrain_validate_config(json.loads(path.read_text()))
    except (AssertionError, TypeError, ZeroDivisionError):
        return None
    return (c["tensor_parallel_size"], c["data_parallel_size"], c["pipeline_parallel_size"],
            c["num_gpus"], c["micro_batch_size"])


if __name__ == "__main__":
    raise SystemExit(main())
