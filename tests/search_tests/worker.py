"""A search process for the durability tests: `python -m tests.search_tests.worker URL TRIALS [--resume]`.

Uses the `Constant` stand-in surrogate so that the processes spend their time in Optuna and the
storage, which is what these tests exercise.
"""

from __future__ import annotations

import sys

from tests.search_tests.conftest import tiny_config
from tests.search_tests.standins import Constant
from vtrain_ml.planner.runner import run_search


def main(argv: list[str]) -> int:
    url, trials = argv[0], int(argv[1])
    config = tiny_config(url, trials=trials, verify_every=10, seed=int(argv[2]) if len(argv) > 2 else 0)
    run_search(config, resume="--resume" in argv, factory=Constant)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
