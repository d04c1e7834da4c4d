"""Per-simulation wall time of the exact simulator, in-process (not a test: prints, never asserts).

    .venv/bin/python bench/bench_simulator.py [--repeats N] [--calculon PATH] [--headline-only]

Cold = nothing memoized (`simulate.clear_caches()` before each call: the schedule's round plan, the
operator blocks and their costs are built). New layout = the blocks of the model and their costs
are memoized but nothing of the layout (`simulate.clear_layout_caches()`: round plan, the job's
static parts, stage costs, p2p delays, tail), as in a search that changes pp / dp / micro-batches
of one model. Warm = everything memoized, as in a loop that simulates a job again (the scheduler
at each GPU count it tries, a calibration with new efficiencies). Job files are parsed once,
outside the timing.

The engine's compiled loop (numba, simulator.timeline.engine_kernel) is loaded before timing, as a long
loop over jobs would; the headline is then measured again in a subprocess with VTRAIN_NO_JIT=1
(numpy engine, everything else the same) and printed beside it (`--skip-no-jit` to skip).

`--calculon PATH` times Calculon's in-process evaluation (`Llm.compile` + `Llm.run`, WARNING-level
logger) of the same MT-NLG 530B job in the same run: PATH is a checkout of
github.com/calculon-ai/calculon (e.g. `git --git-dir=/work/.mirror/calculon-ai+calculon/repo archive
HEAD | tar x -C /tmp/calculon`); its `models/turing-530B.json`, `systems/a100_80g.json` and an
execution with tp 8, pp 35, dp 12, micro-batch 1, global batch 1920, full recompute, 1F1B.
Targets (issue 16): MT-NLG 530B on 3,360 GPUs <= 2 ms warm and no slower than Calculon in the same
run; the 2-GPU job <= 0.3 ms (issue 2's: cost linear in stages x micro-batches, independent of
the number of layers). References from issue 2: vTrain 6.2 s (21 s at pp = 105).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from simulator import Job, job_from_dict, load_job, simulate
from simulator.timeline.engine import round_plan

try:
    from simulator.simulate import clear_caches
except ImportError:  # a simulator from before the memo tables (to time it with this script)
    clear_caches = round_plan.cache_clear
try:
    from simulator.simulate import clear_layout_caches
except ImportError:  # before the per-job memo tables: a new layout needs a new round plan
    clear_layout_caches = round_plan.cache_clear
try:
    from simulator.timeline.engine_kernel import RUNS
except ImportError:  # before the compiled engine loop
    RUNS = None

ROOT = Path(__file__).resolve().parents[1]
VTRAIN_S = 6.2  # vTrain on the MT-NLG example (issue 2)
VTRAIN_PP105_S = 21.0
MTNLG_TARGET_S = 2e-3
SMALL_TARGET_S = 0.3e-3
MTNLG = "MT-NLG 530B, 3360 GPUs (8,12,35), m=160"
SMALL = "GPT 1.7B, 2 GPUs (1,1,2), m=16"


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
        clear_caches()
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
    rows = {MTNLG: mtnlg, "MT-NLG 530B, 3360 GPUs (8,4,105), m=480": pp105, SMALL: two_gpu}
    import simulator
    print(f"Simulator from {Path(simulator.__file__).parent}")
    print(f"Pipeline engine: {engine_path()}")
    print(f"Per-simulation wall time, best of {repeats} (median in brackets; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f})")
    print(f"  {'job':<42}{'cold':>24}{'new layout':>24}{'warm':>24}")
    out = {}
    for name, job in rows.items():
        cold = _times(partial(_cleared, clear_caches, job), repeats)
        layout = _times(partial(_cleared, clear_layout_caches, job), repeats)
        simulate(job)
        warm = _times(partial(simulate, job), repeats)
        out[name], out[name + " cold"], out[name + " layout"] = min(warm), min(cold), min(layout)
        out[name + " median"] = statistics.median(warm)
        print(f"  {name:<42}{ms(min(cold))} [{ms(statistics.median(cold))}]"
              f"{ms(min(layout))} [{ms(statistics.median(layout))}]"
              f"{ms(min(warm))} [{ms(statistics.median(warm))}]")
    return out


def engine_path() -> str:
    """Load the compiled engine loop now (as a long loop over jobs would) and say which path the
    timings below use."""
    if RUNS is None:
        return "numpy rounds (a simulator without the compiled loop)"
    t0 = time.perf_counter()
    if RUNS.load_now():
        import numba  # type: ignore[import-untyped]
        return (f"compiled loop, numba {numba.__version__} (loaded in "
                f"{time.perf_counter() - t0:.2f} s, once per process)")
    return "numpy (numba not installed, or VTRAIN_NO_JIT=1)"


def without_jit(repeats: int) -> dict[str, float] | None:
    """The headline measured in a subprocess with VTRAIN_NO_JIT=1 (None if it failed)."""
    env = {**os.environ, "VTRAIN_NO_JIT": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--repeats", str(repeats), "--child-json"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"  (the VTRAIN_NO_JIT=1 subprocess failed: {done.stderr.strip().splitlines()[-1:]})")
        return None
    numbers: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return numbers


def beside(head: dict[str, float], numpy_head: dict[str, float]) -> None:
    print("\nThe same headline with VTRAIN_NO_JIT=1 (numpy engine; a subprocess right after the "
          "run above), best of the repeats")
    print(f"  {'job':<42}{'column':>12}{'compiled':>13}{'numpy':>13}{'numpy/compiled':>16}")
    for name in (MTNLG, "MT-NLG 530B, 3360 GPUs (8,4,105), m=480", SMALL):
        for column, suffix in (("cold", " cold"), ("new layout", " layout"), ("warm", "")):
            a, b = head[name + suffix], numpy_head[name + suffix]
            print(f"  {name:<42}{column:>12}{ms(a):>13}{ms(b):>13}{b / a:>15.2f}x")


def _cleared(clear: Callable[[], None], job: Job) -> None:
    clear()
    simulate(job)


def calculon_evaluation(path: Path) -> Callable[[], float]:
    """Calculon's in-process evaluation of the MT-NLG job (returns its iteration time, s).
    Calculon's package imports psutil only to count CPUs for its exhaustive search (not used
    here); a stand-in module is installed when psutil is absent."""
    sys.path.insert(0, str(path))
    try:
        import psutil  # noqa: F401
    except ImportError:
        sys.modules["psutil"] = types.ModuleType("psutil")
    from calculon.llm import Llm  # type: ignore[import-not-found]
    from calculon.system import System  # type: ignore[import-not-found]

    def read(rel: str) -> dict[str, Any]:
        return json.loads((path / rel).read_text())

    app = Llm.Application(read("models/turing-530B.json"))
    system = System(read("systems/a100_80g.json"))
    execution = read("examples/3072_t4_p64_d12_mbs4_full.json")  # its defaults, then our layout
    execution.update(num_procs=3360, tensor_par=8, pipeline_par=35, data_par=12, batch_size=1920,
                     microbatch_size=1, pipeline_interleaving=1, activation_recompute="full",
                     optimizer_sharding=False)
    exe = Llm.Execution.from_json(execution)
    log = logging.getLogger("calculon")
    log.setLevel(logging.WARNING)

    def once() -> float:
        model = Llm(app, log)
        model.compile(system, exe)
        model.run(system)
        return float(model.get_total_time())
    return once


def side_by_side(head: dict[str, float], calculon: Path | None, repeats: int,
                 numpy_head: dict[str, float] | None = None) -> None:
    mtnlg, small = head[MTNLG], head[SMALL]
    print("\nIssue 16 targets (ratios: < 1 is met)")
    print(f"  MT-NLG warm {ms(mtnlg)}: {mtnlg / MTNLG_TARGET_S:.2f}x the 2 ms target")
    print(f"  2-GPU job warm {ms(small)}: {small / SMALL_TARGET_S:.2f}x the 0.3 ms target")
    if numpy_head is not None:
        a, b = numpy_head[MTNLG], numpy_head[SMALL]
        print(f"  with VTRAIN_NO_JIT=1: MT-NLG warm {ms(a)}: {a / MTNLG_TARGET_S:.2f}x; "
              f"2-GPU job warm {ms(b)}: {b / SMALL_TARGET_S:.2f}x")
    if calculon is None:
        print("  Calculon: not timed (pass --calculon PATH)")
        return
    evaluate = calculon_evaluation(calculon)
    iteration = evaluate()
    job = load_job(ROOT / "examples" / "mtnlg_530b.yaml")
    ours_s = simulate(job).iteration_time_s
    times, ours = [], []
    for _ in range(repeats):  # alternated, so that both see the same machine load
        times += _times(evaluate, 1)
        ours += _times(lambda: simulate(job), 1)
    print(f"  Calculon (same job, same run): best {ms(min(times))} "
          f"[median {ms(statistics.median(times))}], iteration {iteration:.2f} s")
    print(f"  ours, alternated with it: best {ms(min(ours))} [median {ms(statistics.median(ours))}], "
          f"iteration {ours_s:.2f} s")
    print(f"  ours / Calculon: {min(ours) / min(times):.2f} best, "
          f"{statistics.median(ours) / statistics.median(times):.2f} median")


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
    mtnlg = head[MTNLG]
    mtnlg_cold = head[MTNLG + " cold"]
    pp105 = head["MT-NLG 530B, 3360 GPUs (8,4,105), m=480"]
    print("\nSummary")
    print(f"  vs vTrain (6.2 s): {VTRAIN_S / mtnlg:,.0f}x faster warm, {VTRAIN_S / mtnlg_cold:,.0f}x cold; "
          f"at pp=105 (21 s): {VTRAIN_PP105_S / pp105:,.0f}x faster warm")
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
    parser.add_argument("--calculon", type=Path, default=None,
                        help="a checkout of github.com/calculon-ai/calculon to time beside ours")
    parser.add_argument("--headline-only", action="store_true",
                        help="only the headline jobs and the issue-16 targets (no grids)")
    parser.add_argument("--skip-no-jit", action="store_true",
                        help="do not measure the headline again with VTRAIN_NO_JIT=1")
    parser.add_argument("--child-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_json:  # the VTRAIN_NO_JIT=1 subprocess: the headline's numbers as one JSON line
        with contextlib.redirect_stdout(io.StringIO()):
            head = headline(args.repeats)
        print(json.dumps(head))
        return
    head = headline(args.repeats)
    numpy_head = None if args.skip_no_jit else without_jit(args.repeats)
    if numpy_head is not None:
        beside(head, numpy_head)
    side_by_side(head, args.calculon, args.repeats, numpy_head)
    if args.headline_only:
        return
    cells = grid(args.repeats)
    by_layers = layers(args.repeats)
    summary(head, cells, by_layers)


if __name__ == "__main__":
    main()
