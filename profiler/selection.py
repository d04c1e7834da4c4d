"""Which operators to measure: the unique ops of every requested job graph.

vTrain's observation (Bang et al. 2024, Sec. 4.1): a training iteration repeats a handful of
distinct kernels many times, and kernels with the same (kind, shapes, dtype) cost the same. So
the profiler builds the operator graphs of every requested (model, tp, micro-batch, seq,
attention path, sequence parallelism) with the simulator's own graph code and measures each
`Op.profile_key` once. `Selection` reports how many ops that saves.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import ConfigError
from simulator.graph.blocks import build_graph
from simulator.graph.ops import Block, Op, OpKind
from simulator.graph.params import padded_vocab
from simulator.job.catalog import load_model
from simulator.job.enums import Precision
from simulator.job.loaders import load_job
from simulator.job.specs import ClusterSpec, Job, ModelSpec, ParallelPlan, TrainingSpec
from simulator.job.validation import job_problems
from simulator.memory.states import stage_param_counts
from simulator.timeline.tail import optimizer_op

log = logging.getLogger(__name__)

# Adam is memory-bound and linear in its size: a geometric ladder of sizes (plus the exact
# per-rank sizes that fit) lets the profiled model interpolate any parameter shard.
ADAM_LADDER = tuple(4**i for i in range(8, 15))  # 65 Ki .. 268 Mi parameters


@dataclass(frozen=True)
class SelectionRequest:
    """What to profile (validated at the CLI edge)."""

    models: tuple[str, ...]  # preset names or job files
    tps: tuple[int, ...]
    micro_batches: tuple[int, ...]
    seqs: tuple[int, ...]  # empty: each model's own seq_length
    precision: Precision
    attention: tuple[bool, ...] = (False, True)  # flash_attention off / on
    sequence_parallel: tuple[bool, ...] = (False, True)
    max_adam_params: int = 4**14


@dataclass(frozen=True)
class Selection:
    unique: tuple[Op, ...]
    row_hints: dict[tuple[object, ...], int]  # profile key -> innermost dimension (see row_hint)
    total_ops: int  # ops in all requested graphs, counted per layer occurrence
    graphs: int
    skipped: tuple[str, ...]  # combinations that are not valid jobs, with the reason

    @property
    def reduction(self) -> float:
        return self.total_ops / max(1, len(self.unique))


def resolve_model(name: str) -> ModelSpec:
    """A preset name, or the model of a job file (native YAML/JSON or vTrain JSON)."""
    if Path(name).suffix in {".yaml", ".yml", ".json"} or Path(name).is_file():
        return load_job(name).model
    return load_model(name)


def probe_job(model: ModelSpec, tp: int, mb: int, precision: Precision, flash: bool,
              sp: bool) -> Job:
    """A one-stage, one-replica job on `tp` GPUs: the per-GPU shapes of any layout with this tp."""
    from simulator.job.catalog import resolve_hardware

    hardware = resolve_hardware("h100-sxm-80gb")  # shapes do not depend on the GPU type
    return Job(model=model,
               training=TrainingSpec(global_batch_size=mb, micro_batch_size=mb, precision=precision,
                                     flash_attention=flash),
               parallel=ParallelPlan(tp=tp, pp=1, dp=1, sequence_parallel=sp and tp > 1),
               cluster=ClusterSpec(gpu=hardware.name, num_gpus=tp, gpus_per_node=max(8, tp)),
               hardware=hardware)


def row_hint(op: Op, job: Job) -> int:
    """The innermost (row) length of a pointwise op's tensor, which its `(numel,)` key lacks:
    the hidden size for norms and residual dropouts, the sequence for attention scores, the
    (tp-split) FFN width for activations, the head dim for RoPE, the vocab shard for the
    embedding table. 0 where the shape says it all."""
    m, t = job.model, job.parallel.tp
    tokens = job.training.micro_batch_size * m.seq_length
    if op.kind in (OpKind.SOFTMAX, OpKind.DROPOUT) and op.name.startswith("attn."):
        return m.seq_length
    if op.kind in (OpKind.NORM, OpKind.DROPOUT):
        return m.hidden_size
    if op.kind is OpKind.ACTIVATION:
        return op.shape[0] // tokens
    if op.kind is OpKind.ELEMENTWISE and op.variant == "bias_grad":
        return op.shape[0] // tokens
    if op.kind is OpKind.ELEMENTWISE:
        return m.head_dim
    if op.kind is OpKind.EMBEDDING:
        return padded_vocab(m, t) // t
    return 0


def _block_ops(block: Block) -> tuple[Op, ...]:
    return (*block.forward, *block.backward)


def _graph_ops(job: Job) -> tuple[list[Op], int]:
    """The ops of one graph and how many kernels they stand for in one iteration's micro-batch."""
    graph = build_graph(job)
    layer, emb, head = (_block_ops(b) for b in (graph.layer, graph.embedding, graph.head))
    total = job.model.num_layers * len(layer) + len(emb) + len(head)
    return [*layer, *emb, *head], total


def _combinations(req: SelectionRequest) -> list[tuple[ModelSpec, int, int, bool, bool]]:
    combos = []
    for name in req.models:
        base = resolve_model(name)
        seqs = req.seqs or (base.seq_length,)
        for seq, tp, mb, flash, sp in itertools.product(seqs, req.tps, req.micro_batches,
                                                        req.attention, req.sequence_parallel):
            if sp and tp == 1:
                continue
            combos.append((base.model_copy(update={"seq_length": seq}), tp, mb, flash, sp))
    return combos


def select_ops(req: SelectionRequest) -> Selection:
    """Unique ops (first occurrence order, deterministic) of every valid requested graph."""
    seen: dict[tuple[object, ...], Op] = {}
    hints: dict[tuple[object, ...], int] = {}
    total, graphs, skipped = 0, 0, []
    for model, tp, mb, flash, sp in _combinations(req):
        job = probe_job(model, tp, mb, req.precision, flash, sp)
        problems = job_problems(job)
        if problems:
            skipped.append(f"{model.name} tp={tp}: {problems[0]}")
            continue
        ops, count = _graph_ops(job)
        total += count + 1  # + the optimizer step
        graphs += 1
        adam = stage_param_counts(job)[0]
        ops.append(optimizer_op(min(adam, req.max_adam_params), job))
        for op in ops:
            if op.profile_key not in seen:
                seen[op.profile_key] = op
                hints[op.profile_key] = row_hint(op, job)
    if not graphs:
        raise ConfigError("no valid (model, tp) combination to profile: "
                          + "; ".join(dict.fromkeys(skipped)))
    ladder_job = probe_job(resolve_model(req.models[0]), 1, 1, req.precision, False, False)
    for n in ADAM_LADDER:
        if n <= req.max_adam_params:
            op = optimizer_op(n, ladder_job)
            seen.setdefault(op.profile_key, op)
    return Selection(tuple(seen.values()), hints, total, graphs, tuple(dict.fromkeys(skipped)))
