"""vtrain-search (python -m vtrain_ml.search): the fastest / cheapest layout (or largest model)
for a GPU budget.

    vtrain-search --config examples/case_study_1_mtnlg.yaml [--exhaustive] [--json] [--csv F]
    vtrain-search --model mt-nlg-530b --hardware a100-80gb --max-gpus 3360 \\
        --global-batch 1920 --seq 2048 [--objective time|cost|pareto|largest_model] ...
    vtrain-search --resume --study NAME --storage URL [--trials N]   # as printed by a search
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from vtrain_ml.cli.common import add_common, invoked_as, run
from vtrain_ml.cli.search_output import Progress, render, resume_command, warn_partial_front, where_it_lives
from vtrain_ml.planner.config import Objective, SearchConfig, config_from_dict, default_storage, load_config
from vtrain_ml.planner.report import SORT_KEYS

# CLI flag -> SearchConfig field (values given on the command line override the --config file)
FLAGS: dict[str, tuple[str, Any, str]] = {
    "model": ("--model", str, "model preset (data/models) to lay out"),
    "hardware": ("--hardware", str, "GPU type (catalog name or hardware YAML file); several, comma-separated "
                                    "(b200,gb200): the GPU type becomes a knob, each priced by its file"),
    "max_gpus": ("--max-gpus", int, "most GPUs a plan may use"),
    "global_batch": ("--global-batch", int, "global batch size (sequences)"),
    "seq": ("--seq", int, "sequence length (overrides the preset's)"),
    "objective": ("--objective", str, "time | cost | pareto | largest_model"),
    "trials": ("--trials", int, "surrogate-scored Optuna trials (default 3000)"),
    "verify_every": ("--verify-every", int, "verify exactly every N trials (default 100)"),
    "verify_top": ("--verify-top", int, "candidates verified per round (default 5)"),
    "initial_samples": ("--initial-samples", int, "exact samples for a focused surrogate (default 24)"),
    "surrogate": ("--surrogate", str, "trained surrogate (surrogate.model.Surrogate.save) to use"),
    "storage": ("--storage", str, "Optuna storage URL (default journal:///runs/studies/STUDY.journal, "
                                  "a journal file per study; sqlite:///file.db or any SQLAlchemy URL "
                                  "for a database; memory for a throwaway run)"),
    "study": ("--study", str, "study name (default: derived from the search's content hash)"),
    "seed": ("--seed", int, "sampler and sampling seed"),
    "n_jobs": ("--n-jobs", int, "processes for exact simulation batches"),
    "train_tokens": ("--train-tokens", float, "token budget: time and cost to train"),
    "price_per_gpu_hour_usd": ("--price", float, "price per GPU-hour in USD"),
    "time_budget_days": ("--time-budget-days", float, "wall-clock budget (largest_model)"),
    "tokens_per_parameter": ("--tokens-per-parameter", float, "tokens per parameter (largest_model)"),
    "top": ("--top", int, "rows of the table (default 10)"),
    "patience": ("--patience", int, "stop when the best exact plan (the exact front, for pareto) has not "
                                    "changed for N verification rounds (default: run every trial)"),
    "tolerance": ("--tolerance", float, "screening's optimality gap: stop when no unverified plan could beat "
                                        "the best exact one by more than this fraction (default 0)"),
    "enumerate_below": ("--enumerate-below", int, "pareto: simulate every plan of a space with at most "
                                                  "this many valid plans (default 1000; 0: always search)"),
    "strategy": ("--strategy", str, "auto (default: the cheapest for this space and simulator) | enumerate "
                                    "| screen | optuna"),
    "screen_limit": ("--screen-limit", int, "most plans the surrogate scores at once; a larger space is "
                                            "screened on a random sample (default 5,000,000)"),
}


# CLI flag -> a `space:` choice list (comma-separated values; they override the recipe's list)
SPACE_FLAGS: dict[str, tuple[str, str]] = {
    "num_gpus": ("--num-gpus", "GPU counts (one value fixes it; dp = num_gpus / (tp*cp*pp))"),
    "tp": ("--tp", "tensor-parallel sizes"), "pp": ("--pp", "pipeline-parallel sizes"),
    "dp": ("--dp", "data-parallel sizes (without --num-gpus)"),
    "schedule": ("--schedule", "gpipe, 1f1b, interleaved_1f1b"),
    "virtual_stages": ("--virtual-stages", "model chunks per pipeline stage (interleaved_1f1b)"),
    "recompute": ("--recompute", "none, selective, full"),
    "ep": ("--ep", "expert-parallel sizes (MoE models)"),
    "expert_tp": ("--expert-tp", "the experts' tensor-parallel sizes (MoE models)"),
    "cp": ("--cp", "context-parallel sizes"),
    "cp_comm_type": ("--cp-comm-type", "p2p, a2a, all_gather"),
    "precision": ("--precision", "bf16, fp16, fp8, fp8/mxfp8, fp8/delayed, fp8/tensorwise, fp8/blockwise, "
                                 "fp4/nvfp4"),
    "micro_batch_size": ("--micro-batch", "micro-batch sizes"),
    "data_parallel_sharding": ("--sharding", "no_shard, optim, optim_grads, optim_grads_params"),
    "cuda_graphs": ("--cuda-graphs", "none, per_layer, full_iteration"),
    "moe_token_dispatcher": ("--dispatcher", "alltoall, allgather, flex"),
    "exp_avg_dtype": ("--exp-avg-dtype", "Adam's first moment: fp32, bf16, fp16, fp8 (below fp32: "
                                         "the distributed optimizer)"),
    "exp_avg_sq_dtype": ("--exp-avg-sq-dtype", "Adam's second moment: fp32, bf16, fp16, fp8"),
    "recompute_modules": ("--recompute-modules", "module lists for selective recompute, modules of a "
                                                 "list joined by +: core_attn,mla_up_proj+moe_act"),
}
BOOLEAN_SPACE_FLAGS = {"sequence_parallel": ("--sequence-parallel", "false, true"),
                       "distributed_optimizer": ("--distributed-optimizer", "false, true"),
                       "overlap_grad_reduce": ("--overlap-grad-reduce", "false, true"),
                       "overlap_param_gather": ("--overlap-param-gather", "false, true (a sharded "
                                                "optimizer with overlapped gradient reduction)"),
                       "tp_comm_overlap": ("--tp-comm-overlap", "false, true"),
                       "moe_overlap_ep_comm": ("--moe-overlap-ep-comm", "false, true (MoE models)"),
                       "grad_reduce_in_fp32": ("--grad-reduce-in-fp32", "true, false (false: a 16-bit "
                                               "gradient buffer, as NVIDIA's perf recipes)")}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vtrain_ml.search",
        description="Search for the fastest, cheapest or Pareto-optimal training layout: every plan "
                    "simulated exactly when that is cheapest, else scored by a surrogate (every plan "
                    "at once, or Optuna trials in a huge space) with the best verified by the exact "
                    "simulator; the answer is always the simulator's. Ctrl-C stops it with the best "
                    "plan so far and the command that resumes it.")
    p.add_argument("--config", metavar="FILE", help="search recipe (YAML); flags override it")
    for field, (flag, kind, text) in FLAGS.items():
        p.add_argument(flag, dest=field, type=kind, help=text)
    for field, (flag, text) in {**SPACE_FLAGS, **BOOLEAN_SPACE_FLAGS}.items():
        p.add_argument(flag, dest=f"space_{field}", metavar="A,B", help=f"space.{field}: {text}")
    p.add_argument("--account-for-embedding-and-loss", dest="space_account_for_embedding_and_loss",
                   action="store_true", help="space.account_for_embedding_and_loss: also try pipeline "
                   "sizes that divide the layers + 2 (+ MTP) with one layer fewer on the first and last "
                   "stage (Megatron's uneven split; DeepSeek-V3's 61 layers on 4 or 8 stages)")
    p.add_argument("--resume", action="store_true",
                   help="continue (or join) an existing study; with --study alone, its stored settings")
    p.add_argument("--exhaustive", action="store_true", help="simulate every valid plan instead")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--csv", metavar="FILE", help="write every exactly evaluated plan as a CSV table")
    p.add_argument("--sort", choices=sorted(SORT_KEYS),
                   help="order of the table and the CSV (default: the objective's, best first)")
    p.add_argument("--plot", metavar="PNG", help="write the time-versus-cost plot")
    p.add_argument("--mlflow", action="store_true", help="log the search to MLflow")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_common(p)
    return p


def _list(flag: str, text: str, kind: Callable[[str], Any]) -> list[Any]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    try:
        return [kind(v) for v in values]
    except ValueError:
        raise ConfigError(f"{flag} {text}: give comma-separated values, e.g. {flag} 1,2,4") from None


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ValueError(text)


def _modules(text: str) -> list[str]:
    return [m.strip() for m in text.split("+") if m.strip()]


INTEGER_SPACE = {"num_gpus", "tp", "pp", "dp", "virtual_stages", "ep", "expert_tp", "cp",
                 "micro_batch_size"}


def space_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The `space:` lists (and the uneven split's switch) given as flags."""
    out: dict[str, Any] = {}
    if getattr(args, "space_account_for_embedding_and_loss", False):
        out["account_for_embedding_and_loss"] = True
    for field, (flag, _) in {**SPACE_FLAGS, **BOOLEAN_SPACE_FLAGS}.items():
        text = getattr(args, f"space_{field}", None)
        if text is not None:
            kind: Callable[[str], Any] = int if field in INTEGER_SPACE else _bool if field in \
                BOOLEAN_SPACE_FLAGS else _modules if field == "recompute_modules" else str
            out[field] = _list(flag, text, kind)
    return out


def build_config(args: argparse.Namespace) -> SearchConfig:
    given = {f: getattr(args, f) for f in FLAGS if getattr(args, f) is not None}
    if "hardware" in given and "," in given["hardware"]:
        given["hardware"] = [h.strip() for h in given["hardware"].split(",") if h.strip()]
    space = space_overrides(args)
    if args.config:
        if space:
            from simulator.job.catalog import read_yaml

            recipe = read_yaml(Path(args.config)) if Path(args.config).is_file() else None
            stored = recipe.get("space", {}) if isinstance(recipe, dict) else {}
            given["space"] = {**(stored if isinstance(stored, dict) else {}), **space}
        return load_config(args.config, given)
    if space:
        given["space"] = space
    if args.resume and args.study and "model" not in given:
        from vtrain_ml.planner.study import stored_config

        url = given.get("storage") or default_storage(args.study)
        return config_from_dict({**stored_config(url, args.study), **given}, where=f"study {args.study}")
    missing = [FLAGS[f][0] for f in ("max_gpus", "global_batch") if f not in given
               and not (f == "max_gpus" and "num_gpus" in space)]
    if "model" not in given:
        missing.insert(0, "--model")
    if missing:
        raise ConfigError(f"missing {', '.join(missing)} (or give a recipe with --config FILE)")
    return config_from_dict(given, where="command line")


def _pareto_enumeration(config: SearchConfig, progress: Progress) -> tuple[bool, int | None]:
    """(enumerate instead of searching?, the number of valid plans when counted): a Pareto front
    of a small space is cheaper to simulate exactly in full than to search, and then complete."""
    if config.objective is not Objective.PARETO:
        return False, None
    from vtrain_ml.planner.space import SearchSpace

    space = SearchSpace(config)
    if space.size > max(config.enumerate_below * 50, 20_000):
        return False, None
    valid = sum(space.build(p).valid for p in space.enumerate())
    if 0 < valid <= config.enumerate_below:
        progress.message(f"the space holds {valid:,} valid plans (enumerate_below="
                         f"{config.enumerate_below:,}): simulating them all for the exact Pareto front "
                         f"instead of searching")
        return True, valid
    return False, valid


class StopRequest:
    """Ctrl-C (SIGINT) and SIGTERM ask the search to stop at its next step instead of killing it:
    it then reports the best plan so far, writes the outputs asked for and prints the resume
    command (`stop()` is what the planner asks). A second Ctrl-C aborts at once."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.signal: str | None = None

    def __call__(self) -> bool:
        return self.signal is not None

    def _handle(self, number: int, frame: object) -> None:
        if self.signal is not None and number == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signal.Signals(number).name
        self.say(f"{self.signal}: stopping after the current step and reporting the best plan so far "
                 f"(Ctrl-C again to abort)")

    @contextmanager
    def installed(self) -> Iterator[None]:
        previous = {n: signal.signal(n, self._handle) for n in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


def _main(args: argparse.Namespace) -> int:
    import optuna

    # Optuna logs every trial at INFO; our progress lines replace that unless --debug
    optuna.logging.set_verbosity(optuna.logging.DEBUG if args.debug else optuna.logging.WARNING)
    config = build_config(args)
    progress = Progress(args.quiet or args.json)
    command = invoked_as("search")
    enumerate_all, valid_plans = (True, None) if args.exhaustive else _pareto_enumeration(config, progress)
    stop = StopRequest(progress.message)
    try:
        if enumerate_all:
            from vtrain_ml.planner.exhaustive import run_exhaustive

            report = run_exhaustive(config, progress.message)
        else:
            from vtrain_ml.planner.runner import Hooks, run_search

            def started(opened: SearchConfig, done: int) -> None:
                nonlocal config
                config = opened  # the study's real name (a changed recipe gets a new one)
                progress.message(where_it_lives(config) + (f", resumed at {done} trials" if done else ""))
                resume = resume_command(command, config)
                if resume:
                    progress.message(f"resume it (if stopped) or extend it with: {resume}")

            hooks = Hooks(message=progress.message, verified=progress.verified, trial=progress.trial,
                          started=started)
            with stop.installed():
                report = run_search(config, resume=args.resume, hooks=hooks, stop=stop)
    finally:
        progress.close()
    if not args.quiet:
        warn_partial_front(report, valid_plans)
    render(report, config, args, command)
    return 130 if stop() else 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), argv)
