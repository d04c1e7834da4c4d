"""Benchmark of `python -m vtrain_ml.schedule` (case study 2; issue 14).

    .venv/bin/python bench/bench_schedule.py [--skip-large] [--surrogate FOLDER] [--jobs 2]

1. The shipped generated trace (examples/cluster_trace.yaml, 120 jobs, 1,024 A100s): the elastic
   policy fed by the simulator oracle against the same policy fed by the linear-scaling oracle
   (deadline satisfaction ratio, average JCT, by how much), and EDF / FIFO with fixed requests.
2. A generated 1,000-job trace on 4,096 A100s with the surrogate oracle: wall time of the whole
   schedule (curves + SimPy simulation), cold (no cached curves) and warm (curves from disk), and
   the exact and the surrogate oracle side by side on the same few shapes (time ratio).
The surrogate is the one in --surrogate; if that folder does not exist, a small one is trained
there first with `python -m vtrain_ml.surrogate generate --n 20000` and `train` (said in the output).
Prints numbers; asserts nothing (wall times depend on the machine's load, printed too).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vtrain_ml.scheduler.cache import CurveCache
from vtrain_ml.scheduler.generate import GeneratorConfig, generate_rows
from vtrain_ml.scheduler.report import render_comparison
from vtrain_ml.scheduler.run import Scheduler, make_cluster, make_oracle
from vtrain_ml.scheduler.trace import load_trace, trace_from_rows

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "examples" / "cluster_trace.yaml"
HOUR = 3600.0


def load() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg())


def shipped(cache: CurveCache, jobs: int) -> None:
    trace = load_trace(TRACE)
    cluster = make_cluster(1024, "a100-80gb")
    exact = make_oracle("simulator", cluster, cache, jobs)
    linear = make_oracle("linear", cluster, cache, jobs)
    start = time.perf_counter()
    s = Scheduler(trace, cluster, exact, restart_s=300.0, slot_s=60.0)
    print(f"== Shipped trace: {len(trace.rows)} jobs on 1,024 A100-80GB, restart cost 300 s ==")
    info = s.oracle_info(exact)
    print(f"simulator oracle: {info['exact_simulations']:,} exact simulations for {info['shapes']} job "
          f"shapes in {time.perf_counter() - start:.1f} s ({load()})")
    runs = [s.run(p, o) for p in ("elastic", "edf", "fifo") for o in (exact, linear)]
    print(render_comparison(runs))
    sim, lin = runs[0], runs[1]
    assert sim.average_jct_s is not None and lin.average_jct_s is not None
    a, b = sim.deadline_satisfaction_ratio, lin.deadline_satisfaction_ratio
    print(f"elastic, simulator vs linear oracle: deadline satisfaction {a:.3f} vs {b:.3f} "
          f"({100 * (a - b):+.1f} points); average JCT {sim.average_jct_s / HOUR:.2f} h vs "
          f"{lin.average_jct_s / HOUR:.2f} h "
          f"({100 * (sim.average_jct_s / lin.average_jct_s - 1):+.1f}%)")
    for other in runs[2:]:
        if other.oracle == "simulator" and other.average_jct_s:
            gap = sim.deadline_satisfaction_ratio - other.deadline_satisfaction_ratio
            print(f"elastic/simulator vs {other.policy}/simulator: satisfaction {100 * gap:+.1f} points, "
                  f"average JCT {100 * (sim.average_jct_s / other.average_jct_s - 1):+.1f}%")


def ensure_surrogate(folder: Path) -> str:
    if (folder / "metadata.json").is_file():
        return f"reused the surrogate in {folder}"
    samples = folder.parent / f"{folder.name}-samples"
    py = sys.executable
    start = time.perf_counter()
    subprocess.run([py, "-m", "vtrain_ml.surrogate", "generate", "--n", "20000", "--seed", "0", "--out",
                    str(samples), "--no-progress", "--resume"], check=True, cwd=ROOT)
    subprocess.run([py, "-m", "vtrain_ml.surrogate", "train", "--samples", str(samples), "--out",
                    str(folder)], check=True, cwd=ROOT)
    return f"trained a surrogate on 20,000 samples into {folder} in {time.perf_counter() - start:.0f} s"


def large(surrogate: Path, jobs: int) -> None:
    print("\n== 1,000 jobs on 4,096 A100-80GB, surrogate oracle ==")
    print(ensure_surrogate(surrogate))
    trace = trace_from_rows(generate_rows(GeneratorConfig(jobs=1000, seed=1, gpus=4096)), "generated, seed 1")
    cluster = make_cluster(4096, "a100-80gb")
    with tempfile.TemporaryDirectory() as tmp:
        for label in ("cold (no cached curves)", "warm (curves cached on disk)"):
            oracle = make_oracle("surrogate", cluster, CurveCache(tmp), surrogate=surrogate)
            start = time.perf_counter()
            s = Scheduler(trace, cluster, oracle, restart_s=300.0, slot_s=60.0)
            curves = time.perf_counter() - start
            result = s.run("elastic", oracle)
            total = time.perf_counter() - start
            info = s.oracle_info(oracle)
            print(f"{label}: {total:.1f} s in all (target < 60 s): curves {curves:.1f} s "
                  f"({info['shapes']} shapes, {info['exact_simulations']:,} exact verifications), "
                  f"SimPy schedule {total - curves:.1f} s with {result.decisions:,} decisions; "
                  f"satisfaction {result.deadline_satisfaction_ratio:.3f}, average JCT "
                  f"{(result.average_jct_s or 0) / HOUR:.2f} h ({load()})")
    shapes = list({d.shape.key: d.shape for d in s.drafts}.values())[:3]
    timings = {}
    for name in ("simulator", "surrogate"):
        oracle = make_oracle(name, cluster, CurveCache(None), jobs if name == "simulator" else 1, surrogate)
        start = time.perf_counter()
        curves_of = oracle.curves(shapes)
        timings[name] = time.perf_counter() - start
        sims = sum(int(c.info.get("exact_simulations", 0)) for c in curves_of.values())
        print(f"{name} oracle on {len(shapes)} shapes up to 4,096 GPUs: {timings[name]:.1f} s, "
              f"{sims:,} exact simulations")
    print(f"surrogate oracle {timings['simulator'] / timings['surrogate']:.1f}x faster than the exact one "
          f"on the same shapes ({load()})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--skip-large", action="store_true")
    p.add_argument("--skip-shipped", action="store_true")
    p.add_argument("--surrogate", default=str(ROOT / "runs" / "schedule_bench" / "surrogate"))
    p.add_argument("--cache", default=str(ROOT / "runs" / "schedule_cache"), help="curve cache of part 1")
    p.add_argument("--jobs", type=int, default=2, help="processes for the exact oracle")
    args = p.parse_args()
    if not args.skip_shipped:
        shipped(CurveCache(args.cache), args.jobs)
    if not args.skip_large:
        large(Path(args.surrogate), args.jobs)


if __name__ == "__main__":
    main()
