"""python -m vtrain_ml.profile {ops, collectives, import-nccl-tests, import-trace, trace} ... --out DIR

  ops                 measure the unique operators of the requested models on --device
  collectives         measure collectives with torch.distributed (run under torchrun)
  import-nccl-tests   add nccl-tests output (or vTrain AR_GPU<n> tables) to a profile
  import-trace        cut a torch.profiler (Kineto) trace of a training iteration into phases
  trace               run real layers of a stack on --device under torch.profiler and import them
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.graph.ops import Op
from simulator.job.catalog import resolve_hardware
from simulator.job.enums import CollectiveKind, Precision
from vtrain_ml.cli.common import add_common, run
from vtrain_ml.outputs import check_dir_output

ATTENTION = {"unfused": (False,), "flash": (True,), "both": (False, True)}
SEQUENCE_PARALLEL = {"off": (False,), "on": (True,), "both": (False, True)}
STACK_NAMES = ("reference", "huggingface", "megatron-core")
UNITS = {"": 1, "K": 1024, "KIB": 1024, "M": 1024**2, "MIB": 1024**2, "G": 1024**3, "GIB": 1024**3}


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers, e.g. 1,2,4")
    return values


def byte_size(text: str) -> int:
    """'1KiB', '64M', '1GiB' or a plain byte count."""
    upper = text.strip().upper()
    number = upper.rstrip("KMGIB")
    unit = upper[len(number):]
    if unit not in UNITS or not number.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 1024, 64KiB, 1GiB")
    return int(number) * UNITS[unit]


def _hardware(name: str | None) -> str | None:
    return None if name is None else resolve_hardware(name).name


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vtrain_ml.profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    ops = sub.add_parser("ops", help="measure the unique operators of models on a device")
    ops.add_argument("--device", required=True, help="cuda or cpu")
    ops.add_argument("--models", required=True,
                     help="comma-separated presets or job files (native YAML or vTrain JSON)")
    ops.add_argument("--tp", type=int_list, default=(1,), help="tensor-parallel sizes, e.g. 1,2,4,8")
    ops.add_argument("--micro-batch", type=int_list, default=(1,), help="micro-batch sizes")
    ops.add_argument("--seq", type=int_list, default=(), help="sequence lengths (default: the model's)")
    ops.add_argument("--precision", choices=[x.value for x in Precision], default="bf16")
    ops.add_argument("--attention", choices=list(ATTENTION), default="both",
                     help="attention path(s) to profile: unfused bmm/softmax, flash (SDPA), both")
    ops.add_argument("--sequence-parallel", choices=list(SEQUENCE_PARALLEL), default="both")
    ops.add_argument("--max-adam-params", type=int, default=4**14,
                     help="largest Adam step to run (larger ones are interpolated)")
    _timing_args(ops, warmup=3, repeats=30, budget=0.5)
    ops.add_argument("--seed", type=int, default=0)
    coll = sub.add_parser("collectives", help="measure collectives (under torchrun)")
    coll.add_argument("--min-bytes", type=byte_size, default=1024)
    coll.add_argument("--max-bytes", type=byte_size, default=1024**3)
    coll.add_argument("--factor", type=int, default=4, help="size step (multiplicative)")
    coll.add_argument("--kinds", default=",".join(k.value for k in CollectiveKind),
                      help="comma-separated subset of " + ", ".join(k.value for k in CollectiveKind))
    coll.add_argument("--precision", choices=[x.value for x in Precision], default="bf16")
    _timing_args(coll, warmup=5, repeats=20, budget=0.0)
    nccl = sub.add_parser("import-nccl-tests", help="import nccl-tests output files")
    nccl.add_argument("files", nargs="+", type=Path)
    nccl.add_argument("--precision", choices=[x.value for x in Precision], default="bf16")
    _trace_parsers(sub)
    for sp in (ops, coll, nccl):
        sp.add_argument("--out", required=True, type=Path, help="profile directory")
        sp.add_argument("--hardware", help="catalog GPU id of the device (default: detected)")
        add_common(sp)
    for sp in (ops, coll):
        sp.add_argument("--resume", action="store_true", help="continue a killed run")
        sp.add_argument("--quiet", action="store_true", help="no progress lines")
    add_common(p)
    return p


def _timing_args(p: argparse.ArgumentParser, warmup: int, repeats: int, budget: float) -> None:
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--repeats", type=int, default=repeats, help="timed calls per measurement (max)")
    p.add_argument("--budget-s", type=float, default=budget, help="stop repeating after this much")


def _ops(args: argparse.Namespace) -> int:
    from profiler.run_ops import OpsRun, profile_ops
    from profiler.selection import SelectionRequest
    from profiler.timing import TimingConfig

    request = SelectionRequest(
        models=tuple(m.strip() for m in args.models.split(",") if m.strip()), tps=args.tp,
        micro_batches=args.micro_batch, seqs=args.seq, precision=Precision(args.precision),
        attention=ATTENTION[args.attention], sequence_parallel=SEQUENCE_PARALLEL[args.sequence_parallel],
        max_adam_params=args.max_adam_params)
    timing = TimingConfig(args.warmup, min(5, args.repeats), args.repeats, args.budget_s)
    job = OpsRun(request, args.device, args.out, args.resume, timing, args.seed, _hardware(args.hardware))

    def progress(i: int, n: int, op: Op) -> None:
        if not args.quiet and (i % 25 == 0 or i == n - 1):
            sys.stderr.write(f"  [{i + 1}/{n}] {op.name} {op.shape}\n")
    report = profile_ops(job, progress)
    sel, meta = report.selection, report.meta
    sys.stdout.write(
        f"selected {len(sel.unique)} unique ops out of {sel.total_ops} ops in {sel.graphs} graphs "
        f"({sel.reduction:.1f}x fewer to measure)\n"
        f"measured {report.measured_now} now, {report.already_done} already done, "
        f"{len(report.failed)} failed\n"
        f"profile {args.out}: {meta.tables['ops.csv'].rows} ops on {meta.device.name}, "
        f"hardware {meta.hardware or 'none'}, content hash {meta.content_hash}\n")
    for line in sel.skipped:
        sys.stdout.write(f"  skipped {line}\n")
    for line in report.failed:
        sys.stdout.write(f"  failed {line}\n")
    return 0


def _collectives(args: argparse.Namespace) -> int:
    from profiler.collectives import CollectiveRun
    from profiler.run_collectives import run_collectives
    from profiler.timing import TimingConfig

    try:
        kinds = tuple(CollectiveKind(k.strip()) for k in args.kinds.split(",") if k.strip())
    except ValueError:
        raise ConfigError(f"--kinds={args.kinds!r}: use a subset of "
                          f"{', '.join(k.value for k in CollectiveKind)}") from None
    budget = args.budget_s or float("inf")
    spec = CollectiveRun(args.min_bytes, args.max_bytes, args.factor, kinds,
                         TimingConfig(args.warmup, args.repeats, args.repeats, budget))
    report = run_collectives(args.out, spec, args.resume, Precision(args.precision),
                             _hardware(args.hardware))
    if report.meta is not None:
        sys.stdout.write(f"measured {report.measured_now} collective points; profile {args.out} "
                         f"holds {report.total_rows} (content hash {report.meta.content_hash})\n")
    return 0


def _import(args: argparse.Namespace) -> int:
    from profiler.run_collectives import import_nccl_tests

    report = import_nccl_tests(list(args.files), args.out, _hardware(args.hardware),
                               Precision(args.precision))
    assert report.meta is not None
    sys.stdout.write(f"imported {report.measured_now} rows from {len(args.files)} files; profile "
                     f"{args.out} holds {report.total_rows} collective points "
                     f"(content hash {report.meta.content_hash})\n")
    return 0


def _trace_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    imp = sub.add_parser("import-trace", help="import torch.profiler traces of training iterations")
    imp.add_argument("traces", nargs="+", type=Path, help="Chrome/Kineto trace (.json or .json.gz)")
    imp.add_argument("--job", required=True, help="the job the trace ran (native YAML/JSON)")
    imp.add_argument("--stack", default=None,
                     help="label of the software stack (default: the job's training.framework)")
    imp.add_argument("--iteration-ms", type=float, default=None,
                     help="the job's measured iteration time without the profiler (recorded)")
    imp.add_argument("--host-ratio", type=float, default=None,
                     help="host time without / with the profiler for this stack and host, if "
                          "measured (default: the profile's measured ratio, else the built-in)")
    imp.add_argument("--peak-memory-gib", type=float, default=None,
                     help="the job's measured peak allocated memory (recorded)")
    tr = sub.add_parser("trace", help="trace real layers of a stack on a device and import them")
    tr.add_argument("--device", required=True, help="cuda or cpu")
    tr.add_argument("--stack", choices=STACK_NAMES, default="reference")
    tr.add_argument("--models", required=True, help="comma-separated job files (native YAML/JSON)")
    tr.add_argument("--tp", type=int_list, default=(1,), help="tensor-parallel sizes of the shards")
    tr.add_argument("--micro-batch", type=int_list, default=(1,), help="micro-batch sizes")
    tr.add_argument("--recompute", default="none", help="comma-separated: none, selective, full")
    tr.add_argument("--sequence-parallel", choices=list(SEQUENCE_PARALLEL), default="off")
    tr.add_argument("--attention", choices=["job", *ATTENTION], default="job",
                    help="attention kernel: the job's, flash (SDPA), unfused, or both")
    tr.add_argument("--layers", type=int, default=2, help="transformer layers to run (>= 2)")
    tr.add_argument("--micro-batches", type=int, default=2, help="micro-batches per iteration")
    tr.add_argument("--warmup", type=int, default=2)
    tr.add_argument("--repeats", type=int, default=3, help="timed iterations without the profiler")
    tr.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--resume", action="store_true", help="skip shapes already traced into --out")
    tr.add_argument("--quiet", action="store_true", help="no progress lines")
    for sp in (imp, tr):
        sp.add_argument("--out", required=True, type=Path, help="profile directory")
        sp.add_argument("--hardware", help="catalog GPU id of the device (default: detected)")
        add_common(sp)


def _import_trace(args: argparse.Namespace) -> int:
    from profiler.trace.importer import TraceSource, analyze, write_imported
    from simulator.job.loaders import load_job

    job = load_job(args.job)
    peak = args.peak_memory_gib * 1024**3 if args.peak_memory_gib is not None else None
    measured = args.iteration_ms / 1e3 if args.iteration_ms is not None else None
    stack = args.stack or job.training.framework.value
    imported = [analyze(TraceSource(path, job, stack, "import-trace", args.host_ratio, measured,
                                    peak)) for path in args.traces]
    report = write_imported(args.out, imported, _hardware(args.hardware))
    for item in imported:
        _print_trace(item)
    sys.stdout.write(f"profile {args.out}: {report.traces_in_profile} traces, device "
                     f"{report.meta.device.name}, hardware {report.meta.hardware or 'none'}, "
                     f"content hash {report.meta.content_hash}\n")
    return 0


def _print_trace(item: Any) -> None:
    from profiler.trace.importer import phase_share_lines

    s = item.summary
    sys.stdout.write(
        f"{item.source.path.name} (trace {item.trace_id}): {s.iterations} iteration(s), "
        f"{s.micro_batches} micro-batches x {s.layers} layers ({s.layer_period} top-level ops "
        f"per layer)\n"
        f"  iteration {s.iteration_s * 1e3:.1f} ms in the trace; GPU kernels {s.kernel_s * 1e3:.1f} ms"
        f" ({s.kernels:.0f} kernels), busy {s.busy_s * 1e3:.1f} ms\n"
        f"{_host_line(s)}"
        f"  phase               kernel-time share, instances x per instance\n")
    for line in phase_share_lines(s):
        sys.stdout.write(line + "\n")
    if s.unmapped_backward:
        sys.stdout.write(f"  ({s.unmapped_backward} backward nodes had no forward op in the trace; "
                         f"they were attributed to the node before them)\n")


def _host_line(s: Any) -> str:
    """Where the host times come from: the least-disturbed iteration, back-pressure taken out."""
    line = ""
    if s.iterations > 1:
        hosts = ", ".join(f"{h * 1e3:.1f}" for h in s.host_by_iteration_s)
        line += (f"  host times from iteration {s.host_iteration + 1} of {s.iterations}, the least "
                 f"disturbed (host {hosts} ms)")
    if s.pressure_slowdown > 1.0:
        line += (f"{'; ' if line else '  '}host work {s.pressure_slowdown:.2f}x slower while the "
                 f"launch queue was full, taken out")
    return line + "\n" if line else ""


def _trace(args: argparse.Namespace) -> int:
    from profiler.stacks.runner import TraceRequest, run_traces
    from simulator.job.enums import Recompute
    from simulator.job.loaders import load_job

    try:
        recompute = tuple(Recompute(r.strip()) for r in args.recompute.split(",") if r.strip())
    except ValueError:
        raise ConfigError(f"--recompute={args.recompute!r}: use a comma-separated subset of "
                          f"{', '.join(r.value for r in Recompute)}") from None
    files = [m.strip() for m in args.models.split(",") if m.strip()]
    jobs = tuple((Path(f).stem, load_job(f)) for f in files)
    attention = (None,) if args.attention == "job" else ATTENTION[args.attention]
    request = TraceRequest(jobs, args.stack, args.device, args.tp, args.micro_batch, recompute,
                           SEQUENCE_PARALLEL[args.sequence_parallel], attention, args.layers,
                           args.micro_batches, args.warmup, args.repeats, args.seed, args.resume,
                           args.threads)

    def progress(i: int, n: int, name: str) -> None:
        if not args.quiet:
            sys.stderr.write(f"  [{i + 1}/{n}] {name}\n")
    count = 0
    for item in run_traces(request, args.out, _hardware(args.hardware), progress):
        count += 1
        src = item.source
        sys.stdout.write(f"traced {src.path.name}: iteration "
                         f"{(src.measured_iteration_s or 0) * 1e3:.1f} ms without the profiler, "
                         f"{item.summary.iteration_s * 1e3:.1f} ms traced; host "
                         f"{(src.host_s or 0) * 1e3:.1f} ms without, "
                         f"{(src.profiled_host_s or 0) * 1e3:.1f} ms with the profiler\n")
    sys.stdout.write(f"profile {args.out}: {count} shapes traced now\n")
    return 0


COMMANDS = {"ops": _ops, "collectives": _collectives, "import-nccl-tests": _import,
            "import-trace": _import_trace, "trace": _trace}


def _main(args: argparse.Namespace) -> int:
    check_dir_output("--out", args.out)
    return COMMANDS[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), argv)
