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
from simulator.costs.comm_groups import group_placements, uses_group_placements
from simulator.graph.blocks import JobGraph
from simulator.graph.ops import CP_GROUPS, EP_GROUPS, Block, CommGroup, CommOp, Op
from simulator.job.specs import Job
from simulator.memo import Memo, Pinned
from simulator.network.collectives import NetworkModel
from simulator.network.topology import tp_placement
from simulator.timeline.contention import compute_slowdown


class CommTimer:
    """Times a block's collectives on their group's placement (tensor parallelism's, and for
    experts, context parallelism and FSDP's data-parallel collectives theirs:
    simulator.costs.comm_groups)."""

    def __init__(self, job: Job, network: NetworkModel) -> None:
        self._network = network
        self._where = tp_placement(job)
        self._groups = group_placements(job) if uses_group_placements(job) else {}

    def __call__(self, op: CommOp) -> float:
        network = self._network
        where = self._groups[op.group] if self._groups else self._where
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
    other_layers: tuple[BlockCost, ...] = ()  # the graph's other layer blocks (other_layers)


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
    launches of its forward, backward and recompute, and the bytes and calls of their
    collectives (for renderers; not on the simulation's hot path)."""
    work = [block_totals(b) for b in (graph.layer, graph.embedding, graph.head)]
    out = {key: chunk_grid(shape, graph.chunk_layers if not graph.other_layers else
                           graph.layer_counts[0], work[0][key], work[1][key], work[2][key])
           for key in work[0]}
    for block, counts in zip(graph.other_layers, graph.layer_counts[1:], strict=True):
        extra = block_totals(block)
        for key in out:
            out[key] = out[key] + counts * extra[key]
    return out


def block_totals(block: Block) -> dict[str, float]:
    """The work of one block for one micro-batch, by direction (see `chunk_totals`)."""
    out: dict[str, float] = {}
    for name in ("forward", "backward", "recompute"):
        ops: tuple[Op, ...] = getattr(block, name)
        comms: tuple[CommOp, ...] = getattr(block, f"{name}_comm")
        out[f"{name}_flops"] = float(sum(op.flops for op in ops))
        out[f"{name}_hbm_bytes"] = float(sum(op.bytes for op in ops))
        out[f"{name}_kernels"] = float(sum(op.kernels for op in ops))
        ep = [c for c in comms if c.group in EP_GROUPS]
        cp = [c for c in comms if c.group in CP_GROUPS]
        dp = [c for c in comms if c.group is CommGroup.DP]
        tp = [c for c in comms if c.group not in EP_GROUPS and c.group not in CP_GROUPS
              and c.group is not CommGroup.DP]
        out[f"{name}_tp_comm_bytes"] = float(sum(c.bytes for c in tp))
        out[f"{name}_tp_comm_calls"] = float(len(tp))
        out[f"{name}_ep_comm_bytes"] = float(sum(c.bytes for c in ep))
        out[f"{name}_cp_comm_bytes"] = float(sum(c.bytes for c in cp))
        out[f"{name}_dp_comm_bytes"] = float(sum(c.bytes for c in dp))
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
    """The layer, embedding and head blocks, then the graph's other layer blocks, costed once
    each (simulate memoizes them)."""
    timer = CommTimer(job, network)
    kernels = memoized(kernels)
    eff, slowdown = job.hardware.efficiency, compute_slowdown(job.hardware)
    return tuple(cost_block(b, kernels, timer, eff, slowdown)
                 for b in (graph.layer, graph.embedding, graph.head, *graph.other_layers))


# The per-block quantities a StageCosts is made of, each gridded over the stage chunks.
GRID_FIELDS = ("forward", "forward_comm", "backward", "backward_comm", "recompute",
               "recompute_comm", "forward_host_excess", "backward_host_excess", "host_excess",
               "forward_total", "backward_total", "forward_ep_comm", "backward_ep_comm",
               "recompute_ep_comm", "forward_cp_comm", "backward_cp_comm", "recompute_cp_comm",
               "forward_dp_comm", "backward_dp_comm", "recompute_dp_comm")


def block_table(*costed: BlockCost) -> np.ndarray:
    """(len(GRID_FIELDS), blocks) the fields of the layer, embedding and head costs (and of the
    other layer blocks after them)."""
    return np.array([[getattr(b, f) for b in costed] for f in GRID_FIELDS])


def lower(job: Job, graph: JobGraph, kernels: KernelModel, network: NetworkModel,
          blocks: BlockReplacer | None = None) -> StageCosts:
    costed = block_costs(job, graph, kernels, network)
    if blocks is not None:
        costed = (*blocks.replace_blocks(graph, *costed[:3]), *costed[3:])
    return stage_costs(job, graph, costed)


def stage_costs(job: Job, graph: JobGraph, costed: tuple[BlockCost, ...],
                table: np.ndarray | None = None) -> StageCosts:
    """Compose the chunks' durations from the block costs (`table`: their `block_table`, when
    the caller has it). Every field is gridded at once, as `chunk_grid` does one by one; with
    several kinds of layer, each kind's count in a chunk times its cost."""
    layer, emb, head = costed[:3]
    eff = job.hardware.efficiency
    p, v = job.parallel.pp, job.parallel.virtual_stages
    values = block_table(*costed) if table is None else table
    if graph.other_layers:
        counts = graph.layer_counts
        grids = counts[0] * values[:, 0, None, None]
        for k in range(1, counts.shape[0]):
            grids = grids + counts[k] * values[:, 2 + k, None, None]
    else:
        grids = graph.chunk_layers * values[:, 0, None, None]
    grids[:, 0, 0] += values[:, 1]
    grids[:, p - 1, v - 1] += values[:, 2]
    g = dict(zip(GRID_FIELDS, grids, strict=True))
    per_microbatch = np.full((p, v), eff.microbatch_overhead_s)
    parts, forward_parts, backward_parts = _parts(g, per_microbatch)
    return StageCosts(g["forward_total"] + per_microbatch, g["backward_total"] + per_microbatch,
                      parts, layer, emb, head, forward_parts, backward_parts, tuple(costed[3:]))


Grids = dict[str, np.ndarray]


def _parts(g: Grids, per_microbatch: np.ndarray) -> tuple[Grids, Grids, Grids]:
    """The iteration's parts and each task's pieces in order (see `StageCosts`); expert- and
    context-parallel communication, and FSDP's data-parallel collectives (`fsdp_comm`), appear
    apart from tensor parallelism's when a job has any."""
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
    for group, key in (("ep", "ep_comm"), ("cp", "cp_comm"), ("dp", "fsdp_comm")):
        f, b, r = (g[f"{d}_{group}_comm"] for d in ("forward", "backward", "recompute"))
        if not (f.any() or b.any() or r.any()):
            continue
        parts["tp_comm"] = _rest(parts["tp_comm"], f + b + r)
        parts[key] = f + b + r
        forward_parts["tp_comm"] = _rest(forward_parts["tp_comm"], f)
        forward_parts = {**forward_parts, key: f}
        backward_parts["recompute_tp_comm"] = _rest(backward_parts["recompute_tp_comm"], r)
        backward_parts["tp_comm"] = _rest(backward_parts["tp_comm"], b)
        backward_parts = {**backward_parts, key: b + r}
    for pieces in (forward_parts, backward_parts):  # overhead last, as the tasks run it
        pieces["overhead"] = pieces.pop("overhead")
    return parts, forward_parts, backward_parts


def _rest(total: np.ndarray, part: np.ndarray) -> np.ndarray:
    """What remains of `total` after `part` of it (rounding never makes it negative)."""
    return np.maximum(total - part, 0.0)
