"""A search process for the durability tests:
`python -m tests.search_tests.worker URL TRIALS [SEED] [--resume] [--strategy S] [--oracle]
[--kill-after N]`.

With the `Constant` stand-in surrogate (the default) the processes spend their time in Optuna and
the storage; `--oracle` uses `NoisyOracle` (the exact simulator with a fixed error per plan), for
tests of what the processes find. `--kill-after N` SIGKILLs the process itself as soon as its N-th
surrogate trial is finished (the moment a crash is most likely to lose an append).
"""

from __future__ import annotations

import os
import signal
import sys

from tests.search_tests.conftest import tiny_config
from tests.search_tests.standins import Constant, NoisyOracle
from vtrain_ml.planner.runner import Hooks, run_search


def main(argv: list[str]) -> int:
    url, trials = argv[0], int(argv[1])
    seed = int(argv[2]) if len(argv) > 2 and not argv[2].startswith("--") else 0
    strategy = argv[argv.index("--strategy") + 1] if "--strategy" in argv else "optuna"
    kill_after = int(argv[argv.index("--kill-after") + 1]) if "--kill-after" in argv else 0

    def trial(done: int, total: int) -> None:
        if kill_after and done >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    config = tiny_config(url, trials=trials, verify_every=10, seed=seed, strategy=strategy)
    factory = (lambda: NoisyOracle(0.05)) if "--oracle" in argv else Constant
    report = run_search(config, resume="--resume" in argv, factory=factory, hooks=Hooks(trial=trial))
    best = report.best.exact.iteration_time_s if report.best else float("nan")
    print(f"best {best!r} exact {report.exact_evaluations}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
