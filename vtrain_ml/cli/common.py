"""What every CLI shares: `--debug`, logging setup, the command's name, and turning user errors
into one line."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from simulator.errors import VTrainError

MODULE_PREFIX = "python -m vtrain_ml."
# Optional dependencies (top-level import name) -> the pyproject extra that installs them. A
# command that needs one and does not find it says which extra to install, in one line.
EXTRAS = {"optuna": "surrogate", "xgboost": "surrogate", "sklearn": "surrogate", "pyarrow": "surrogate",
          "mlflow": "surrogate", "matplotlib": "surrogate", "torch": "profile",
          "transformers": "huggingface", "megatron": "megatron", "dask": "dask", "distributed": "dask",
          "ray": "ray"}
# libraries that log at INFO on their own handlers (MLflow's database migrations, ...): quiet
# unless --debug, so that a command's stderr is its own progress and errors
NOISY_LOGGERS = ("mlflow", "alembic", "optuna")


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")


def script_name(command: str) -> str:
    """The console script of a command (`search` -> `vtrain-search`, see pyproject.toml)."""
    return f"vtrain-{command}"


def missing_extra(exc: ModuleNotFoundError, command: str) -> str | None:
    """The one line for an optional dependency that is not installed (None: not one of ours)."""
    module = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(module)
    if extra is None:
        return None
    return (f"{command} needs {module}, which the '{extra}' extra installs: "
            f"pip install 'vtrain-ml[{extra}]'")


def needs(*modules: str) -> None:
    """Import the optional modules a command needs before it starts any work; a missing one
    raises ModuleNotFoundError, which `run` turns into the extra to install."""
    for module in modules:
        importlib.import_module(module)


def report_missing_extra(exc: ModuleNotFoundError, command: str) -> int:
    """Exit code 2 and the extra to install, or re-raise an import error that is not ours."""
    line = missing_extra(exc, command)
    if line is None:
        raise exc
    sys.stderr.write(f"error: {line}\n")
    return 2


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


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`), raised in the main thread like Ctrl-C, so that a command's clean-up
    (`finally` blocks: checkpoints, stopping worker processes) runs before it exits."""


_RECEIVED: set[int] = set()  # SIGINT / SIGTERM received by the running command


def stop_requested() -> bool:
    """Whether Ctrl-C or SIGTERM reached the running command. A long loop checks it between
    steps: the signal's exception, raised wherever the main thread happens to be, is swallowed
    when that is a destructor or a garbage-collector callback (CPython prints "Exception
    ignored" and goes on), and a generator once ran to the end after Ctrl-C."""
    return bool(_RECEIVED)


def _interrupted(signum: int, frame: object) -> None:
    _RECEIVED.add(signum)
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM raises `Terminated` and Ctrl-C `KeyboardInterrupt` in the main thread, each
    recorded for `stop_requested`; a Ctrl-C the process ignores (started with `&` from a
    script) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _RECEIVED.clear()
    names = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        names.append(signal.SIGINT)
    previous = {n: signal.signal(n, _interrupted) for n in names}
    try:
        yield
    finally:
        for n, handler in previous.items():
            signal.signal(n, handler)


def run(main: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser,
        argv: Sequence[str] | None) -> int:
    """Parse, configure logging, run; a `VTrainError` becomes one stderr line and exit code 2."""
    command = script_name(parser.prog.removeprefix(MODULE_PREFIX).split()[0])
    name_the_script(parser)
    args = parser.parse_args(argv)
    if isinstance(getattr(args, "command", None), str):
        command += f" {args.command}"
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.debug:
        for name in NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        with _signals_raise():
            return main(args)
    except VTrainError as exc:
        if args.debug:
            raise
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except ModuleNotFoundError as exc:
        if args.debug:
            raise
        return report_missing_extra(exc, command)
    except KeyboardInterrupt as exc:  # a loop that saw `stop_requested` raises the plain one
        terminated = isinstance(exc, Terminated) or signal.SIGTERM in _RECEIVED
        sys.stderr.write("terminated\n" if terminated else "interrupted\n")
        return 143 if terminated else 130
