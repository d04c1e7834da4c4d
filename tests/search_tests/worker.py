"""A search process for the durability tests:
`python -m tests.search_tests.worker URL TRIALS [SEED] [--resume] [--kill-after N]`.

Uses the `Constant` stand-in surrogate so that the processes spend their time in Optuna and the
storage, which is what these tests exercise. `--kill-after N` SIGKILLs the process itself as soon
as its N-th surrogate trial is finished (the moment a crash is most likely to lose an append).
"""

from __future__ import annotations

import os
import signal
import sys

from tests.search_tests.conftest import tiny_config
from tests.search_tests.standins import Constant
from vtrain_ml.planner.runner import Hooks, run_search


def main(argv: list[str]) -> int:
    url, trials = argv[0], int(argv[1])
    seed = int(argv[2]) if len(argv) > 2 and argv[2].isdigit() else 0
    kill_after = int(argv[argv.index("--kill-after") + 1]) if "--kill-after" in argv else 0

    def trial(done: int, total: int) -> None:
        if kill_after and done >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    config = tiny_config(url, trials=trials, verify_every=10, seed=seed)
    run_search(config, resume="--resume" in argv, factory=Constant, hooks=Hooks(trial=trial))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
