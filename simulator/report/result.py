"""The one frozen result of a simulation; renderers (table, JSON, trace) are views of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.graph.blocks import JobGraph
from simulator.memory.stages import StageMemory
from simulator.report.metrics import usd_per_million_tokens
from simulator.timeline.engine import Timeline
from simulator.timeline.lowering import StageCosts
from simulator.timeline.stragglers import ScaleLoss
from simulator.timeline.tail import Tail

BREAKDOWN_KEYS = ("forward", "backward", "recompute", "tp_comm", "fsdp_comm", "overhead", "pp_comm",
                  "dp_comm_exposed", "embedding_sync", "pipeline_bubble", "optimizer", "scale_loss")


@dataclass(frozen=True)
class StageReport:
    stage: int
    busy_s: float
    idle_s: float
    memory: StageMemory

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "busy_s": self.busy_s, "idle_s": self.idle_s,
                "memory": self.memory.to_dict()}


@dataclass(frozen=True)
class SimulationResult:
    """Iteration time, its breakdown (seconds; sums to the iteration time on the critical stage),
    per-stage load and memory, throughput, FLOP utilization and cost. `peak_memory_bytes` is
    the fullest GPU's allocated peak and CUDA context; `peak_allocated_bytes` the allocated peak
    alone, comparable with `torch.cuda.max_memory_allocated`. `fits_in_memory` compares
    `memory_required_bytes` -- what the caching allocator must reserve for that peak, plus the
    context (simulator.memory.fit) -- with the capacity; `memory_decided_by` says whether the
    allocated peak alone was already over ("allocated") or the reservation decided ("reserved")."""

    job: dict[str, Any]
    iteration_time_s: float
    breakdown: dict[str, float]
    critical_stage: int
    stages: tuple[StageReport, ...]
    num_microbatches: int
    tokens_per_s: float
    model_flops_per_iteration: float
    hardware_flops_per_iteration: float
    mfu: float
    hfu: float
    peak_memory_bytes: float
    memory_capacity_bytes: float
    fits_in_memory: bool
    cost_per_iteration_usd: float
    train_tokens: float | None
    time_to_train_s: float | None
    cost_to_train_usd: float | None
    profile_coverage: dict[str, float]
    timeline: Timeline | None = field(default=None, repr=False, compare=False)
    dp_comm_s: tuple[float, ...] = field(default=(), repr=False, compare=False)
    peak_allocated_bytes: float = 0.0  # what torch.cuda.max_memory_allocated reports
    # what the timeline was built from, for renderers that show every task (Chrome trace)
    graph: JobGraph | None = field(default=None, repr=False, compare=False)
    costs: StageCosts | None = field(default=None, repr=False, compare=False)
    tail: Tail | None = field(default=None, repr=False, compare=False)
    p2p_s: tuple[float, ...] = field(default=(), repr=False, compare=False)  # per pp boundary
    # the breakdown's `scale_loss`, term by term (simulator.timeline.stragglers)
    scale_loss: ScaleLoss | None = field(default=None, repr=False, compare=False)
    memory_required_bytes: float = 0.0  # allocator's least reservation + context (0: not computed)
    memory_decided_by: str = ""  # "allocated" | "reserved" (simulator.memory.fit)
    # (p, v) seconds each chunk's first forward waits for its parameters' all-gather
    # (--overlap-param-gather, simulator.timeline.param_gather); None without it
    param_gather_wait_s: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def memory_overflow_bytes(self) -> float:
        """How far what must fit exceeds the capacity (0 when it fits)."""
        needed = self.memory_required_bytes or self.peak_memory_bytes
        return max(0.0, needed - self.memory_capacity_bytes)

    @property
    def usd_per_million_tokens(self) -> float:
        """`simulator.report.metrics.usd_per_million_tokens` of this iteration."""
        tokens = self.job["global_batch_size"] * self.job["seq_length"]
        return usd_per_million_tokens(self.cost_per_iteration_usd, tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "iteration_time_s": self.iteration_time_s,
            "breakdown": dict(self.breakdown),
            "scale_loss": self.scale_loss.to_dict() if self.scale_loss is not None else None,
            "critical_stage": self.critical_stage,
            "num_microbatches": self.num_microbatches,
            "tokens_per_s": self.tokens_per_s,
            "model_flops_per_iteration": self.model_flops_per_iteration,
            "hardware_flops_per_iteration": self.hardware_flops_per_iteration,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "memory": [s.memory.to_dict() for s in self.stages],
            "peak_memory_bytes": self.peak_memory_bytes,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "fits_in_memory": self.fits_in_memory,
            "memory_required_bytes": self.memory_required_bytes,
            "memory_decided_by": self.memory_decided_by,
            "memory_overflow_bytes": self.memory_overflow_bytes,
            "stages": [s.to_dict() for s in self.stages],
            "cost_per_iteration_usd": self.cost_per_iteration_usd,
            "usd_per_million_tokens": self.usd_per_million_tokens,
            "train_tokens": self.train_tokens,
            "time_to_train_s": self.time_to_train_s,
            "cost_to_train_usd": self.cost_to_train_usd,
            "profile_coverage": dict(self.profile_coverage),
        }
