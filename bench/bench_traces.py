"""Traced profiles of the real training stack against real H100 runs (issue 10's targets).

On ../shared/data/traces/h100 (17 torch.profiler traces of one training iteration each, and the
unprofiled measurements in measured.csv), prints:

1. self-reproduction: each traced job simulated from its own trace, with the trace's own
   (profiler-inflated) host times, against that trace's iteration (`profiled_iteration_ms`);
   target: every job within 3%;
2. leave-one-out within a model family: each job predicted from the traces of the *other* jobs
   of the same model (same prefix, hidden size and layers: other micro-batch, recompute, gradient
   accumulation, attention kernel, sequence), with real host times (the profiler's inflation taken
   out), against the unprofiled `iteration_ms_median`; target: MAPE <= 8%, worst <= 15%. For
   context, the same rows from the datasheet alone, and from the other traces of the same stack
   (any model of the prefix);
3. peak memory: what `simulate` gives (the simulator's memory model) against the measured peak;
4. a deeper model from a shallow trace: `trace --device cpu` of a 2-layer reference model,
   predicting 8 and 24 layers measured without the profiler on this CPU; the machine is shared,
   so each round times the 2-layer shard and the deep models interleaved and reports the error
   raw, corrected for the machine's drift since tracing, and as growth in CPU seconds from 2
   layers (see `deep_cpu`); target: 5%.

With --profiles TAG=DIR ... (and --runs), instead predicts the runs file's rows from freshly
traced profiles (`trace` on the GPU, bench/gpu_trace_session.sh): no trace of the predicted job
itself, only 2-layer shards of its shapes; --measure-here also times each whole job on this
device.

Run: python bench/bench_traces.py [--skip-cpu] [--json OUT.json]
     python bench/bench_traces.py --only-cpu [--stack reference|megatron-core] [--rounds 5]
     python bench/bench_traces.py --profiles mgpt=P1 llama=P2 gpt2=P2 [--measure-here]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from profiler.trace.importer import ImportedTrace, TraceSource, analyze, write_imported  # noqa: E402
from simulator.costs.profile_format import read_profile  # noqa: E402
from simulator.costs.traced import TracedOptions, traced_costs  # noqa: E402
from simulator.job.loaders import load_job  # noqa: E402
from simulator.job.specs import GiB, Job  # noqa: E402
from simulator.simulate import simulate, simulate_traced  # noqa: E402

TRACES = ROOT.parent / "shared" / "data" / "traces" / "h100"
JOBS = ROOT / "data" / "measured" / "h100" / "jobs"


def family(name: str) -> str:
    """Same model: stack prefix, hidden size, layers (mgpt_h2048_l24)."""
    return "_".join(name.split("_")[:3])


def stack_of(name: str) -> str:
    return name.split("_")[0]


def import_all(names: list[str], measured: pd.DataFrame) -> dict[str, ImportedTrace]:
    """Each trace as `import-trace --iteration-ms` takes it: with its job's unprofiled iteration
    time when measured.csv has one (a leave-one-out prediction never sees its own job's trace,
    hence never its measurement)."""
    out = {}
    for name in names:
        job = load_job(JOBS / f"{name}.yaml")
        known = name in measured.index
        unprofiled = float(measured.loc[name, "iteration_ms_median"]) / 1e3 if known else None
        out[name] = analyze(TraceSource(TRACES / f"{name}.json.gz", job, stack_of(name),
                                        measured_iteration_s=unprofiled))
    return out


def profile_of(items: list[ImportedTrace], tmp: Path) -> Path:
    folder = Path(tempfile.mkdtemp(dir=tmp))
    write_imported(folder, items, None)
    return folder


def _err(pred: float, ref: float) -> float:
    return pred / ref - 1.0


def self_reproduction(imported: dict[str, ImportedTrace], measured: pd.DataFrame, tmp: Path
                      ) -> list[dict[str, Any]]:
    rows = []
    for name, item in imported.items():
        if name not in measured.index:
            continue
        folder = profile_of([item], tmp)
        res = simulate_traced(item.source.job, folder, TracedOptions(profiled_host=True))
        ref = float(measured.loc[name, "profiled_iteration_ms"])
        rows.append({"job": name, "predicted_ms": res.iteration_time_s * 1e3, "profiled_ms": ref,
                     "error": _err(res.iteration_time_s * 1e3, ref)})
        shutil.rmtree(folder)
    return rows


def leave_one_out(imported: dict[str, ImportedTrace], measured: pd.DataFrame, tmp: Path,
                  group: Any) -> list[dict[str, Any]]:
    rows = []
    for name in imported:
        if name not in measured.index:
            continue
        others = [imported[o] for o in imported if o != name and group(o) == group(name)]
        if not others:
            continue
        folder = profile_of(others, tmp)
        job = load_job(JOBS / f"{name}.yaml")
        costs = traced_costs(str(folder), job)
        res = simulate_traced(job, str(folder))
        ref = float(measured.loc[name, "iteration_ms_median"])
        rows.append({"job": name, "predicted_ms": res.iteration_time_s * 1e3, "measured_ms": ref,
                     "error": _err(res.iteration_time_s * 1e3, ref), "from": len(others),
                     "sources": costs.sources(), "peak_GiB": _allocated(res) / GiB})
        shutil.rmtree(folder)
    return rows


def _table(title: str, rows: list[dict[str, Any]], ref_key: str, target: str) -> None:
    print(f"\n{title}")
    print(f"  {'job':45s} {'predicted':>10s} {ref_key:>13s} {'error':>8s}")
    for r in rows:
        extra = f"  (from {r['from']} traces)" if "from" in r else ""
        print(f"  {r['job']:45s} {r['predicted_ms']:10.1f} {r[ref_key]:13.1f} {r['error']:+8.1%}"
              f"{extra}")
    errs = np.abs([r["error"] for r in rows])
    if len(errs):
        print(f"  MAPE {errs.mean():.1%}, worst {errs.max():.1%}, within 3%: "
              f"{(errs <= 0.03).sum()}/{len(errs)}  (target: {target})")


def datasheet(measured: pd.DataFrame, names: list[str]) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        res = simulate(load_job(JOBS / f"{name}.yaml"))
        ref = float(measured.loc[name, "iteration_ms_median"])
        rows.append({"job": name, "predicted_ms": res.iteration_time_s * 1e3, "measured_ms": ref,
                     "error": _err(res.iteration_time_s * 1e3, ref),
                     "peak_GiB": _allocated(res) / GiB})
    return rows


def _allocated(res: Any) -> float:
    """The peak that torch.cuda.max_memory_allocated measures: the simulator's allocated peak
    where it reports one (the core engineer's memory model), else its peak memory."""
    return float(getattr(res, "peak_allocated_bytes", 0.0) or res.peak_memory_bytes)


def memory(rows: list[dict[str, Any]], measured: pd.DataFrame) -> None:
    print("\npeak memory: the simulator's memory model (simulate) vs measured peak allocated")
    errs = []
    for r in rows:
        ref = float(measured.loc[r["job"], "peak_allocated_GiB"])
        errs.append(abs(r["peak_GiB"] / ref - 1))
        print(f"  {r['job']:45s} {r['peak_GiB']:8.1f} GiB {ref:8.1f} GiB {r['peak_GiB'] / ref - 1:+8.1%}")
    print(f"  MAPE {np.mean(errs):.1%}, worst {np.max(errs):.1%}  (target: MAPE <= 8%; the memory "
          f"model is the core engineer's, printed as simulate() gives it)")


DEEP_JOBS = {"reference": ROOT / "tests" / "data" / "traces" / "tiny_trace_gpt.yaml",
             "huggingface": ROOT / "tests" / "data" / "traces" / "tiny_trace_gpt.yaml",
             "megatron-core": ROOT / "tests" / "profiler_tests" / "tiny_megatron_core.yaml"}


def deep_cpu(rounds: int, layers: tuple[int, ...], repeats: int = 7, stack: str = "reference"
             ) -> None:
    """Trace 2 layers on this CPU, predict deeper models, measure them without the profiler.

    On a shared machine the CPU's speed drifts by tens of percent within seconds (other jobs
    take the core), and a prediction anchored to the speed at tracing time then looks wrong by
    that drift. So each round traces the 2-layer shard (which measures it unprofiled: the median
    of `repeats` iterations, the trace's own time) and then times the 2-layer shard and every
    deeper model *interleaved, one iteration of each in turn* (median of `repeats` each, after 2
    warm-ups; each turn runs an untimed iteration first, so that no model is timed on caches the
    other models' iterations left cold): all of them see the same load. Three errors per deep
    model: raw (prediction vs wall time now); wall-corrected (the prediction times the drift,
    the 2-layer shard's wall time now / at tracing); and the growth in CPU time (predicted
    deep / 2-layer iteration vs the same ratio of process CPU seconds: one thread on a CPU
    device, so CPU seconds are the iteration's work without the time other processes took the
    core). The summary is the median over rounds with its range; the per-layer cost between
    the two deep models, predicted and measured (CPU seconds), shows whether a layer's cost
    carries from 2 to 24 layers."""
    from profiler.stacks.runner import TraceRequest, plan, prepare, run_traces, timed_cpu
    from simulator.job.validation import validate_job

    job = load_job(DEEP_JOBS[stack])
    print(f"\ndeeper model from a 2-layer CPU trace ({stack} stack, {job.model.name}, "
          f"{job.model.hidden_size} hidden, 1 thread; {rounds} rounds; each round traces 2 layers, "
          f"then times 2 layers and "
          f"the deep models interleaved, median of {repeats} iterations each)")
    kinds = ("raw", "wall-corrected", "CPU growth")
    errors: dict[tuple[str, int], list[float]] = {(k, n): [] for k in kinds for n in layers}
    per_layer: list[tuple[float, float]] = []
    for k in range(rounds):
        tmp = Path(tempfile.mkdtemp())
        req = TraceRequest((("tiny", job),), stack, "cpu", layers=2, micro_batches=2,
                           warmup=2, repeats=repeats, threads=1, seed=k)
        traced = next(iter(run_traces(req, tmp, None))).source.measured_iteration_s or math.nan
        runs, preds = {}, {}
        for n in (2, *layers):
            deep = TraceRequest((("tiny", job),), stack, "cpu", layers=n, micro_batches=2,
                                warmup=2, repeats=repeats, threads=1, seed=k)
            item = plan(deep)[0]
            runs[n] = prepare(item, deep)
            preds[n] = simulate_traced(validate_job(item.job), str(tmp)).iteration_time_s
        walls: dict[int, list[float]] = {n: [] for n in runs}
        cpus: dict[int, list[float]] = {n: [] for n in runs}
        for r in range(repeats):
            for n in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                wall, cpu = timed_cpu(runs[n], 2)  # the first after a switch warms the caches
                walls[n].append(wall[1])
                cpus[n].append(cpu[1])
        meas = {n: statistics.median(w) for n, w in walls.items()}
        cpu_s = {n: statistics.median(c) for n, c in cpus.items()}
        load = meas[2] / traced
        for n in layers:
            errors[("raw", n)].append(_err(preds[n], meas[n]))
            errors[("wall-corrected", n)].append(_err(preds[n] * load, meas[n]))
            errors[("CPU growth", n)].append(_err(preds[n] / preds[2], cpu_s[n] / cpu_s[2]))
        lo, hi = min(layers), max(layers)
        scale = cpu_s[2] / preds[2]  # the prediction in this round's CPU seconds
        per_layer.append(((preds[hi] - preds[lo]) * scale / (hi - lo),
                          (cpu_s[hi] - cpu_s[lo]) / (hi - lo)))
        print(f"  round {k + 1}: 2 layers {traced * 1e3:6.1f} ms traced, {meas[2] * 1e3:6.1f} ms now "
              f"({cpu_s[2] * 1e3:5.1f} ms CPU); " + "; ".join(
                  f"{n} layers {preds[n] * 1e3:6.1f} ms predicted, {meas[n] * 1e3:6.1f} ms "
                  f"({cpu_s[n] * 1e3:6.1f} CPU): " + ", ".join(
                      f"{errors[(e, n)][-1]:+.1%}" for e in kinds) for n in layers), flush=True)
        shutil.rmtree(tmp)
    print(f"  (errors per round: {', '.join(kinds)})")
    for n in layers:
        parts = []
        for e in kinds:
            v = sorted(errors[(e, n)])
            parts.append(f"{e} {statistics.median(v):+.1%} ({v[0]:+.1%} to {v[-1]:+.1%})")
        print(f"  {n} layers, median over {rounds} rounds: " + "; ".join(parts)
              + " (target: within 5%)")
    pred_l, meas_l = (statistics.median(x) for x in zip(*per_layer, strict=True))
    print(f"  one more layer (2 micro-batches, CPU seconds): {pred_l * 1e3:.2f} ms predicted, "
          f"{meas_l * 1e3:.2f} ms measured between {min(layers)} and {max(layers)} layers "
          f"({_err(pred_l, meas_l):+.1%})")


def fresh_profiles(profiles: dict[str, Path], runs: Path, measure_here: bool
                   ) -> list[dict[str, Any]]:
    """Predict the runs file's rows from traced profiles (the profile given for each row's tag),
    and with `measure_here` also time each job on this device with the stack that traced it."""
    frame = pd.read_csv(runs)
    loaded = {tag: read_profile(path) for tag, path in profiles.items() if path.is_dir()}
    rows = []
    for _, r in frame.iterrows():
        name, tag = Path(str(r["job"])).stem, str(r["tag"])
        if tag not in loaded:
            print(f"  {name}: no profile for tag {tag}", flush=True)
            continue
        if pd.isna(r["iteration_ms"]):  # an out-of-memory run: no time to predict
            continue
        job = load_job(runs.parent / str(r["job"]))
        try:
            costs = traced_costs(loaded[tag], job)
            res = simulate_traced(job, loaded[tag])
        except Exception as exc:  # report and go on: one row must not lose the others
            print(f"  {name}: {type(exc).__name__}: {exc}", flush=True)
            continue
        row = {"job": name, "profile": str(profiles[tag]), "predicted_ms": res.iteration_time_s * 1e3,
               "measured_ms": float(r["iteration_ms"]),
               "error": _err(res.iteration_time_s * 1e3, float(r["iteration_ms"])),
               "sources": costs.sources(), "coverage": res.profile_coverage}
        if measure_here:
            row["here_ms"] = _measure_here(job, str(loaded[tag].traces["stack"].iloc[0]))
            row["error_here"] = _err(row["predicted_ms"], row["here_ms"]) if row["here_ms"] else None
        print(f"  {name:45s} predicted {row['predicted_ms']:8.1f} ms, measured {row['measured_ms']:8.1f}"
              f" ms ({row['error']:+.1%})" + (f", here {row['here_ms']:.1f} ms"
                                               if row.get("here_ms") else ""), flush=True)
        rows.append(row)
    return rows


def _measure_here(job: Job, stack: str) -> float | None:
    """The whole job (every layer and micro-batch) on this device, without the profiler."""
    import torch

    from profiler.stacks.runner import TraceRequest, plan, prepare, timed

    cuda = torch.cuda.is_available()
    req = TraceRequest(((job.model.name, job),), stack, "cuda" if cuda else "cpu",
                       micro_batch_sizes=(job.training.micro_batch_size,),
                       recomputes=(job.training.recompute,), layers=job.model.num_layers,
                       micro_batches=job.num_microbatches, warmup=2, repeats=3,
                       threads=None if cuda else 1)
    try:
        run = prepare(plan(req)[0], req)
        _, wall = timed(run, 3)
        return statistics.median(wall) * 1e3
    except Exception as exc:
        print(f"    measuring {job.model.name} here failed: {type(exc).__name__}: {exc}", flush=True)
        return None
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-cpu", action="store_true", help="skip the CPU deep-model check")
    ap.add_argument("--only-cpu", action="store_true", help="only the CPU deep-model check")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--stack", choices=sorted(DEEP_JOBS), default="reference",
                    help="the stack of the CPU deep-model check (its tiny job: DEEP_JOBS)")
    ap.add_argument("--profiles", nargs="*", default=[],
                    help="TAG=DIR: the traced profile for the runs file's rows of that tag")
    ap.add_argument("--measure-here", action="store_true",
                    help="with --profiles: also time each job on this device, unprofiled")
    ap.add_argument("--runs", type=Path, default=ROOT / "data" / "measured" / "h100" / "runs.csv")
    ap.add_argument("--json", type=Path, help="write every row here")
    args = ap.parse_args()
    report: dict[str, Any] = {}
    if args.only_cpu:
        deep_cpu(args.rounds, (8, 24), stack=args.stack)
    elif args.profiles:
        profiles = {p.split("=", 1)[0]: Path(p.split("=", 1)[1]) for p in args.profiles}
        rows = fresh_profiles(profiles, args.runs, args.measure_here)
        _table("freshly traced profiles -> measured runs (no trace of the predicted job)", rows,
               "measured_ms", "MAPE <= 8%, worst <= 15%")
        here = [dict(r, measured_ms=r["here_ms"], error=r["error_here"]) for r in rows
                if r.get("here_ms")]
        if here:
            _table("the same predictions vs the jobs timed on this device", here, "measured_ms",
                   "-")
        for r in rows:
            print(f"  {r['job']:45s} {', '.join(f'{k} {v:.0%}' for k, v in r['coverage'].items())}")
        report["fresh"] = rows
    else:
        measured = pd.read_csv(TRACES / "measured.csv").set_index("job")
        names = sorted(p.name[:-len(".json.gz")] for p in TRACES.glob("*.json.gz"))
        start = time.perf_counter()
        imported = import_all(names, measured)
        print(f"imported {len(imported)} traces in {time.perf_counter() - start:.1f} s "
              f"(streamed; unattributed kernel time: "
              f"{max(i.summary.unattributed_kernel_s for i in imported.values()) * 1e3:.3f} ms max)")
        with tempfile.TemporaryDirectory() as tmp:
            report["self"] = self_reproduction(imported, measured, Path(tmp))
            _table("1. each traced job from its own trace vs the trace's iteration", report["self"],
                   "profiled_ms", "every job within 3%")
            report["loo"] = leave_one_out(imported, measured, Path(tmp), family)
            _table("2. leave-one-out within a model family vs iteration_ms_median", report["loo"],
                   "measured_ms", "MAPE <= 8%, worst <= 15%")
            for r in report["loo"]:
                kinds = sorted(set(r["sources"].values()))
                print(f"     {r['job']:45s} phases {', '.join(kinds)}")
            report["stack"] = leave_one_out(imported, measured, Path(tmp), stack_of)
            _table("   context: leave-one-out within a stack (other models of the prefix too)",
                   report["stack"], "measured_ms", "-")
            report["datasheet"] = datasheet(measured, [r["job"] for r in report["loo"]])
            _table("   context: datasheet h100-sxm-80gb, no profile", report["datasheet"],
                   "measured_ms", "-")
        memory(report["loo"], measured)
        if not args.skip_cpu:
            deep_cpu(args.rounds, (8, 24), stack=args.stack)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
