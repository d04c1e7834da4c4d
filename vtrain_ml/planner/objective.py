"""Scoring a candidate for Optuna: objective values, directions and constraint values.

`SurrogateObjective` is Optuna's `objective(trial)`: it suggests every knob from its fixed
choice list, builds the candidate, and scores it with the surrogate. Infeasible candidates (a
broken layout rule, a predicted memory overflow, a predicted time to train over the budget) are
never exceptions: their constraint values are positive, and Optuna's samplers rank them below
every feasible trial. The values are set with `trial.set_constraint` (Optuna 5 deprecates
`constraints_func` in its favour) and mirrored in the user attr "constraints" for readers.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import optuna

from vtrain_ml.planner.config import Objective, SearchConfig
from vtrain_ml.planner.evaluation import Evaluation
from vtrain_ml.planner.space import Candidate, SearchSpace

MINIMIZE = optuna.study.StudyDirection.MINIMIZE
MAXIMIZE = optuna.study.StudyDirection.MAXIMIZE

DIRECTIONS: dict[Objective, tuple[optuna.study.StudyDirection, ...]] = {
    Objective.TIME: (MINIMIZE,),
    Objective.COST: (MINIMIZE,),
    Objective.PARETO: (MINIMIZE, MINIMIZE),
    Objective.LARGEST_MODEL: (MAXIMIZE,),
}

OBJECTIVE_NAMES: dict[Objective, tuple[str, ...]] = {
    Objective.TIME: ("iteration_time_s",),
    Objective.COST: ("cost_usd",),
    Objective.PARETO: ("iteration_time_s", "cost_usd"),
    Objective.LARGEST_MODEL: ("parameters_billion",),
}


def objective_values(objective: Objective, ev: Evaluation) -> tuple[float, ...]:
    values = {"iteration_time_s": ev.iteration_time_s, "cost_usd": ev.cost_usd,
              "parameters_billion": ev.parameters / 1e9}
    return tuple(values[name] for name in OBJECTIVE_NAMES[objective])


def worst_values(objective: Objective) -> tuple[float, ...]:
    return tuple(math.inf if d is MINIMIZE else -math.inf for d in DIRECTIONS[objective])


def constraint_values(config: SearchConfig, capacity_bytes: float, ev: Evaluation) -> tuple[float, ...]:
    """Relative overshoots; feasible when every value is <= 0 (Optuna's convention). Memory is
    what the device must hold (the simulator's `fits_in_memory` verdict: the allocator's least
    reservation and the context; the peak, for older evaluations) against the plan's own GPU
    (`capacity_bytes`: the space's, for older evaluations)."""
    held = ev.memory_required_bytes if ev.memory_required_bytes is not None else ev.peak_memory_bytes
    memory = held / (ev.memory_capacity_bytes or capacity_bytes) - 1.0
    budget = config.time_budget_s
    if budget is None:
        return (memory,)
    time_to_train = ev.time_to_train_s if ev.time_to_train_s is not None else math.inf
    return (memory, time_to_train / budget - 1.0)


def infeasible_constraints(config: SearchConfig, candidate: Candidate) -> tuple[float, ...]:
    n = 2 if config.time_budget_s is not None else 1
    return (1.0,) * n


def is_feasible(constraints: Any) -> bool:
    return constraints is not None and all(c <= 0 for c in constraints)


def set_constraints(trial: optuna.Trial, values: tuple[float, ...]) -> None:
    trial.set_user_attr("constraints", list(values))
    for i, value in enumerate(values):
        trial.set_constraint(str(i), value)


class Predictor(Protocol):
    def predict(self, candidates: list[Candidate]) -> list[Evaluation]: ...


class SurrogateObjective:
    """`objective(trial)`: suggest, build, predict, store constraints; values are predictions."""

    def __init__(self, space: SearchSpace, predictor: Predictor) -> None:
        self.space = space
        self.predictor = predictor
        self.config = space.config

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, ...]:
        params = {k.name: k.suggest(trial) for k in self.space.searched}
        candidate = self.space.build(params)
        trial.set_user_attr("source", "surrogate")
        trial.set_user_attr("key", candidate.key)
        objective = self.config.objective
        if not candidate.feasible:
            trial.set_user_attr("infeasible", "; ".join(candidate.reasons))
            set_constraints(trial, infeasible_constraints(self.config, candidate))
            return _single(worst_values(objective))
        predicted = self.predictor.predict([candidate])[0]
        trial.set_user_attr("predicted", predicted.to_dict())
        set_constraints(trial, constraint_values(self.config, self.space.hardware.memory_bytes, predicted))
        return _single(objective_values(objective, predicted))


def _single(values: tuple[float, ...]) -> float | tuple[float, ...]:
    return values[0] if len(values) == 1 else values
