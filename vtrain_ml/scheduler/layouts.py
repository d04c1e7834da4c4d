"""The layouts a job can run with at a GPU count, pruned by the memory model before any simulation.

A *shape* is what decides a job's throughput curve: the model, the global batch, the GPU type.
For a shape and a GPU count n, a layout is (tp, pp, dp, micro-batch, recompute) with
tp * pp * dp = n. The other Megatron-LM knobs are fixed cluster-wide (`LayoutSpace`): 1F1B,
flash attention, sequence parallelism when tp > 1, the distributed optimizer (ZeRO-1) and
overlapped gradient reduction -- the settings of Megatron-LM's own large-model recipes
(Narayanan et al. 2021; Korthikanti et al. 2022).

Pruning reuses work across GPU counts: the parameters of the fullest pipeline stage depend only
on (tp, pp), so they are computed once per shape, and the static memory (weights, gradients,
optimizer states sharded over dp, reserved memory; `vtrain_ml.planner.space.static_memory_bytes`
computes the same bound per job) is then a closed form in dp. It is a lower bound of the
simulator's peak memory, so a layout above capacity there is never simulated.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property

from simulator.job.enums import Precision, Recompute, Schedule
from simulator.job.specs import ClusterSpec, GiB, HardwareSpec, Job, ModelSpec, ParallelPlan, TrainingSpec
from simulator.job.validation import job_problems
from simulator.memory.states import OPTIMIZER_BYTES_PER_PARAM, grad_bytes_per_param, stage_param_counts

RECOMPUTE_ORDER = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)  # fastest, most memory first


@dataclass(frozen=True)
class LayoutSpace:
    """The knobs the oracles choose from, and the fixed ones (part of every cache key)."""

    tp: tuple[int, ...] = (1, 2, 4, 8)
    micro_batch_size: tuple[int, ...] = (1, 2, 4, 8)
    recompute: tuple[Recompute, ...] = RECOMPUTE_ORDER
    schedule: Schedule = Schedule.ONE_F_ONE_B
    distributed_optimizer: bool = True
    overlap_grad_reduce: bool = True

    def to_dict(self) -> dict[str, object]:
        return {"tp": list(self.tp), "micro_batch_size": list(self.micro_batch_size),
                "recompute": [r.value for r in self.recompute], "schedule": self.schedule.value,
                "distributed_optimizer": self.distributed_optimizer,
                "overlap_grad_reduce": self.overlap_grad_reduce}


@dataclass(frozen=True)
class Cluster:
    """The shared cluster: GPU type and count, node size."""

    hardware: HardwareSpec
    num_gpus: int
    gpus_per_node: int

    def counts(self) -> list[int]:
        """GPU counts a job may hold: fewer than a node, or whole nodes (node granularity)."""
        small = list(range(1, min(self.gpus_per_node, self.num_gpus + 1)))
        nodes = range(self.gpus_per_node, self.num_gpus + 1, self.gpus_per_node)
        return small + list(nodes)


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    recompute: Recompute

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def label(self) -> str:
        return f"tp{self.tp} pp{self.pp} dp{self.dp} mb{self.micro_batch_size} {self.recompute.value}"

    def to_dict(self) -> dict[str, object]:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "micro_batch_size": self.micro_batch_size,
                "recompute": self.recompute.value}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Layout:
        return cls(int(str(data["tp"])), int(str(data["pp"])), int(str(data["dp"])),
                   int(str(data["micro_batch_size"])), Recompute(str(data["recompute"])))


@dataclass(frozen=True)
class Shape:
    """What a throughput curve depends on besides the cluster: the model and the global batch."""

    model: ModelSpec
    global_batch_size: int

    @cached_property
    def key(self) -> str:
        """Content hash of every model field and the batch (not of the model's name alone)."""
        data = {"model": self.model.model_dump(mode="json"), "global_batch_size": self.global_batch_size}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        return f"{self.model.name} (batch {self.global_batch_size}, seq {self.model.seq_length})"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass
class LayoutBuilder:
    """Candidate layouts and their `Job`s for one shape on one cluster."""

    shape: Shape
    cluster: Cluster
    space: LayoutSpace = LayoutSpace()
    _stage_params: dict[tuple[int, int], float] = field(default_factory=dict, init=False)

    @cached_property
    def template(self) -> Job:
        hw = self.cluster.hardware
        precision = Precision.BF16 if Precision.BF16 in hw.peak_tflops else next(iter(hw.peak_tflops))
        return Job(
            model=self.shape.model,
            training=TrainingSpec(global_batch_size=self.shape.global_batch_size, precision=precision,
                                  flash_attention=hw.supports_flash_attention),
            parallel=ParallelPlan(),
            cluster=ClusterSpec(gpu=hw.name, num_gpus=1, gpus_per_node=self.cluster.gpus_per_node),
            hardware=hw)

    def job(self, layout: Layout) -> Job:
        """The job of `layout` (a copy of the template; the caller's layouts are valid)."""
        t = self.template
        parallel = ParallelPlan(tp=layout.tp, pp=layout.pp, dp=layout.dp, schedule=self.space.schedule,
                                sequence_parallel=layout.tp > 1,
                                distributed_optimizer=self.space.distributed_optimizer,
                                overlap_grad_reduce=self.space.overlap_grad_reduce)
        training = t.training.model_copy(update={"micro_batch_size": layout.micro_batch_size,
                                                 "recompute": layout.recompute})
        cluster = t.cluster.model_copy(update={"num_gpus": layout.num_gpus})
        return t.model_copy(update={"parallel": parallel, "training": training, "cluster": cluster})

    @cached_property
    def model_parallel(self) -> list[tuple[int, int]]:
        """(tp, pp) pairs the model allows: tp divides heads, query groups and FFN and stays
        inside a node; pp divides the layers."""
        m, gpn = self.shape.model, self.cluster.gpus_per_node
        tps = [t for t in self.space.tp if t <= gpn and m.num_attention_heads % t == 0
               and m.query_groups % t == 0 and m.ffn % t == 0]
        return [(t, p) for t in tps for p in _divisors(m.num_layers)]

    def stage_params(self, tp: int, pp: int) -> float:
        """Parameters on one GPU of the fullest stage; once per (tp, pp), shared by all counts."""
        key = (tp, pp)
        if key not in self._stage_params:
            probe = self.job(Layout(tp, pp, 1, 1, Recompute.NONE))
            self._stage_params[key] = float(stage_param_counts(probe).max())
        return self._stage_params[key]

    def static_bytes(self, tp: int, pp: int, dp: int) -> float:
        """Weights, gradients, optimizer states (sharded over dp with ZeRO-1) and reserved memory."""
        shard = dp if self.space.distributed_optimizer else 1
        per_param = (2.0 + grad_bytes_per_param(self.template.training.precision)
                     + OPTIMIZER_BYTES_PER_PARAM / shard)
        return self.stage_params(tp, pp) * per_param + self.cluster.hardware.reserved_memory_GiB * GiB

    def grid(self, count: int) -> list[tuple[int, int, int]]:
        """(tp, pp, dp) factorizations of `count` with a dp that divides the global batch and
        whose static memory fits."""
        gbs, capacity = self.shape.global_batch_size, self.cluster.hardware.memory_bytes
        out = []
        for tp, pp in self.model_parallel:
            if count % (tp * pp):
                continue
            dp = count // (tp * pp)
            if gbs % dp == 0 and self.static_bytes(tp, pp, dp) <= capacity:
                out.append((tp, pp, dp))
        return out

    def candidates(self, count: int) -> list[Layout]:
        """Every layout at `count` GPUs that passes the rules and the static memory bound."""
        gbs = self.shape.global_batch_size
        out = []
        for tp, pp, dp in self.grid(count):
            for mb in self.space.micro_batch_size:
                if (gbs // dp) % mb:
                    continue
                for recompute in self.space.recompute:
                    layout = Layout(tp, pp, dp, mb, recompute)
                    if not job_problems(self.job(layout)):
                        out.append(layout)
        return out
