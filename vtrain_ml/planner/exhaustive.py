"""`--exhaustive`: every valid plan of a (small) space simulated exactly -- the reference answer.

Every combination that passes the simulator's rules is simulated, including those whose model
states alone overflow memory, so the count is what a plain enumeration (Calculon's way) costs.
Jobs are simulated grouped by pipeline plan so the simulator's schedule cache is reused.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from simulator.errors import ConfigError
from vtrain_ml.planner.config import SearchConfig
from vtrain_ml.planner.evaluation import evaluate_exact_many
from vtrain_ml.planner.outcomes import make_report, outcome
from vtrain_ml.planner.report import SearchReport
from vtrain_ml.planner.space import Candidate, SearchSpace


def plan_order(candidate: Candidate) -> tuple[str, int, int, int]:
    job = candidate.job
    assert job is not None
    p = job.parallel
    return (p.schedule.value, p.pp, job.num_microbatches, p.virtual_stages)


def run_exhaustive(config: SearchConfig, message: Callable[[str], None] | None = None) -> SearchReport:
    start = time.perf_counter()
    space = SearchSpace(config)
    if space.size > config.max_exhaustive:
        raise ConfigError(f"the space has {space.size:,} combinations, more than max_exhaustive="
                          f"{config.max_exhaustive:,}; use the search, or raise max_exhaustive")
    valid = sorted((c for c in map(space.build, space.enumerate()) if c.valid), key=plan_order)
    if not valid:
        raise ConfigError(f"no valid layout in the space for max_gpus={config.max_gpus}")
    if message:
        message(f"exhaustive: simulating {len(valid):,} valid plans of {space.size:,} combinations "
                f"with {config.n_jobs} worker(s)")
    jobs = [c.job for c in valid if c.job is not None]
    exact = evaluate_exact_many(jobs, config.n_jobs)
    outcomes = [outcome(space, c, e) for c, e in zip(valid, exact, strict=True)]
    return make_report(space, "exhaustive", outcomes, len(valid), 0, time.perf_counter() - start)
