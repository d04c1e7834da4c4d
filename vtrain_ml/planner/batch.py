"""The surrogate's view of a `SpaceTable`: job columns of many rows, and what follows from a
predicted iteration time and peak memory (cost, time to train, the objective and constraints),
computed on arrays with the formulas `planner.evaluation.evaluation_from_time` applies to one job.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.graph.params import total_params
from simulator.job.specs import GiB, Job
from simulator.memory.fit import required_from_peak
from vtrain_ml.planner.columns import job_columns
from vtrain_ml.planner.config import Objective
from vtrain_ml.planner.rules import template
from vtrain_ml.planner.table import SpaceTable


@dataclass(frozen=True)
class Predicted:
    """Predicted metrics of rows (arrays aligned with `positions`)."""

    positions: np.ndarray
    iteration_time_s: np.ndarray
    peak_memory_bytes: np.ndarray
    num_gpus: np.ndarray
    parameters: np.ndarray
    time_to_train_s: np.ndarray | None  # None without a token budget
    cost_usd: np.ndarray  # to train the token budget when there is one, else per iteration

    def scaled(self, time_factor: float, memory_factor: float) -> Predicted:
        """The same rows with times and memory multiplied (an optimistic or pessimistic bound)."""
        ttt = None if self.time_to_train_s is None else self.time_to_train_s * time_factor
        return Predicted(self.positions, self.iteration_time_s * time_factor,
                         self.peak_memory_bytes * memory_factor, self.num_gpus, self.parameters, ttt,
                         self.cost_usd * time_factor)

    def take(self, at: np.ndarray) -> Predicted:
        ttt = None if self.time_to_train_s is None else self.time_to_train_s[at]
        return Predicted(self.positions[at], self.iteration_time_s[at], self.peak_memory_bytes[at],
                         self.num_gpus[at], self.parameters[at], ttt, self.cost_usd[at])


def predicted(table: SpaceTable, positions: np.ndarray, time_s: np.ndarray, memory: np.ndarray) -> Predicted:
    """Cost and time to train from predicted times, as `evaluation_from_time` computes them: the
    token budget is `train_tokens` or `tokens_per_parameter` x parameters; dollars are seconds x
    GPUs x the price per GPU-hour (`simulator.report.metrics.cost_usd`)."""
    job: Job | None = template(table)
    assert job is not None
    config = table.space.config
    parameters = table.flat(table.cached("parameters", lambda: table.model(total_params)), positions)
    gpus = table.flat(table.num_gpus, positions)
    seq = table.flat(table.model(lambda m: m.seq_length), positions)
    tokens = (config.tokens_per_parameter * parameters if config.tokens_per_parameter
              else np.full(len(positions), config.train_tokens or 0.0))
    # each plan's GPU type at its price (`Job.price_per_gpu_hour_usd`: the entry's, else the file's)
    price = table.flat(table.hardware(lambda h, e: h.price_per_gpu_hour_usd if e.price_per_gpu_hour_usd
                                      is None else e.price_per_gpu_hour_usd, float), positions)
    per_iteration = time_s * gpus * price / 3600.0
    if not (config.tokens_per_parameter or config.train_tokens):
        return Predicted(positions, time_s, memory, gpus, parameters, None, per_iteration)
    to_train = tokens / (config.global_batch * seq / time_s)
    return Predicted(positions, time_s, memory, gpus, parameters, to_train, to_train * gpus * price / 3600.0)


def objective_columns(objective: Objective, p: Predicted) -> list[np.ndarray]:
    """The objective values of each row, every one to be minimized (`objective_values` signed)."""
    return {Objective.TIME: [p.iteration_time_s], Objective.COST: [p.cost_usd],
            Objective.PARETO: [p.iteration_time_s, p.cost_usd],
            Objective.LARGEST_MODEL: [-p.parameters / 1e9]}[objective]


def violation(table: SpaceTable, p: Predicted) -> np.ndarray:
    """The largest relative constraint overshoot of each row (<= 0: feasible), as
    `objective.constraint_values`: memory over capacity, time to train over the budget."""
    capacity = table.flat(table.hardware(lambda h, e: h.memory_bytes, float), p.positions)
    context = table.flat(table.hardware(lambda h, e: h.reserved_memory_GiB * GiB, float), p.positions)
    worst = required_from_peak(p.peak_memory_bytes, context) / capacity - 1.0
    budget = table.space.config.time_budget_s
    if budget is not None:
        ttt = p.time_to_train_s if p.time_to_train_s is not None else np.full(len(p.positions), np.inf)
        worst = np.maximum(worst, ttt / budget - 1.0)
    return worst


__all__ = ["Predicted", "job_columns", "objective_columns", "predicted", "violation"]
