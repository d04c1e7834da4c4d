"""Screening: the surrogate scores every plan of the space (or a large sample) in one batch, the
best are simulated exactly, and the search stops when no plan the surrogate has not ruled out
could still beat the exact answer.

"Ruled out" uses the surrogate's measured error (`Margin`): every verified plan was predicted
before it was simulated, an out-of-sample error; the margin is 1.5 x the 95th percentile of the
latest half of those errors (at least 2% on time and 0.5% on memory; 10% before any is
measured). A plan is a candidate while its *optimistic* prediction -- time and memory shrunk by
the margin -- is feasible and beats the best exact plan (ties broken by time, as `verify.rank`
breaks them; for time versus cost: is dominated by no exact plan). Each round simulates the
best-predicted candidates, refits the surrogate on every exact row and scores again, until no
candidate is left: the answer is then the exact optimum of the screened plans unless the
surrogate errs by more than its margin on a plan it never simulated. A round simulates about as
many plans as the simulator runs in one refit's time (at least `verify_top`), so that neither
the refits nor the simulations dominate.

Scoring the whole space after each refit would cost a full pass per round; rounds score a
shortlist (the candidates at 3x the margin, at least 15%), and the whole space is scored again
when the exact rows have grown fourfold, and once more before stopping.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.graph.params import total_params
from vtrain_ml.planner import rules
from vtrain_ml.planner.batch import Predicted, job_columns, objective_columns, predicted, violation
from vtrain_ml.planner.config import Objective
from vtrain_ml.planner.context import SearchContext
from vtrain_ml.planner.evaluation import Evaluation, evaluation_from_time
from vtrain_ml.planner.objective import objective_values
from vtrain_ml.planner.ranking import VerifyEvent, best_signature, crowding
from vtrain_ml.planner.space import Candidate
from vtrain_ml.planner.strategy import FIT_S
from vtrain_ml.planner.table import SpaceTable

SHORTLIST_FACTOR, SHORTLIST_MIN = 3.0, 0.15
REGROW = 4  # score the whole space again when the exact rows have grown this much
MAX_BATCH = 512
WAIT_S = 600.0  # longest wait for plans another process is simulating


@dataclass
class Margin:
    """How wrong the surrogate may be, from its out-of-sample errors on verified plans: the
    latest half of them (at least `recent`). Each error was made by the model of its round, and
    the model improves with every refit: the first rounds' errors, made by a model of a few
    dozen rows, kept the margin ~1.5x wider than the current model's errors to the end of a
    search (Llama 3.1 405B on 256 GB200: 9.5% against 6.5%), which simulated several hundred
    plans more than it needed."""

    initial: float = 0.10
    floor_time: float = 0.02
    floor_memory: float = 0.005
    safety: float = 1.5
    ceiling: float = 0.5
    recent: int = 40  # at least this many of the latest errors, or the latest half of them
    time_errors: list[float] = field(default_factory=list)
    memory_errors: list[float] = field(default_factory=list)

    def add(self, guess: Evaluation, exact: Evaluation) -> None:
        self.time_errors.append(abs(guess.iteration_time_s / exact.iteration_time_s - 1.0))
        self.memory_errors.append(abs(guess.peak_memory_bytes / exact.peak_memory_bytes - 1.0))

    def _of(self, errors: list[float], floor: float) -> float:
        if not errors:
            return self.initial
        errors = errors[-max(self.recent, len(errors) // 2):]
        return min(self.ceiling, max(floor, self.safety * float(np.quantile(errors, 0.95))))

    @property
    def time(self) -> float:
        return self._of(self.time_errors, self.floor_time)

    @property
    def memory(self) -> float:
        return self._of(self.memory_errors, self.floor_memory)


def could_beat(table: SpaceTable, guess: Predicted, best: list[Evaluation], time_margin: float,
               memory_margin: float, tolerance: float = 0.0) -> np.ndarray:
    """Rows whose optimistic prediction is feasible and beats `best` (the best exact plan, or
    the exact front for time versus cost; empty: nothing is feasible yet), by more than
    `tolerance` of the best's objective (single objectives; the front ignores it)."""
    hopeful = guess.scaled(1.0 - time_margin, 1.0 - memory_margin)
    mask = violation(table, hopeful) <= 0
    objective = table.space.config.objective
    values = objective_columns(objective, hopeful)
    if not best:
        return mask
    if objective is Objective.PARETO:
        front = sorted((e.iteration_time_s, e.cost_usd) for e in best)
        times = np.array([t for t, _ in front])
        least_cost = np.minimum.accumulate(np.array([c for _, c in front]))
        at = np.searchsorted(times, values[0], side="right") - 1  # exact plans no slower
        cheapest = np.where(at >= 0, least_cost[np.maximum(at, 0)], np.inf)
        return mask & (cheapest > values[1])
    signs = -1.0 if objective is Objective.LARGEST_MODEL else 1.0
    target = signs * objective_values(objective, best[0])[0]
    if tolerance > 0:  # beat the best by more than the gap: no ties to break
        return mask & (values[0] < target - abs(target) * tolerance)
    ties = (values[0] == target) & (hopeful.iteration_time_s < best[0].iteration_time_s)
    return mask & ((values[0] < target) | ties)


def best_first(table: SpaceTable, guess: Predicted, n: int) -> np.ndarray:
    """Indices of `guess`'s rows to simulate first, at most `n`: predicted-feasible first, then
    by objective and time; for time versus cost, fronts in crowding order (extremes first)."""
    infeasible = violation(table, guess) > 0
    values = objective_columns(table.space.config.objective, guess)
    if len(values) == 1:
        return np.lexsort((guess.iteration_time_s, values[0], infeasible))[:n]
    picked: list[int] = []
    left = np.lexsort((values[1], values[0], infeasible))
    while left.size and len(picked) < n:
        costs = values[1][left]
        on_front = costs < np.minimum.accumulate(np.concatenate([[np.inf], costs[:-1]]))
        front = left[on_front]
        distance = crowding([(float(values[0][i]), float(values[1][i])) for i in front])
        picked += [int(front[i]) for i in np.argsort(-np.asarray(distance), kind="stable")]
        left = left[~on_front]
    return np.asarray(picked[:n], dtype=np.int64)


class Screening:
    """One screening run over `table` (see the module docstring); `run` returns what it did."""

    def __init__(self, ctx: SearchContext, table: SpaceTable) -> None:
        self.ctx, self.table = ctx, table
        self.feasible = np.flatnonzero(rules.feasible(table))
        self.margin = Margin()
        self.done = np.zeros(len(self.feasible), dtype=bool)  # has an exact result (or cannot)
        self._marked: set[str] = set()
        self.predictions = 0  # rows scored by the surrogate, over all passes

    def _index(self, keys: set[str]) -> np.ndarray:
        """Indices into `self.feasible` of plans by key (those not among them left out)."""
        rows = [self.table.row_of(json.loads(k)) for k in keys]
        positions = self.table.positions(np.array([r for r in rows if r is not None], dtype=np.int64))
        at = np.searchsorted(self.feasible, positions)
        at = np.minimum(at, max(len(self.feasible) - 1, 0))
        return at[(positions >= 0) & (self.feasible[at] == positions)] if len(self.feasible) else at[:0]

    def mark_done(self) -> None:
        new = set(self.ctx.store.done) - self._marked
        self.done[self._index(new)] = True
        self._marked |= new

    def score(self, subset: np.ndarray) -> Predicted:
        """Predicted metrics of the feasible plans at `subset` (indices into them)."""
        where = self.feasible[subset]
        if not len(where):
            return predicted(self.table, where, np.zeros(0), np.zeros(0))
        self.predictions += len(where)
        time_s, memory = self.ctx.scorer.predict_columns(job_columns(self.table, where))
        return predicted(self.table, where, np.maximum(time_s, 1e-9), memory)

    def unbeaten(self, subset: np.ndarray, bests: list[Evaluation]) -> np.ndarray:
        """The plans at `subset` that the exact part of the objective leaves in the race, before
        any prediction: when maximizing parameters (exact, no surrogate needed), those at least
        as large as the best exact plan's."""
        if self.ctx.config.objective is not Objective.LARGEST_MODEL or not bests:
            return subset
        parameters = self.table.flat(self.table.cached("parameters", lambda: self.table.model(total_params)),
                                     self.feasible[subset])
        return subset[parameters >= bests[0].parameters]

    def sample(self, n: int, seed: int) -> list[Candidate]:
        """`n` random feasible plans without an exact result yet (seeded)."""
        left = np.flatnonzero(~self.done)
        rng = np.random.default_rng(seed)
        picked = rng.choice(left, size=min(n, len(left)), replace=False) if len(left) else left
        return [self.table.candidate(int(self.feasible[i])) for i in np.sort(picked)]

    def batch_size(self) -> int:
        """Plans per round: as many as the simulator runs in one refit's time, at least
        `verify_top` (see the module docstring)."""
        per_plan = self.ctx.store.seconds_per_plan
        fits = self.ctx.scorer.fit_seconds_[1:]  # the first pays the surrogate's start-up
        fit = sum(fits) / len(fits) if fits else FIT_S
        wanted = math.ceil(fit / per_plan) if per_plan else 0
        return max(self.ctx.config.verify_top, min(MAX_BATCH, wanted))

    def bests(self) -> list[Evaluation]:
        """The best exact plan (for time versus cost: the exact front), [] if none is feasible."""
        if self.ctx.config.objective is not Objective.PARETO:
            best = self.ctx.best()
            return [] if best is None else [best]
        from vtrain_ml.planner.ranking import exact_front
        from vtrain_ml.planner.study import trial_exact

        return [trial_exact(t) for t in exact_front(self.ctx.space, list(self.ctx.store.done.values()))]

    def run(self) -> dict[str, Any]:
        ctx, store = self.ctx, self.ctx.store
        rounds = stale = 0
        shortlist: np.ndarray | None = None
        full_rows, confirm, signature = 0, False, None
        outcome = "converged"
        while True:
            if ctx.stop():
                outcome = "interrupted"
                break
            if ctx.teach() or ctx.scorer.model_ is None:
                ctx.scorer.refit()
            if ctx.scorer.model_ is None:  # no exact row yet: others are simulating the sample
                store.refresh()
                if not store.others:
                    outcome = "no exact evaluation to learn from"
                    break
                store.wait_for_others(set(store.others), WAIT_S)
                continue
            self.mark_done()
            rows = len(ctx.scorer.data_)
            full = shortlist is None or confirm or rows >= REGROW * full_rows
            bests = self.bests()
            left = np.flatnonzero(~self.done)
            if not full and shortlist is not None:
                left = shortlist[~self.done[shortlist]]
            where = self.unbeaten(left, bests)
            guess = self.score(where)
            hopeful = could_beat(self.table, guess, bests, self.margin.time, self.margin.memory,
                                 ctx.config.tolerance)
            if full:
                wide = max(SHORTLIST_MIN, SHORTLIST_FACTOR * self.margin.time)
                keep = could_beat(self.table, guess, bests, wide, max(wide, self.margin.memory))
                shortlist, full_rows = where[keep], rows
            pending = self._index(store.others)
            busy = np.isin(where, pending)
            if not (hopeful & ~busy).any():
                if (hopeful & busy).any():
                    store.wait_for_others(set(store.others), WAIT_S)
                    continue
                if not full:
                    confirm = True
                    continue
                self._converged(rows, len(left))
                break
            confirm = False
            picked = np.flatnonzero(hopeful & ~busy)
            order = picked[best_first(self.table, guess.take(picked), self.batch_size())]
            evaluated = self._simulate(where[order], guess.take(order))
            rounds += 1
            new_signature = best_signature(ctx.space, list(store.done.values()))
            stale = stale + 1 if new_signature == signature else 0
            signature = new_signature
            ctx.hooks.verified(VerifyEvent(rounds, 0, evaluated, len(store.done), ctx.best(),
                                           remaining=int((hopeful & ~busy).sum()) - evaluated))
            if ctx.config.patience is not None and stale >= ctx.config.patience:
                outcome = "patience"
                break
        return {"rounds": rounds, "outcome": outcome, "screened": len(self.feasible),
                "predictions": self.predictions,
                "time_margin": self.margin.time, "memory_margin": self.margin.memory,
                "tolerance": ctx.config.tolerance}

    def _converged(self, rows: int, left: int) -> None:
        """The line that says why the search stops (a round's line counts the plans that could
        beat the best before the refit that follows it)."""
        goal = ("join the exact front" if self.ctx.config.objective is Objective.PARETO
                else "beat the best exact plan")
        self.ctx.hooks.message(
            f"converged: rescored after a refit on {rows:,} exact plans, none of the {left:,} not "
            f"simulated could {goal}, even {100 * self.margin.time:.1f}% faster and "
            f"{100 * self.margin.memory:.1f}% smaller than predicted (the surrogate's measured error)")

    def _simulate(self, indices: np.ndarray, guess: Predicted) -> int:
        """Simulate the feasible plans at `indices`; returns how many this process simulated."""
        candidates, guesses = [], []
        for k, i in enumerate(indices):
            candidate = self.table.candidate(int(self.feasible[i]))
            if not candidate.feasible or candidate.job is None:  # the table and build disagree
                self.done[i] = True
                continue
            candidates.append(candidate)
            guesses.append(evaluation_from_time(candidate.job, float(guess.iteration_time_s[k]),
                                                float(guess.peak_memory_bytes[k])))
        results = self.ctx.store.evaluate(candidates, "exact", guesses)
        by_key = {c.key: g for c, g in zip(candidates, guesses, strict=True)}
        for candidate, exact in results:
            self.margin.add(by_key[candidate.key], exact)
        self.mark_done()
        return len(results)


__all__ = ["Margin", "Screening", "best_first", "could_beat"]
