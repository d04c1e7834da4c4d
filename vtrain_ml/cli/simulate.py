"""python -m vtrain_ml.simulate JOB_OR_DIR... [--json] [--csv F] [--trace F] [--tp 4,8 ...]

One job file: the full report (or its JSON), a job that does not fit says so first, with the
smallest change that fits. Several files, a directory, or several values of an override
(`--tp 4,8 --recompute selective,full`): one row per job and variant, compared in one table or
written to --csv; the batch never stops on a bad file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.fileio import write_json_atomic, write_text_atomic
from simulator.job.loaders import read_job
from simulator.job.specs import Job
from simulator.report.render import chrome_trace, table
from simulator.report.result import SimulationResult
from simulator.simulate import simulate
from vtrain_ml import batch
from vtrain_ml.cli.common import add_common, run
from vtrain_ml.jobs import Overrides, Sweep, apply
from vtrain_ml.memory_fit import advice
from vtrain_ml.outputs import check_file_output

INT_OPTIONS = {"num_gpus": "--num-gpus", "tp": "--tp", "pp": "--pp", "dp": "--dp", "cp": "--cp",
               "ep": "--ep",
               "micro_batch_size": "--micro-batch", "global_batch_size": "--global-batch",
               "virtual_stages": "--virtual-stages"}
TEXT_OPTIONS = {"schedule": "--schedule", "recompute": "--recompute", "precision": "--precision",
                "hardware": "--hardware", "fp8_recipe": "--fp8-recipe", "fp4_recipe": "--fp4-recipe",
                "cuda_graphs": "--cuda-graphs", "data_parallel_sharding": "--data-parallel-sharding"}
TEXT_HELP = {"fp8_recipe": "delayed, tensorwise, blockwise or mxfp8 (with --precision fp8)",
             "fp4_recipe": "nvfp4 (with --precision fp4)",
             "cuda_graphs": "none, per_layer or full_iteration",
             "data_parallel_sharding": "no_shard, optim, optim_grads or optim_grads_params"}
BOOL_OPTIONS = {"sequence_parallel": "--sequence-parallel",
                "distributed_optimizer": "--distributed-optimizer",
                "overlap_grad_reduce": "--overlap-grad-reduce",
                "overlap_param_gather": "--overlap-param-gather", "flash_attention": "--flash-attention",
                "fp8_param_gather": "--fp8-param-gather",
                "first_last_layers_bf16": "--first-last-layers-bf16",
                "fp8_dot_product_attention": "--fp8-dot-product-attention",
                "tp_comm_overlap": "--tp-comm-overlap"}
INT_HELP = {"num_gpus": "GPU count (dp follows: num_gpus / (tp*cp*pp))", "tp": "tensor-parallel size",
            "cp": "context-parallel size", "ep": "expert-parallel size (MoE models)",
            "pp": "pipeline-parallel size", "dp": "data-parallel size (the GPU count follows)",
            "micro_batch_size": "micro-batch size", "global_batch_size": "global batch size",
            "virtual_stages": "model chunks per stage (> 1: interleaved 1F1B)"}
PARTIAL_FAILURE = 3  # exit code of a batch in which some rows failed (documented in --help)
EXIT_CODES = ("exit codes: 0 every job simulated (a batch's rows that vTrain's own validate_config "
              "rejects too count as done, status 'rejected'); 2 bad input, or no job of a batch "
              f"could be simulated; {PARTIAL_FAILURE} a batch ran but some rows failed (status "
              "'error', each with its reason in the table, --csv and --json)")
BOOL_WORDS = {"on": (True,), "true": (True,), "yes": (True,), "off": (False,), "false": (False,),
              "no": (False,), "both": (False, True)}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vtrain_ml.simulate", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES)
    p.add_argument("jobs", nargs="+", metavar="JOB_OR_DIR",
                   help="job files (.yaml/.json, native or vTrain) or directories of them")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--csv", metavar="FILE", help="write one row per job and variant to a CSV file "
                                                "(one job: its one row, beside the report)")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of the iteration (one job)")
    p.add_argument("--profile", metavar="DIR", help="cost kernels from a measured profile directory")
    p.add_argument("--strict", action="store_true",
                   help="refuse a profile measured on another GPU type than the job's")
    p.add_argument("--price", metavar="USD", help="price per GPU-hour")
    p.add_argument("--train-tokens", metavar="N", help="token budget to train")
    g = p.add_argument_group("layout overrides (a comma-separated list compares every value)")
    g.add_argument("--hardware", metavar="NAME_OR_FILE", help="GPU type or hardware file")
    for dest, flag in INT_OPTIONS.items():
        g.add_argument(flag, dest=dest, metavar="N", help=INT_HELP[dest])
    g.add_argument("--schedule", metavar="S", help="gpipe, 1f1b or interleaved_1f1b")
    g.add_argument("--recompute", metavar="R", help="none, selective or full")
    g.add_argument("--precision", metavar="P", help="fp16, bf16, fp8 or fp4")
    for dest, text in TEXT_HELP.items():
        g.add_argument(TEXT_OPTIONS[dest], dest=dest, metavar="X", help=text)
    for dest, flag in BOOL_OPTIONS.items():
        g.add_argument(flag, dest=dest, nargs="?", const="on", metavar="on|off|both",
                       help="on when given alone; both compares the two")
    add_common(p)
    return p


def sweep_from_args(args: argparse.Namespace) -> Sweep:
    """The override values of the command line, each a tuple (several = compare them)."""
    values: dict[str, tuple[Any, ...]] = {}
    for dest, flag in INT_OPTIONS.items():
        if (raw := getattr(args, dest)) is not None:
            values[dest] = tuple(_positive_int(flag, item) for item in _items(flag, raw))
    for dest, flag in TEXT_OPTIONS.items():
        if (raw := getattr(args, dest)) is not None:
            values[dest] = _items(flag, raw)
    for dest, flag in BOOL_OPTIONS.items():
        if (raw := getattr(args, dest)) is not None:
            if raw.lower() not in BOOL_WORDS:
                raise ConfigError(f"{flag} {raw}: give on, off or both")
            values[dest] = BOOL_WORDS[raw.lower()]
    if args.price is not None:
        values["price_per_gpu_hour_usd"] = (_number("--price", args.price, allow_zero=True),)
    if args.train_tokens is not None:
        values["train_tokens"] = (_number("--train-tokens", args.train_tokens, allow_zero=False),)
    return Sweep(values)


def _items(flag: str, raw: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in raw.split(",") if x.strip())
    if not items:
        raise ConfigError(f"{flag} {raw!r}: give a value (or several, comma-separated)")
    return items


def _positive_int(flag: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{flag} {text}: not an integer; give a positive whole number") from None
    if value <= 0:
        raise ConfigError(f"{flag} {value}: must be a positive whole number")
    return value


def _number(flag: str, text: str, allow_zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{flag} {text}: not a number") from None
    if not value == value or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{flag} {text}: give a finite number")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{flag} {text}: cannot be negative; give a value {bound}")
    return value


def _simulator(args: argparse.Namespace,
               sources: dict[str, str] | None = None) -> Callable[[Job], SimulationResult]:
    """simulate(), or with --profile: op measurements or the phases of a traced real stack
    (simulator.costs.traced); `sources` receives where each traced phase's cost came from."""
    if not args.profile:
        return simulate
    from simulator.simulate import simulate_with_profile

    def with_profile(job: Job) -> SimulationResult:
        result, found = simulate_with_profile(job, args.profile, strict=args.strict)
        if sources is not None and found:
            sources.update(found)
        return result

    return with_profile


def _write(flag: str, path: str, write: Callable[[], None]) -> None:
    try:
        write()
    except OSError as exc:
        raise ConfigError(f"cannot write {flag} {path}: {exc.strerror or exc}") from None


def _single(args: argparse.Namespace, path: Path, overrides: Overrides) -> int:
    loaded = read_job(path)
    job = apply(loaded.job, overrides)
    sources: dict[str, str] = {}
    run_job = _simulator(args, sources)
    result = run_job(job)
    traced = dict(sources)
    fit_advice = advice(job, result, run=run_job)
    if args.trace:
        _write("--trace", args.trace, lambda: write_json_atomic(args.trace, chrome_trace(result, job)))
    if args.csv:  # the same one-row CSV a batch of one would write
        row = batch.ok_row(batch.Task(path, overrides), result, loaded.notes)
        _write("--csv", args.csv, lambda: write_text_atomic(args.csv, batch.to_csv([row])))
    if args.json:
        data = {**result.to_dict(), "notes": list(loaded.notes), "fit_advice": fit_advice}
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
    else:
        sys.stdout.write(table(result, notes=loaded.notes, advice=fit_advice) + "\n")
        if traced:
            sys.stdout.write("\n  traced profile: " + ", ".join(f"{phase} {source}" for phase, source
                                                          in traced.items()) + "\n")
        if args.trace:
            sys.stdout.write(f"\n  trace written to {args.trace} (open in ui.perfetto.dev)\n")
        if args.csv:
            sys.stdout.write(f"\n  one row written to {args.csv}\n")
    return 0


def _progress(total: int) -> Callable[[Iterable[batch.Task]], Iterable[batch.Task]]:
    def bar(items: Iterable[batch.Task]) -> Iterable[batch.Task]:
        from tqdm import tqdm

        return tqdm(items, total=total, unit="job", file=sys.stderr, disable=None, leave=False)

    return bar


def _many(args: argparse.Namespace, files: list[Path], sweep: Sweep) -> int:
    if args.trace:
        raise ConfigError(f"--trace needs one job; got {len(files)} files x {sweep.size} variants "
                          f"(simulate one file, with single override values, to trace it)")
    if not files:
        raise ConfigError(f"no job files (.json/.yaml/.yml) in {', '.join(args.jobs)}")
    work = batch.tasks(files, list(sweep.variants()))
    rows = batch.run_batch(work, _simulator(args), progress=_progress(len(work)), debug=args.debug)
    if args.csv:
        _write("--csv", args.csv, lambda: write_text_atomic(args.csv, batch.to_csv(rows)))
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
    elif args.csv:
        sys.stdout.write(f"{batch.summary(rows)}; rows written to {args.csv}\n")
    else:
        sys.stdout.write(batch.rows_table(rows) + "\n\n" + batch.summary(rows) + "\n")
    return _batch_exit_code(rows)


def _batch_exit_code(rows: list[dict[str, Any]]) -> int:
    """0: every row simulated (or rejected exactly where vTrain's own validate_config rejects
    it); 3: some rows failed (each row says why); 2: none could be simulated."""
    counts = batch.counts(rows)
    if not counts["ok"]:
        first = rows[0]
        sys.stderr.write(f"error: none of the {len(rows)} jobs could be simulated; the first, "
                         f"{first['path']}: {first['error']}\n")
        return 2
    if counts["error"]:
        first = next(r for r in rows if r["status"] == "error")
        sys.stderr.write(f"warning: {counts['error']} of {len(rows)} jobs failed (exit code "
                         f"{PARTIAL_FAILURE}); the first, {first['path']}: {first['error']}\n")
        return PARTIAL_FAILURE
    return 0


def _main(args: argparse.Namespace) -> int:
    sweep = sweep_from_args(args)
    check_file_output("--trace", args.trace, example="iteration.json")
    check_file_output("--csv", args.csv, example="results.csv")
    sources = [Path(j) for j in args.jobs]
    if len(sources) == 1 and not sources[0].is_dir() and sweep.size == 1:
        return _single(args, sources[0], next(iter(sweep.variants())))
    return _many(args, batch.job_files(sources), sweep)


def switches_alone_mean_on(argv: Sequence[str]) -> list[str]:
    """`--sequence-parallel job.yaml` is the switch, then a job file: a switch does not take an
    existing path (or nothing) as its value."""
    out = []
    for i, arg in enumerate(argv):
        following = argv[i + 1] if i + 1 < len(argv) else None
        alone = following is None or following.startswith("-") or Path(following).exists()
        out.append(f"{arg}=on" if arg in BOOL_OPTIONS.values() and alone else arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), switches_alone_mean_on(sys.argv[1:] if argv is None else argv))
