"""`python -m vtrain_ml`: the list of commands; `python -m vtrain_ml COMMAND ...` runs one."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence

# command -> (module whose `main(argv) -> int` runs it, what it is for); the main job first.
# Each is also a console script `vtrain-<command>` (pyproject.toml) and `python -m vtrain_ml.<command>`.
COMMANDS: dict[str, tuple[str, str]] = {
    "search": ("vtrain_ml.search", "the fastest, cheapest or Pareto-optimal layout for a GPU budget "
                                       "(start here)"),
    "simulate": ("vtrain_ml.cli.simulate", "one training iteration: time, breakdown, memory, MFU, cost, "
                                           "trace"),
    "validate": ("vtrain_ml.cli.validate", "simulate measured runs and report the error"),
    "calibrate": ("vtrain_ml.cli.calibrate", "fit the hardware model to measured runs, write a hardware "
                                             "file"),
    "profile": ("vtrain_ml.cli.profile", "trace your stack (or import a torch.profiler trace), measure "
                                         "operators and collectives into a profile"),
    "surrogate": ("vtrain_ml.cli.surrogate", "sample the simulator, train and serve the XGBoost surrogate"),
    "schedule": ("vtrain_ml.cli.schedule", "schedule many training jobs on one cluster"),
    "compat": ("vtrain_ml.compat.vtrain", "vTrain's example.py: predicted iteration time of a vTrain "
                                         "config (-c config.json)"),
}
FIRST = "vtrain-search --config examples/case_study_1_mtnlg.yaml"


def available() -> dict[str, tuple[str, str]]:
    """The commands whose module is installed (a command's module may come with a later release)."""
    return {name: entry for name, entry in COMMANDS.items() if importlib.util.find_spec(entry[0])}


def usage() -> str:
    from vtrain_ml import __version__

    width = max(len(f"vtrain-{n}") for n in available())
    lines = [f"vtrain-ml {__version__}: plan LLM training runs -- how to lay a run out on a cluster, "
             "how long it takes, what it costs.", "", "commands:"]
    lines += [f"  {f'vtrain-{name}':<{width}}  {text}" for name, (_, text) in available().items()]
    lines += ["", "Each is also `python -m vtrain_ml.<command>` and `python -m vtrain_ml <command>`; "
              "add --help for its options.", f"First run, from the repository: {FIRST}"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        sys.stdout.write(usage() + "\n")
        return 0
    commands = available()
    if args[0] not in commands:
        sys.stderr.write(f"error: unknown command '{args[0]}'; commands: {', '.join(commands)} "
                         f"(python -m vtrain_ml lists them)\n")
        return 2
    try:
        module = importlib.import_module(commands[args[0]][0])
    except ModuleNotFoundError as exc:
        from vtrain_ml.cli.common import report_missing_extra

        return report_missing_extra(exc, f"vtrain-{args[0]}")
    return int(module.main(args[1:]))


if __name__ == "__main__":
    raise SystemExit(main())
