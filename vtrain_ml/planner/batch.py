"""The surrogate's view of a `SpaceTable`: job columns of many rows, and what follows from a
predicted iteration time and peak memory (cost, time to train, the objective and constraints),
computed on arrays with the formulas `planner.evaluation.evaluation_from_time` applies to one job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.graph.params import total_params
from simulator.job.specs import Job
from surrogate.columns import Factorized
from surrogate.features import job_to_record
from vtrain_ml.planner.config import Objective
from vtrain_ml.planner.rules import template
from vtrain_ml.planner.table import SpaceTable


def job_columns(table: SpaceTable, positions: np.ndarray) -> dict[str, Any]:
    """The surrogate's `JOB_COLUMNS` of the rows at `positions`, equal to `job_to_record` of
    their built jobs (tests/search_tests/test_table.py); what all plans share comes from the
    space's template job."""
    job = template(table)
    assert job is not None, "no valid plan in the space"
    record = job_to_record(job)
    n = len(positions)
    digits = table.digits(positions)

    def at(grid: Any, dtype: Any = None) -> np.ndarray:
        values = table.gather(grid, digits)
        return values if dtype is None else values.astype(dtype)

    def of_model(read: Any, dtype: Any = np.int64) -> np.ndarray:
        return at(table.model(read, dtype))

    def const(name: str) -> np.ndarray:
        return np.full(n, record[name])

    def codes(values: np.ndarray, uniques: tuple[Any, ...]) -> Factorized:
        return Factorized(np.asarray(values, dtype=np.intp), uniques)

    recompute = tuple(str(r) for r in table.space.knobs[table.names.index("recompute")].choices)
    return {
        "num_layers": of_model(lambda m: m.num_layers), "hidden_size": of_model(lambda m: m.hidden_size),
        "num_attention_heads": of_model(lambda m: m.num_attention_heads),
        "num_query_groups": of_model(lambda m: m.query_groups), "ffn_hidden_size": of_model(lambda m: m.ffn),
        "gated_mlp": of_model(lambda m: m.gated_mlp, bool), "vocab_size": of_model(lambda m: m.vocab_size),
        "seq_length": of_model(lambda m: m.seq_length),
        "global_batch_size": const("global_batch_size"), "micro_batch_size": at(table.micro_batch),
        "precision": codes(np.zeros(n), (record["precision"],)),
        "recompute": codes(at(table.code("recompute")), recompute),
        "flash_attention": at(table.flag("flash_attention")),
        "num_gpus": at(table.num_gpus), "tp": at(table.tp), "pp": at(table.pp), "dp": at(table.dp),
        "virtual_stages": at(table.virtual_stages),
        "schedule": codes(at(table.schedule_code), table.schedule_names),
        "sequence_parallel": at(table.flag("sequence_parallel")),
        "distributed_optimizer": at(table.flag("distributed_optimizer")),
        "overlap_grad_reduce": at(table.flag("overlap_grad_reduce")),
        "gpu": codes(np.zeros(n), (record["gpu"],)), "gpus_per_node": const("gpus_per_node"),
        "intra_node_bandwidth_GBps": const("intra_node_bandwidth_GBps"),
        "inter_node_bandwidth_Gbps": const("inter_node_bandwidth_Gbps"),
    }


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
    price = job.price_per_gpu_hour_usd
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
    worst = p.peak_memory_bytes / table.space.hardware.memory_bytes - 1.0
    budget = table.space.config.time_budget_s
    if budget is not None:
        ttt = p.time_to_train_s if p.time_to_train_s is not None else np.full(len(p.positions), np.inf)
        worst = np.maximum(worst, ttt / budget - 1.0)
    return worst


__all__ = ["Predicted", "job_columns", "objective_columns", "predicted", "violation"]
