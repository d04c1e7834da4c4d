"""python -m vtrain_ml.schedule: schedule a trace of training jobs on a shared GPU cluster.

    python -m vtrain_ml.schedule TRACE [--policy elastic|edf|fifo] [--oracle simulator|surrogate|linear]
        [--gpus 1024 --gpu a100-80gb] [--seed 0] [--json] [--plot timeline.png] [--trace schedule.json]
        [--compare] [--restart-cost 300] [--surrogate FOLDER]
    python -m vtrain_ml.schedule --generate 1000 --seed 3 --gpus 4096 ...   (a generated trace, in memory)
    python -m vtrain_ml.schedule generate --jobs 120 --seed 0 --gpus 1024 --out examples/cluster_trace.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.fileio import write_json_atomic, write_text_atomic
from vtrain_ml.cli.common import add_common, run
from vtrain_ml.outputs import check_dir_output, check_file_output
from vtrain_ml.scheduler.cache import DEFAULT_CACHE, CurveCache
from vtrain_ml.scheduler.generate import GeneratorConfig, generate_rows, trace_yaml
from vtrain_ml.scheduler.policies import PolicyName
from vtrain_ml.scheduler.report import render_comparison, render_jobs, render_summary
from vtrain_ml.scheduler.result import ScheduleResult
from vtrain_ml.scheduler.run import ORACLES, Scheduler, make_cluster, make_oracle
from vtrain_ml.scheduler.trace import Trace, load_trace, trace_from_rows

DEFAULT_GPUS = 1024
DEFAULT_GPU = "a100-80gb"
PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")  # formats matplotlib's Agg writes


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vtrain_ml.schedule",
        description="Deadline-aware scheduling of many LLM training jobs on a shared GPU cluster, "
                    "with the simulator as the scheduler's throughput oracle (a SimPy simulation). "
                    "'python -m vtrain_ml.schedule generate --help' writes a trace.")
    p.add_argument("trace", nargs="?", help="job trace (.csv or .yaml)")
    p.add_argument("--generate", type=int, metavar="N", help="schedule a generated trace of N jobs (seeded)")
    p.add_argument("--policy", default="elastic", choices=[x.value for x in PolicyName])
    p.add_argument("--oracle", default="simulator", choices=ORACLES)
    p.add_argument("--gpus", type=int, help=f"cluster GPUs (default: the trace's, else {DEFAULT_GPUS})")
    p.add_argument("--gpu", help="GPU type, catalog name or hardware file "
                                 f"(default: the trace's, else {DEFAULT_GPU})")
    p.add_argument("--seed", type=int, default=0, help="seed of --generate's trace")
    p.add_argument("--restart-cost", type=float, default=300.0, metavar="S",
                   help="seconds a re-allocated job loses (checkpoint + restart; default 300)")
    p.add_argument("--slot", type=float, default=60.0, metavar="S",
                   help="elastic policy: least seconds between re-plans that no arrival or completion "
                        "triggers (ElasticFlow's scheduling slot; default 60, 0 = exact)")
    p.add_argument("--compare", action="store_true",
                   help="also run every other oracle (surrogate too with --surrogate), side by side")
    p.add_argument("--surrogate", metavar="FOLDER", help="trained surrogate for --oracle surrogate")
    p.add_argument("--cache", default=str(DEFAULT_CACHE), metavar="DIR",
                   help=f"folder of cached throughput curves (default {DEFAULT_CACHE})")
    p.add_argument("--no-cache", action="store_true", help="do not read or write cached curves")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="processes for the exact oracle")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--plot", metavar="PNG", help="write the allocation timeline and the JCT CDF")
    p.add_argument("--trace", dest="trace_out", metavar="FILE",
                   help="write a Perfetto trace (one track per job)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_common(p)
    return p


def generate_parser() -> argparse.ArgumentParser:
    d = GeneratorConfig()
    g = argparse.ArgumentParser(prog="python -m vtrain_ml.schedule generate",
                                description="Write a seeded job trace (Poisson arrivals, GPT/Llama presets).")
    g.add_argument("--jobs", type=int, default=d.jobs)
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--gpus", type=int, default=d.gpus, help="cluster size the load refers to")
    g.add_argument("--gpu", default=d.gpu)
    g.add_argument("--load", type=float, default=d.load,
                   help="offered load (GPU-hours asked / GPU-hours available)")
    g.add_argument("--deadline-factor", type=float, nargs=2, default=d.deadline_factor,
                   metavar=("LOW", "HIGH"))
    g.add_argument("--gpu-hours", type=float, nargs=2, default=d.gpu_hours, metavar=("LOW", "HIGH"))
    g.add_argument("--out", required=True, help="trace file to write (.yaml)")
    add_common(g)
    return g


def _progress(quiet: bool) -> Callable[[str, int], Callable[[int], None]] | None:
    if quiet:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None

    def start(desc: str, total: int) -> Callable[[int], None]:
        bar = tqdm(total=total, desc=desc, unit="job" if "/" in desc else "shape", leave=False,
                   file=sys.stderr, disable=None)

        def advance(n: int) -> None:
            bar.update(n)
            if bar.n >= total:
                bar.close()
        return advance
    return start


def _trace(args: argparse.Namespace) -> Trace:
    if args.generate is not None:
        if args.trace:
            raise ConfigError("give a trace file or --generate N, not both")
        config = GeneratorConfig(jobs=args.generate, seed=args.seed, gpus=args.gpus or DEFAULT_GPUS,
                                 gpu=args.gpu or DEFAULT_GPU)
        return trace_from_rows(generate_rows(config), f"generated trace (seed {args.seed})")
    if not args.trace:
        raise ConfigError("give a job trace file (.csv or .yaml), or --generate N")
    return load_trace(args.trace)


def _track(args: argparse.Namespace, result: ScheduleResult, compared: list[ScheduleResult],
           figure: Any) -> None:
    """An MLflow run through vtrain_ml.tracking (only when MLFLOW_TRACKING_URI is set)."""
    import pandas as pd

    from vtrain_ml import tracking

    with tracking.start_run("vtrain-schedule", run_name=f"{result.policy}-{result.oracle}"):
        tracking.log_params({"trace": args.trace or f"generate {args.generate} seed {args.seed}",
                             "policy": result.policy, "oracle": result.oracle, "num_gpus": result.num_gpus,
                             "gpu": result.gpu, "restart_s": result.restart_s})
        tracking.log_metrics({k: v for k, v in result.summary().items() if v is not None})
        for other in compared:
            if other is not result:
                tracking.log_metrics({f"{other.policy}.{other.oracle}": {
                    k: v for k, v in other.summary().items() if v is not None}})
        tracking.log_table(pd.DataFrame([{k: v for k, v in j.to_dict().items() if k != "allocations"}
                                         for j in result.jobs]), "jobs")
        if figure is not None:
            tracking.log_figure(figure, "schedule.png")
        if args.trace_out:
            tracking.log_artifact(args.trace_out)


def _check_outputs(args: argparse.Namespace) -> None:
    """Every path the run will write, before the oracle's minutes of simulation."""
    check_file_output("--plot", args.plot, suffixes=PLOT_SUFFIXES, example="schedule.png")
    check_file_output("--trace", args.trace_out, example="schedule.json")
    if not args.no_cache:
        check_dir_output("--cache", args.cache)


def _main(args: argparse.Namespace) -> int:
    _check_outputs(args)
    if args.gpus is not None and args.gpus < 1:
        raise ConfigError(f"--gpus={args.gpus}: a cluster needs at least one GPU")
    if args.jobs == 0:
        raise ConfigError("--jobs=0: give a number of processes (1, 2, ...) or -1 for all cores")
    trace = _trace(args)
    cluster = make_cluster(args.gpus if args.gpus is not None else trace.cluster.gpus or DEFAULT_GPUS,
                           args.gpu or trace.cluster.gpu or DEFAULT_GPU)
    cache = CurveCache(None if args.no_cache else args.cache)
    progress = _progress(args.quiet)
    oracles = {name: None for name in ([args.oracle] + (list(ORACLES) if args.compare else []))}
    if args.compare and args.surrogate is None and args.oracle != "surrogate":
        oracles.pop("surrogate")

    def build(name: str) -> Any:
        return make_oracle(name, cluster, cache, args.jobs, args.surrogate)

    main_oracle = build(args.oracle)
    reference = main_oracle if args.oracle == "surrogate" else build("simulator")
    if args.slot < 0:
        raise ConfigError(f"--slot={args.slot}: must be >= 0 seconds")
    scheduler = Scheduler(trace, cluster, reference, args.restart_cost, progress, args.slot)
    result = scheduler.run(args.policy, main_oracle)
    compared = [result] + [scheduler.run(args.policy, build(name)) for name in oracles if name != args.oracle]
    figure = None
    if args.plot:
        from vtrain_ml.scheduler.plots import schedule_figure

        figure = schedule_figure(result, compared)
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(args.plot, dpi=120)
    if args.trace_out:
        from vtrain_ml.scheduler.perfetto import schedule_trace

        write_json_atomic(args.trace_out, schedule_trace(result))
    if os.environ.get("MLFLOW_TRACKING_URI"):
        _track(args, result, compared, figure)
    if args.json:
        data = result.to_dict()
        if len(compared) > 1:
            data["comparison"] = [r.summary() for r in compared]
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
    else:
        sys.stdout.write(render_summary(result) + "\n\n" + render_jobs(result) + "\n")
        if len(compared) > 1:
            sys.stdout.write("\nthe same trace with each oracle:\n" + render_comparison(compared) + "\n")
        for label, path in (("plot", args.plot), ("Perfetto trace", args.trace_out)):
            if path:
                sys.stdout.write(f"\n  {label} written to {path}\n")
    return 0


def _generate(args: argparse.Namespace) -> int:
    check_file_output("--out", args.out, suffixes=(".yaml", ".yml"), example="trace.yaml")
    config = GeneratorConfig(jobs=args.jobs, seed=args.seed, gpus=args.gpus, gpu=args.gpu, load=args.load,
                             deadline_factor=tuple(args.deadline_factor), gpu_hours=tuple(args.gpu_hours))
    command = "python -m vtrain_ml.schedule generate " + shlex.join(
        ["--jobs", str(args.jobs), "--seed", str(args.seed), "--gpus", str(args.gpus), "--gpu", args.gpu,
         "--load", f"{args.load:g}", "--deadline-factor", *(f"{x:g}" for x in args.deadline_factor),
         "--gpu-hours", *(f"{x:g}" for x in args.gpu_hours), "--out", args.out])
    write_text_atomic(args.out, trace_yaml(generate_rows(config), config, command))
    sys.stdout.write(f"wrote {config.jobs} jobs to {args.out}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["generate"]:
        return run(_generate, generate_parser(), argv[1:])
    return run(_main, parser(), argv)
