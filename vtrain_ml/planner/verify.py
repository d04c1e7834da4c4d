"""Periodic exact verification: the step that keeps a surrogate-driven search honest.

Every `every` trials, the `top` best candidates that are not yet verified are simulated exactly.
They are ranked by the *current* surrogate (not by the possibly stale values stored with old
trials), from a pool of every candidate the study has seen plus, repeated a few steps, the
one-knob neighbours of the best of them: a cheap hill-climb on the surrogate, which keeps a
sampler that re-proposes one region from hiding a better plan a few steps away. Their exact results are added
to the study as trials of their own (the sampler learns from them), become training rows of the
surrogate, and the surrogate is refit.

For time versus cost (Pareto), candidates of one non-dominated front are picked in order of
crowding distance (NSGA-II's, Deb et al. 2002: the most isolated first, the extremes always), so
that a round spreads along the whole front instead of crowding its fast end; `refine_front`
then walks the neighbours of the exact front until no unverified neighbour is predicted to join
it. With `patience`, the search stops once the best exact answer (the exact front, for Pareto)
has not changed for that many rounds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial

from vtrain_ml.planner.config import Objective
from vtrain_ml.planner.evaluation import Evaluation, evaluate_exact_many
from vtrain_ml.planner.objective import DIRECTIONS, MAXIMIZE, constraint_values, objective_values
from vtrain_ml.planner.scorer import Scorer
from vtrain_ml.planner.space import Candidate, SearchSpace
from vtrain_ml.planner.study import complete_trials, exact_trials, record_exact, surrogate_trials, trial_exact

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerifyEvent:
    """What one verification round did (for progress display)."""

    round: int
    trials: int
    verified: int
    exact_evaluations: int
    best_exact: Evaluation | None


def rank(objective: Objective, evaluations: Sequence[Evaluation],
         constraints: Sequence[Sequence[float]]) -> list[int]:
    """Indices best-first: feasible before infeasible (by violation), then by objective
    (non-dominated fronts for Pareto, ties by the first objective), then faster first."""
    signs = [-1.0 if d is MAXIMIZE else 1.0 for d in DIRECTIONS[objective]]
    values = [tuple(s * v for s, v in zip(signs, objective_values(objective, e), strict=True))
              for e in evaluations]
    violation = [max(0.0, *c) for c in constraints]
    front = [0] * len(values)
    if len(signs) > 1:  # fronts among feasible points only: an infeasible plan dominates nothing
        feasible = [i for i, v in enumerate(violation) if v == 0]
        for i, level in zip(feasible, _fronts([values[i] for i in feasible]), strict=True):
            front[i] = level
    return sorted(range(len(values)), key=lambda i: (violation[i] > 0, violation[i], front[i], values[i],
                                                     evaluations[i].iteration_time_s))


def spread_rank(evaluations: Sequence[Evaluation], constraints: Sequence[Sequence[float]]) -> list[int]:
    """Indices for picking time-versus-cost candidates: feasible first, then by non-dominated
    front, and within a front by crowding distance, largest first (extremes are infinite)."""
    values = [objective_values(Objective.PARETO, e) for e in evaluations]
    violation = [max(0.0, *c) for c in constraints]
    feasible = [i for i, v in enumerate(violation) if v == 0]
    front = [0] * len(values)
    for i, level in zip(feasible, _fronts([values[i] for i in feasible]), strict=True):
        front[i] = level
    crowd = [0.0] * len(values)
    for level in set(front[i] for i in feasible):
        members = [i for i in feasible if front[i] == level]
        for i, distance in zip(members, crowding([values[i] for i in members]), strict=True):
            crowd[i] = distance
    return sorted(range(len(values)), key=lambda i: (violation[i] > 0, violation[i], front[i], -crowd[i],
                                                     values[i]))


def crowding(values: Sequence[tuple[float, ...]]) -> list[float]:
    """NSGA-II crowding distance of points of one front (Deb et al. 2002, Sec. III-B): per
    objective, the normalized gap between a point's two neighbours; boundary points infinite."""
    n = len(values)
    distance = [0.0] * n
    if n <= 2:
        return [math.inf] * n
    for k in range(len(values[0])):
        order = sorted(range(n), key=lambda i: values[i][k])
        low, high = values[order[0]][k], values[order[-1]][k]
        distance[order[0]] = distance[order[-1]] = math.inf
        if high == low:
            continue
        for prev, i, nxt in zip(order, order[1:], order[2:], strict=False):
            distance[i] += (values[nxt][k] - values[prev][k]) / (high - low)
    return distance


def _fronts(values: Sequence[tuple[float, ...]]) -> list[int]:
    """Non-dominated sorting (front 0 = Pareto optimal); O(n^2) per front, fine for thousands."""
    remaining = set(range(len(values)))
    front_of = [0] * len(values)
    level = 0
    while remaining:
        current = {i for i in remaining if not any(_dominates(values[j], values[i]) for j in remaining)}
        for i in current:
            front_of[i] = level
        remaining -= current
        level += 1
    return front_of


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


class ExactVerifier:
    """Optuna callback (`study.optimize(..., callbacks=[verifier])`); `verify` also runs alone."""

    def __init__(self, space: SearchSpace, scorer: Scorer, every: int, top: int, n_jobs: int = 1,
                 on_verify: Callable[[VerifyEvent], None] | None = None, target_trials: int | None = None,
                 refine_steps: int = 3, patience: int | None = None):
        self.space = space
        self.scorer = scorer
        self.every = every
        self.top = top
        self.n_jobs = n_jobs
        self.on_verify = on_verify
        self.target_trials = target_trials
        self.refine_steps = refine_steps
        self.patience = patience
        self.rounds_ = 0
        self.stale_rounds_ = 0  # rounds since the best exact answer last changed
        self.stopped_early_ = False
        self._finished = 0
        self._best: object = None

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._finished += 1
        if self._finished % self.every:
            return
        trials = self.verify(study)
        # several processes share the trial budget: stop once the study holds enough trials
        if self.target_trials is not None and len(surrogate_trials(trials)) >= self.target_trials:
            study.stop()
        elif self.patience is not None and self.stale_rounds_ >= self.patience:
            self.stopped_early_ = True
            study.stop()

    def _track_best(self, study: optuna.Study) -> None:
        """Count rounds in which the best exact answer did not change (for `patience`)."""
        best = best_signature(self.space, exact_trials(complete_trials(study)))
        self.stale_rounds_ = self.stale_rounds_ + 1 if best == self._best and best is not None else 0
        self._best = best

    def verify(self, study: optuna.Study) -> list[FrozenTrial]:
        """One round; returns the study's complete trials as read before the round."""
        trials = complete_trials(study)
        picked = self.pick(trials)
        exact = evaluate_exact_many([c.job for c, _ in picked if c.job is not None], self.n_jobs)
        for (candidate, predicted), result in zip(picked, exact, strict=True):
            record_exact(study, self.space, candidate, result, "exact", predicted)
        self.scorer.add([c for c, _ in picked], exact)
        if picked:
            self.scorer.refit()
        self.rounds_ += 1
        if self.patience is not None:
            self._track_best(study)
        if self.on_verify:
            done = exact_trials(trials)
            self.on_verify(VerifyEvent(self.rounds_, len(surrogate_trials(trials)), len(picked),
                                       len(done) + len(picked), _best(self.space, done, exact)))
        return trials

    def pick(self, trials: list[FrozenTrial]) -> list[tuple[Candidate, Evaluation]]:
        """The `top` best unverified candidates seen by the study, by the current surrogate."""
        verified = {t.user_attrs.get("key") for t in exact_trials(trials)}
        seen: dict[str, Candidate] = {}
        for t in surrogate_trials(trials):
            key = t.user_attrs.get("key")
            if key in verified or key in seen or "infeasible" in t.user_attrs:
                continue
            candidate = self.space.build(t.params)
            if candidate.feasible:
                seen[candidate.key] = candidate
        candidates = list(seen.values())
        if not candidates:
            return []
        order = self._ranked(candidates)
        for _ in range(self.refine_steps):  # beam search on the surrogate from the best seen
            added = False
            for i in self._beam(candidates, order):
                for n in self.space.neighbours(candidates[i]):
                    if n.feasible and n.key not in verified and n.key not in seen:
                        seen[n.key] = n
                        candidates.append(n)
                        added = True
            previous, order = order[: self.top], self._ranked(candidates)
            if not added or order[: self.top] == previous:
                break
        order = order[: self.top]
        predicted = self.scorer.predict([candidates[i] for i in order])
        return list(zip([candidates[i] for i in order], predicted, strict=True))

    def _beam(self, candidates: list[Candidate], order: list[int]) -> list[int]:
        """The best 2 * top candidates with distinct objective values: plans that tie (layout
        variants of one model when maximizing parameters) would fill the beam with one region."""
        objective = self.space.config.objective
        predicted = self.scorer.predict(candidates)
        beam: dict[tuple[float, ...], int] = {}
        for i in order:
            beam.setdefault(objective_values(objective, predicted[i]), i)
            if len(beam) >= 2 * self.top:
                break
        return list(beam.values())

    def _ranked(self, candidates: list[Candidate]) -> list[int]:
        predicted = self.scorer.predict(candidates)
        config, capacity = self.space.config, self.space.hardware.memory_bytes
        constraints = [constraint_values(config, capacity, p) for p in predicted]
        if config.objective is Objective.PARETO:
            return spread_rank(predicted, constraints)
        return rank(config.objective, predicted, constraints)

    def refine_front(self, study: optuna.Study, max_rounds: int = 10) -> int:
        """Verify unverified neighbours of the exact time-versus-cost front that the surrogate
        predicts would join it, until none is left (or `max_rounds`); returns how many."""
        config, capacity = self.space.config, self.space.hardware.memory_bytes
        added = 0
        for _ in range(max_rounds):
            done = exact_trials(complete_trials(study))
            verified = {t.user_attrs.get("key") for t in done}
            front = exact_front(self.space, done)
            seen: dict[str, Candidate] = {}
            for t in front:
                for n in self.space.neighbours(self.space.build(t.params)):
                    if n.feasible and n.key not in verified:
                        seen.setdefault(n.key, n)
            candidates = list(seen.values())
            predicted = self.scorer.predict(candidates)
            exact = [objective_values(Objective.PARETO, trial_exact(t)) for t in front]
            joining = [i for i, p in enumerate(predicted)
                       if all(c <= 0 for c in constraint_values(config, capacity, p))
                       and not any(_dominates(e, objective_values(Objective.PARETO, p)) for e in exact)]
            if not joining:
                break
            guesses = [predicted[i] for i in joining]
            order = spread_rank(guesses, [constraint_values(config, capacity, g) for g in guesses])
            chosen = [joining[i] for i in order[: 2 * self.top]]
            picked = [candidates[i] for i in chosen]
            results = evaluate_exact_many([c.job for c in picked if c.job is not None], self.n_jobs)
            for i, result in zip(chosen, results, strict=True):
                record_exact(study, self.space, candidates[i], result, "exact", predicted[i])
            self.scorer.add(picked, results)
            self.scorer.refit()
            added += len(picked)
        return added


def exact_front(space: SearchSpace, done: list[FrozenTrial]) -> list[FrozenTrial]:
    """The exact trials on the time-versus-cost front (feasible, dominated by no feasible one)."""
    config, capacity = space.config, space.hardware.memory_bytes
    feasible = [t for t in done if all(c <= 0 for c in constraint_values(config, capacity, trial_exact(t)))]
    values = [objective_values(Objective.PARETO, trial_exact(t)) for t in feasible]
    return [t for t, v in zip(feasible, values, strict=True) if not any(_dominates(w, v) for w in values)]


def best_signature(space: SearchSpace, done: list[FrozenTrial]) -> object:
    """What "the best exact answer" is, for patience: the best value, or the exact front's plans."""
    if space.config.objective is Objective.PARETO:
        return frozenset(str(t.user_attrs.get("key")) for t in exact_front(space, done)) or None
    best = _best(space, done, [])
    return None if best is None else objective_values(space.config.objective, best)


def _best(space: SearchSpace, done: list[FrozenTrial], new: list[Evaluation]) -> Evaluation | None:
    evaluations = [trial_exact(t) for t in done] + list(new)
    if not evaluations:
        return None
    config, capacity = space.config, space.hardware.memory_bytes
    constraints = [constraint_values(config, capacity, e) for e in evaluations]
    best = rank(config.objective, evaluations, constraints)[0]
    return evaluations[best] if all(c <= 0 for c in constraints[best]) else None
