"""Graph -> timed tasks: cost each block once, then compose stage-chunk durations.

Identical layers are costed once; a chunk's forward is `layers * layer forward` plus the
embedding on the first model chunk and the head on the last. Blocking tensor-parallel
collectives stall the compute stream; asynchronous ones (Megatron's overlapped backward
collectives) cost only what outlasts the GEMM they overlap. Both are kept separately for the
breakdown. Framework overheads are explicit:
host dispatch beyond the GPU's work (per kernel and per collective call) and a fixed cost per
micro-batch step (pipeline-engine bookkeeping, data loading) -- on small models they dominate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from simulator.costs.analytic import AnalyticKernelModel, KernelModel, OpCost
from simulator.costs.blocks import BlockCost, cost_block
from simulator.graph.blocks import JobGraph
from simulator.graph.ops import Block, CommGroup, CommOp, Op
from simulator.job.specs import Job
from simulator.memo import Memo, Pinned
from simulator.network.collectives import NetworkModel
from simulator.network.topology import dp_placement, tp_placement


class CommTimer:
    """Times a block's collectives: tensor-parallel ones on the job's tp placement, FSDP's
    data-parallel ones (simulator.graph.fsdp) on its dp placement."""

    def __init__(self, job: Job, network: NetworkModel) -> None:
        self._network = network
        self._where = tp_placement(job)
        self._dp = dp_placement(job)

    def __call__(self, op: CommOp) -> float:
        network = self._network
        where = self._dp if op.group is CommGroup.DP else self._where
        if type(network) is not NetworkModel:
            return network.time(op.kind, op.bytes, where)
        return COMM_TIMES.get((Pinned(network), op.kind, op.bytes, where),
                              lambda: network.time(op.kind, op.bytes, where))


@dataclass(frozen=True)
class StageCosts:
    """(p, v) per-micro-batch durations of every stage chunk, and their parts."""

    forward_s: np.ndarray  # compute + tp comm, what the engine schedules
    backward_s: np.ndarray  # recompute + backward + their tp comm
    parts: dict[str, np.ndarray]  # overhead, forward, backward, recompute, tp_comm (each (p, v))
    layer: BlockCost
    embedding: BlockCost
    head: BlockCost
    # the pieces of one forward / backward task in execution order, each (p, v); they sum to
    # forward_s / backward_s (renderers split each task into them, e.g. the Chrome trace)
    forward_parts: dict[str, np.ndarray] | None = None
    backward_parts: dict[str, np.ndarray] | None = None


def chunk_grid(shape: tuple[int, int], chunk_layers: np.ndarray | int, per_layer: float,
               per_embedding: float, per_head: float) -> np.ndarray:
    """(p, v) total of a per-block quantity over each stage chunk: its layers (`chunk_layers`,
    (p, v) or one count for all chunks; uneven with first/last stage layers), plus the embedding
    on the first chunk of the first stage and the head on the last chunk of the last stage."""
    p, v = shape
    g = np.broadcast_to(np.asarray(chunk_layers, dtype=float) * per_layer, (p, v)).copy()
    g[0, 0] += per_embedding
    g[p - 1, v - 1] += per_head
    return g


def chunk_totals(graph: JobGraph, shape: tuple[int, int]) -> dict[str, np.ndarray]:
    """Per-micro-batch work of each stage chunk, each (p, v): FLOPs, HBM bytes and kernel
    launches of its forward, backward and recompute, and the bytes and calls of their tensor-
    parallel collectives (for renderers; not on the simulation's hot path)."""
    work = [block_totals(b) for b in (graph.layer, graph.embedding, graph.head)]
    return {key: chunk_grid(shape, graph.chunk_layers, work[0][key], work[1][key], work[2][key])
            for key in work[0]}


def block_totals(block: Block) -> dict[str, float]:
    """The work of one block for one micro-batch, by direction (see `chunk_totals`)."""
    out: dict[str, float] = {}
    for name in ("forward", "backward", "recompute"):
        ops: tuple[Op, ...] = getattr(block, name)
        comms: tuple[CommOp, ...] = getattr(block, f"{name}_comm")
        out[f"{name}_flops"] = float(sum(op.flops for op in ops))
        out[f"{name}_hbm_bytes"] = float(sum(op.bytes for op in ops))
        out[f"{name}_kernels"] = float(sum(op.kernels for op in ops))
        out[f"{name}_tp_comm_bytes"] = float(sum(c.bytes for c in comms))
        out[f"{name}_tp_comm_calls"] = float(len(comms))
    return out


class BlockReplacer(Protocol):
    """Block costs from elsewhere (simulator.costs.traced: phases of a traced real stack)."""

    def replace_blocks(self, graph: JobGraph, layer: BlockCost, emb: BlockCost, head: BlockCost
                       ) -> tuple[BlockCost, BlockCost, BlockCost]: ...


# Seconds of one op (or one collective) under a frozen analytic model: pure functions of the
# model's fields and the op, shared by every job that runs ops of the same shapes on the same
# hardware (a search, vTrain's config sweeps). Models of other types are not memoized.
OP_COSTS: Memo[OpCost] = Memo(maxsize=1 << 16)
COMM_TIMES: Memo[float] = Memo(maxsize=1 << 14)


@dataclass(frozen=True)
class MemoKernels:
    """An `AnalyticKernelModel` whose op costs are looked up in `OP_COSTS` first."""

    model: AnalyticKernelModel

    def cost(self, op: Op) -> OpCost:
        model = self.model
        return OP_COSTS.get((Pinned(model.hardware), model.precision, op), lambda: model.cost(op))


def memoized(kernels: KernelModel) -> KernelModel:
    return MemoKernels(kernels) if type(kernels) is AnalyticKernelModel else kernels


def block_costs(job: Job, graph: JobGraph, kernels: KernelModel, network: NetworkModel
                ) -> tuple[BlockCost, ...]:
    """The layer, embedding and head blocks costed once each (simulate memoizes them), and a
    low-precision run's 16-bit layer when it has one."""
    timer = CommTimer(job, network)
    kernels = memoized(kernels)
    eff = job.hardware.efficiency
    costed = (cost_block(graph.layer, kernels, timer, eff),
              cost_block(graph.embedding, kernels, timer, eff),
              cost_block(graph.head, kernels, timer, eff))
    if graph.high_layer is None:
        return costed
    return (*costed, cost_block(graph.high_layer, kernels, timer, eff))


# The per-block quantities a StageCosts is made of, each gridded over the stage chunks.
GRID_FIELDS = ("forward", "forward_comm", "backward", "backward_comm", "recompute",
               "recompute_comm", "forward_host_excess", "backward_host_excess", "host_excess",
               "forward_total", "backward_total", "forward_dp_comm", "backward_dp_comm")


def block_table(*blocks: BlockCost) -> np.ndarray:
    """(len(GRID_FIELDS), n) the fields of the layer, embedding and head costs (and the 16-bit
    layer's of a low-precision run)."""
    return np.array([[getattr(b, f) for b in blocks] for f in GRID_FIELDS])


def lower(job: Job, graph: JobGraph, kernels: KernelModel, network: NetworkModel,
          blocks: BlockReplacer | None = None) -> StageCosts:
    costed = block_costs(job, graph, kernels, network)
    if blocks is not None:
        costed = blocks.replace_blocks(graph, *costed[:3]) + costed[3:]
    return stage_costs(job, graph, costed)


def stage_costs(job: Job, graph: JobGraph, costed: tuple[BlockCost, ...],
                table: np.ndarray | None = None) -> StageCosts:
    """Compose the chunks' durations from the block costs (`table`: their `block_table`, when
    the caller has it). Every field is gridded at once, as `chunk_grid` does one by one. A
    low-precision run's 16-bit layers replace that many of their chunks' layers."""
    layer, emb, head = costed[:3]
    eff = job.hardware.efficiency
    p, v = job.parallel.pp, job.parallel.virtual_stages
    values = block_table(*costed) if table is None else table
    grids = graph.chunk_layers * values[:, 0, None, None]
    if graph.high_layers is not None and values.shape[1] > 3:
        grids += graph.high_layers * (values[:, 3, None, None] - values[:, 0, None, None])
    grids[:, 0, 0] += values[:, 1]
    grids[:, p - 1, v - 1] += values[:, 2]
    g = dict(zip(GRID_FIELDS, grids, strict=True))
    per_microbatch = np.full((p, v), eff.microbatch_overhead_s)
    parts = {
        "overhead": 2 * per_microbatch + g["host_excess"],
        "forward": g["forward"],
        "backward": g["backward"],
        "recompute": g["recompute"],
        "tp_comm": g["forward_comm"] + g["backward_comm"] + g["recompute_comm"],
    }
    forward_parts = {"forward": g["forward"], "tp_comm": g["forward_comm"],
                     "overhead": g["forward_host_excess"] + per_microbatch}
    backward_parts = {"recompute": g["recompute"], "recompute_tp_comm": g["recompute_comm"],
                      "backward": g["backward"], "tp_comm": g["backward_comm"],
                      "overhead": g["backward_host_excess"] + per_microbatch}
    fsdp_fwd, fsdp_bwd = g["forward_dp_comm"], g["backward_dp_comm"]
    if fsdp_fwd.any() or fsdp_bwd.any():  # FSDP's exposed per-layer collectives apart
        parts["tp_comm"] = parts["tp_comm"] - fsdp_fwd - fsdp_bwd
        parts["fsdp_comm"] = fsdp_fwd + fsdp_bwd
        forward_parts.update(tp_comm=g["forward_comm"] - fsdp_fwd, fsdp_comm=fsdp_fwd)
        backward_parts.update(tp_comm=g["backward_comm"] - fsdp_bwd, fsdp_comm=fsdp_bwd)
    return StageCosts(g["forward_total"] + per_microbatch, g["backward_total"] + per_microbatch,
                      parts, layer, emb, head, forward_parts, backward_parts)
