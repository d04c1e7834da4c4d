"""python -m vtrain_ml.simulate JOB [--json] [--trace FILE] [--profile DIR]"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from simulator.fileio import write_json_atomic
from simulator.render import chrome_trace, table
from simulator.simulate import simulate
from vtrain_ml.cli.common import add_common, run
from vtrain_ml.jobs import load_with_overrides


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vtrain_ml.simulate",
                                description="Simulate one training iteration of a job file "
                                            "(native YAML/JSON or a vTrain JSON config).")
    p.add_argument("job", help="job file (.yaml/.json)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of the iteration")
    p.add_argument("--profile", metavar="DIR", help="cost kernels from a measured profile directory")
    p.add_argument("--strict", action="store_true",
                   help="refuse a profile measured on another GPU type than the job's")
    p.add_argument("--hardware", metavar="NAME_OR_FILE", help="override the job's GPU type")
    p.add_argument("--price", type=float, metavar="USD", help="price per GPU-hour")
    p.add_argument("--train-tokens", type=float, metavar="N", help="token budget to train")
    add_common(p)
    return p


def _main(args: argparse.Namespace) -> int:
    job = load_with_overrides(args.job, hardware=args.hardware, price=args.price,
                              train_tokens=args.train_tokens)
    sources = None
    if args.profile:  # op measurements, or phases of a traced real stack (simulator.traced)
        from simulator.traced import simulate_with_profile

        result, sources = simulate_with_profile(job, args.profile, strict=args.strict)
    else:
        result = simulate(job)
    if args.trace:
        write_json_atomic(args.trace, chrome_trace(result))
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=1) + "\n")
    else:
        sys.stdout.write(table(result) + "\n")
        if sources:
            sys.stdout.write("\n  traced profile: " + ", ".join(f"{phase} {source}" for phase, source
                                                          in sources.items()) + "\n")
        if args.trace:
            sys.stdout.write(f"\n  trace written to {args.trace} (open in ui.perfetto.dev)\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), argv)
