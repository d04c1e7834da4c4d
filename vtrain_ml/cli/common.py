"""What every CLI shares: `--debug`, logging setup, and turning user errors into one line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from simulator.errors import VTrainError


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")


def run(main: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser,
        argv: Sequence[str] | None) -> int:
    """Parse, configure logging, run; a `VTrainError` becomes one stderr line and exit code 2."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
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
