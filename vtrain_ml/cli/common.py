"""What every CLI shares: `--debug`, logging setup, the command's name, and turning user errors
into one line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from simulator.errors import VTrainError

MODULE_PREFIX = "python -m vtrain_ml."
# libraries that log at INFO on their own handlers (MLflow's database migrations, ...): quiet
# unless --debug, so that a command's stderr is its own progress and errors
NOISY_LOGGERS = ("mlflow", "alembic", "optuna")


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")


def script_name(command: str) -> str:
    """The console script of a command (`search` -> `vtrain-search`, see pyproject.toml)."""
    return f"vtrain-{command}"


def invoked_as(command: str) -> str:
    """How the user started `command`: its console script, or `python -m vtrain_ml.<command>`.
    Messages that tell the user what to type next (a resume command) use the same form."""
    script = script_name(command)
    return script if Path(sys.argv[0]).name == script else f"{MODULE_PREFIX}{command}"


def name_the_script(parser: argparse.ArgumentParser) -> None:
    """Usage lines say what the user typed, and the help names the console script.

    Parsers are built with ``prog="python -m vtrain_ml.<command>"``; run under the console
    script, the usage says ``vtrain-<command>`` instead (sub-command parsers included).
    """
    if not parser.prog.startswith(MODULE_PREFIX):
        return
    command = parser.prog.removeprefix(MODULE_PREFIX).split()[0]
    script, invoked = script_name(command), invoked_as(command)
    note = f"Installed as the console script `{script}` too ({MODULE_PREFIX}{command} works the same)."
    if note not in (parser.epilog or ""):
        parser.epilog = f"{parser.epilog}\n\n{note}" if parser.epilog else note
    for sub in [parser, *_subparsers(parser)]:
        sub.prog = sub.prog.replace(f"{MODULE_PREFIX}{command}", invoked, 1)


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return [p for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for p in action.choices.values()]


def run(main: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser,
        argv: Sequence[str] | None) -> int:
    """Parse, configure logging, run; a `VTrainError` becomes one stderr line and exit code 2."""
    name_the_script(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.debug:
        for name in NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        return main(args)
    except VTrainError as exc:
        if args.debug:
            raise
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
