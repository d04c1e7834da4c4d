"""Why a search space holds no feasible plan, in sentences a user can act on.

Every combination (or, for a huge space, a random sample of them) is built and sorted into one
of three kinds: it needs more GPUs than the budget but is otherwise valid, it breaks a layout rule
of the simulator, or it is valid but its model states alone overflow GPU memory. The message
counts each kind with a concrete example and, when a larger budget would help, names the
smallest layout of the space whose model states fit and how many GPUs it needs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from simulator.job.specs import GiB
from vtrain_ml.planner.space import Candidate, Choice, SearchSpace, static_memory_bytes

ENUMERATE_UP_TO = 100_000  # combinations; a larger space is diagnosed on a random sample
SAMPLE = 50_000
BUDGET_MARK = "exceeds max_gpus"  # the budget problem of SearchSpace.build


@dataclass
class Tally:
    """Counts of infeasible candidates by kind, with an example of each."""

    seen: int = 0
    over_budget: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    rule_example: dict[str, str] = field(default_factory=dict)
    memory: int = 0
    least_static_gib: float = float("inf")
    smallest_fit: Candidate | None = None  # the fewest GPUs among over-budget plans that would fit

    def add(self, space: SearchSpace, cand: Candidate) -> None:
        self.seen += 1
        rules = [p for p in cand.problems if BUDGET_MARK not in p]
        if rules:
            first = rules[0].split(";")[0].strip()
            kind = re.sub(r"\d+(\.\d+)?", "N", first)
            self.rules[kind] += 1
            self.rule_example.setdefault(kind, first)
        elif cand.problems:
            self.over_budget += 1
            self._consider(space, cand)
        elif cand.memory_problems:
            self.memory += 1
            assert cand.job is not None
            self.least_static_gib = min(self.least_static_gib, static_memory_bytes(cand.job) / GiB)

    def _consider(self, space: SearchSpace, cand: Candidate) -> None:
        job = cand.job
        assert job is not None
        if static_memory_bytes(job) > space.hardware.memory_bytes:
            return
        best = self.smallest_fit
        if best is None or best.job is None or job.cluster.num_gpus < best.job.cluster.num_gpus:
            self.smallest_fit = cand


def _combinations(space: SearchSpace) -> Iterator[dict[str, Choice]]:
    if space.size <= ENUMERATE_UP_TO:
        yield from space.enumerate()
        return
    rng = np.random.default_rng(space.config.seed)
    for _ in range(SAMPLE):
        yield {k.name: k.choices[int(rng.integers(len(k.choices)))] for k in space.knobs}


def no_feasible_plan(space: SearchSpace) -> str | None:
    """None if the space holds a feasible plan, else the sentence that says why not."""
    tally = Tally()
    for params in _combinations(space):
        cand = space.build(params)
        if cand.feasible:
            return None
        tally.add(space, cand)
    return explain(space, tally)


def explain(space: SearchSpace, tally: Tally) -> str:
    c, gib = space.config, space.hardware.memory_bytes / GiB
    model = space.base_model.name if space.base_model is not None else "the architectures"
    scope = (f"{space.size:,} combinations" if space.size <= ENUMERATE_UP_TO
             else f"{tally.seen:,} random combinations of {space.size:,}")
    parts = []
    if tally.over_budget:
        parts.append(f"{tally.over_budget:,} need more than max_gpus={c.max_gpus} GPUs")
    for kind, count in tally.rules.most_common(2):
        parts.append(f"{count:,} break a layout rule ({tally.rule_example[kind]})")
    if tally.memory:
        parts.append(f"{tally.memory:,} fit the budget but their weights, gradients and optimizer states "
                     f"alone need {tally.least_static_gib:.1f} GiB or more per GPU > {gib:.0f} GiB")
    text = (f"no feasible layout of {model} on {c.max_gpus} {space.hardware.name} GPUs in the space "
            f"({scope}): " + "; ".join(parts))
    fit = tally.smallest_fit
    if fit is not None and fit.job is not None:
        p, gpus = fit.job.parallel, fit.job.cluster.num_gpus
        text += (f". The smallest layout of the space whose model states fit uses {gpus} GPUs "
                 f"(tp={p.tp}, pp={p.pp}, dp={fit.job.dp}): raise --max-gpus to at least that")
    elif tally.memory:
        text += (". More GPUs in the budget do not help: allow distributed_optimizer, larger tp or pp "
                 "in the space, or use a GPU with more memory")
    return text
