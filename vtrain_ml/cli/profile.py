"""python -m vtrain_ml.profile {ops, collectives, import-nccl-tests} ... --out DIR

  ops                 measure the unique operators of the requested models on --device
  collectives         measure collectives with torch.distributed (run under torchrun)
  import-nccl-tests   add nccl-tests output (or vTrain AR_GPU<n> tables) to a profile
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from simulator.catalog import resolve_hardware
from simulator.enums import CollectiveKind, Precision
from simulator.errors import ConfigError
from simulator.ops import Op
from vtrain_ml.cli.common import add_common, run

ATTENTION = {"unfused": (False,), "flash": (True,), "both": (False, True)}
SEQUENCE_PARALLEL = {"off": (False,), "on": (True,), "both": (False, True)}
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


COMMANDS = {"ops": _ops, "collectives": _collectives, "import-nccl-tests": _import}


def _main(args: argparse.Namespace) -> int:
    return COMMANDS[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), argv)
