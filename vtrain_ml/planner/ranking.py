"""Ranking exact and predicted evaluations: feasible first, then by objective; non-dominated
fronts and NSGA-II's crowding distance for time versus cost; the best exact answer so far."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from optuna.trial import FrozenTrial

from vtrain_ml.planner.config import Objective
from vtrain_ml.planner.evaluation import Evaluation
from vtrain_ml.planner.objective import DIRECTIONS, MAXIMIZE, constraint_values, objective_values
from vtrain_ml.planner.space import SearchSpace
from vtrain_ml.planner.study import trial_exact


@dataclass(frozen=True)
class VerifyEvent:
    """What one verification round did (for progress display)."""

    round: int
    trials: int
    verified: int
    exact_evaluations: int
    best_exact: Evaluation | None
    remaining: int | None = None  # screening: plans that could still beat the best exact one


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
        current = {i for i in remaining if not any(dominates(values[j], values[i]) for j in remaining)}
        for i in current:
            front_of[i] = level
        remaining -= current
        level += 1
    return front_of


def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def exact_front(space: SearchSpace, done: list[FrozenTrial]) -> list[FrozenTrial]:
    """The exact trials on the time-versus-cost front (feasible, dominated by no feasible one)."""
    config, capacity = space.config, space.hardware.memory_bytes
    feasible = [t for t in done if all(c <= 0 for c in constraint_values(config, capacity, trial_exact(t)))]
    values = [objective_values(Objective.PARETO, trial_exact(t)) for t in feasible]
    return [t for t, v in zip(feasible, values, strict=True) if not any(dominates(w, v) for w in values)]


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
