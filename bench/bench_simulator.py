"""Per-simulation wall time of the exact simulator, in-process (not a test: prints, never asserts).

    .venv/bin/python bench/bench_simulator.py [--repeats N]

Cold = the first simulation of a (schedule, stages, micro-batches, chunks) shape: the schedule's
round plan is built (`round_plan.cache_clear()` before each call). Warm = the plan is cached, as in
a search loop over jobs that share a pipeline shape. Job files are parsed once, outside the timing.
Targets (issue 2): MT-NLG 530B on 3,360 GPUs under 5 ms (20 ms at most), small jobs under 1 ms,
cost linear in stages x micro-batches and independent of the number of layers. References measured
on this machine by the issue's author: vTrain 6.2 s (21 s at pp = 105), Calculon about 11 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator import Job, job_from_dict, load_job, simulate
from simulator.engine import round_plan

ROOT = Path(__file__).resolve().parents[1]
VTRAIN_S = 6.2  # vTrain on the MT-NLG example (issue 2)
VTRAIN_PP105_S = 21.0
CALCULON_S = 0.011


def wall_s(fn: Callable[[], Any], repeats: int) -> float:
    """Best wall time of `fn` over `repeats` calls (as timeit: the least disturbed run; the
    median is printed for the headline jobs, it moves with the machine's load)."""
    return min(_times(fn, repeats))


def _times(fn: Callable[[], Any], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def cold_s(job: Job, repeats: int) -> float:
    def once() -> None:
        round_plan.cache_clear()
        simulate(job)
    return wall_s(once, repeats)


def warm_s(job: Job, repeats: int) -> float:
    simulate(job)  # build and cache the plan
    return wall_s(lambda: simulate(job), repeats)


def gpt_job(layers: int, pp: int, m: int, hidden: int = 2048, tp: int = 1) -> Job:
    """A GPT job on pp * tp GPUs (dp = 1) with m micro-batches of 1."""
    return job_from_dict({
        "model": {"name": f"gpt-{layers}l", "num_layers": layers, "hidden_size": hidden,
                  "num_attention_heads": 16, "vocab_size": 50257, "seq_length": 2048},
        "training": {"global_batch_size": m, "micro_batch_size": 1, "precision": "fp16"},
        "parallel": {"tp": tp, "pp": pp, "dp": 1},
        "cluster": {"gpu": "a100-80gb", "num_gpus": pp * tp},
    })


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.3f} ms"


def headline(repeats: int) -> dict[str, float]:
    mtnlg = load_job(ROOT / "examples" / "mtnlg_530b.yaml")
    pp105 = mtnlg.model_copy(update={"parallel": mtnlg.parallel.model_copy(update={"pp": 105, "dp": 4})})
    two_gpu = job_from_dict({
        "model": "megatron-gpt-1.7b",
        "training": {"global_batch_size": 32, "micro_batch_size": 2, "precision": "fp16"},
        "parallel": {"tp": 1, "pp": 2, "dp": 1},
        "cluster": {"gpu": "a100-80gb", "num_gpus": 2},
    })
    rows = {
        "MT-NLG 530B, 3360 GPUs (8,12,35), m=160": mtnlg,
        "MT-NLG 530B, 3360 GPUs (8,4,105), m=480": pp105,
        "GPT 1.7B, 2 GPUs (1,1,2), m=16": two_gpu,
    }
    print(f"Per-simulation wall time, best of {repeats} (median in brackets; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f})")
    print(f"  {'job':<42}{'cold':>24}{'warm':>24}")
    out = {}
    for name, job in rows.items():
        cold = _times(lambda job=job: (round_plan.cache_clear(), simulate(job)), repeats)
        simulate(job)
        warm = _times(lambda job=job: simulate(job), repeats)
        out[name], out[name + " cold"] = min(warm), min(cold)
        print(f"  {name:<42}{ms(min(cold))} [{ms(statistics.median(cold))}]"
              f"{ms(min(warm))} [{ms(statistics.median(warm))}]")
    return out


def grid(repeats: int) -> dict[tuple[int, int], float]:
    stages, mbs = (1, 4, 16, 64), (8, 32, 128, 512)
    print("\nWarm time vs stages (p) x micro-batches (m), 128 layers; in brackets: us per (p*m)")
    print("  " + f"{'p / m':>6}" + "".join(f"{m:>22}" for m in mbs))
    out = {}
    for p in stages:
        cells = []
        for m in mbs:
            t = warm_s(gpt_job(128, p, m), max(3, repeats // 2))
            out[(p, m)] = t
            cells.append(f"{ms(t)} [{t / (p * m) * 1e6:6.2f}]")
        print("  " + f"{p:>6}" + "".join(f"{c:>22}" for c in cells))
    print("\nCold time (plan built) vs stages x micro-batches")
    print("  " + f"{'p / m':>6}" + "".join(f"{m:>22}" for m in mbs))
    for p in stages:
        cells = []
        for m in mbs:
            t = cold_s(gpt_job(128, p, m), 3)
            cells.append(f"{ms(t)} [{t / (p * m) * 1e6:6.2f}]")
        print("  " + f"{p:>6}" + "".join(f"{c:>22}" for c in cells))
    return out


def layers(repeats: int) -> dict[int, float]:
    print("\nWarm time vs layers (p = 8, m = 64): identical layers are costed once")
    out = {}
    for n in (8, 64, 512, 4096):
        out[n] = warm_s(gpt_job(n, 8, 64), repeats)
        print(f"  {n:>6} layers {ms(out[n])}")
    return out


def summary(head: dict[str, float], cells: dict[tuple[int, int], float], by_layers: dict[int, float]) -> None:
    mtnlg = head["MT-NLG 530B, 3360 GPUs (8,12,35), m=160"]
    mtnlg_cold = head["MT-NLG 530B, 3360 GPUs (8,12,35), m=160 cold"]
    pp105 = head["MT-NLG 530B, 3360 GPUs (8,4,105), m=480"]
    small = head["GPT 1.7B, 2 GPUs (1,1,2), m=16"]
    print("\nSummary")
    print(f"  MT-NLG warm {ms(mtnlg)}: {mtnlg / 5e-3:.2f}x the 5 ms target, "
          f"{mtnlg / 20e-3:.2f}x the 20 ms limit")
    print(f"  MT-NLG cold {ms(mtnlg_cold)}: {mtnlg_cold / 20e-3:.2f}x the 20 ms limit")
    print(f"  vs vTrain (6.2 s): {VTRAIN_S / mtnlg:,.0f}x faster warm, {VTRAIN_S / mtnlg_cold:,.0f}x cold; "
          f"at pp=105 (21 s): {VTRAIN_PP105_S / pp105:,.0f}x faster warm")
    print(f"  vs Calculon (11 ms, no schedule simulation): {CALCULON_S / mtnlg:.1f}x faster warm")
    print(f"  2-GPU job warm {ms(small)}: {small / 1e-3:.2f}x the 1 ms target")
    work = sorted(cells, key=lambda k: k[0] * k[1])
    lo, hi = work[0], work[-1]
    growth = cells[hi] / cells[lo]
    print(f"  stages x micro-batches {lo[0] * lo[1]} -> {hi[0] * hi[1]} "
          f"({hi[0] * hi[1] // (lo[0] * lo[1])}x work): time x{growth:.1f}")
    big = max(k for k in cells if k[0] * k[1] >= 4096)
    print(f"  per (stage x micro-batch) at p*m >= 4096, e.g. {big}: "
          f"{cells[big] / (big[0] * big[1]) * 1e6:.2f} us")
    n = sorted(by_layers)
    print(f"  layers {n[0]} -> {n[-1]} ({n[-1] // n[0]}x): time x{by_layers[n[-1]] / by_layers[n[0]]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per measurement")
    args = parser.parse_args()
    head = headline(args.repeats)
    cells = grid(args.repeats)
    by_layers = layers(args.repeats)
    summary(head, cells, by_layers)


if __name__ == "__main__":
    main()
