"""Job -> operator graph of one micro-batch: its distinct transformer layers, the embedding and
the head.

Identical layers are costed once: the graph holds one `Block` per kind of layer and a pipeline
chunk's cost is `sum over kinds of layers of that kind * the kind's cost`. A dense GPT/Llama job
has one kind (`JobGraph.layer`); a mixture-of-experts model with dense first layers, or GPT-OSS's
alternating sliding-window layers, has a few (simulator.job.layer_pattern), and multi-token
prediction adds one block per depth on the last chunk (simulator.graph.mtp); a low-precision run
that keeps its first and last layers in bf16 has their 16-bit kinds too. The blocks come from
the layer modules of this package (dense with its attention and MLP halves, mla, moe/,
context_parallel, embedding, head; eager for the PyTorch autocast stack) and are memoized per
model, training and non-layout plan; the stage split and the p2p size are the layout's own. What
differs between training stacks comes from `simulator.job.framework`. FSDP's per-layer
collectives (simulator.graph.fsdp) join the layer blocks; CUDA graphs (`training.cuda_graphs`)
capture the layers, or with `full_iteration` every block.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simulator.graph import eager as graph_eager
from simulator.graph.dense import build_layer
from simulator.graph.embedding import build_embedding
from simulator.graph.fsdp import fsdp_comm, sharding_ranks
from simulator.graph.head import build_head
from simulator.graph.mtp import build_mtp
from simulator.graph.ops import Block
from simulator.graph.primitives import FP32, layer_context, shape_context
from simulator.job.enums import CudaGraphs, DataParallelSharding, Recompute
from simulator.job.framework import semantics
from simulator.job.layer_pattern import LayerKind, chunk_kind_counts, mtp_kind
from simulator.job.partition import chunk_layers
from simulator.job.precision import low_precision
from simulator.job.specs import Job
from simulator.memo import Memo


@dataclass(frozen=True)
class JobGraph:
    layer: Block  # the first kind of layer (all of a dense job's layers)
    embedding: Block
    head: Block
    chunk_layers: np.ndarray  # (pp, v) transformer layers of each stage's model chunks
    p2p_bytes: float  # activation (or its gradient) sent between stages per micro-batch per GPU
    # further kinds of layer blocks (other layer kinds, then the MTP depth) and (k, pp, v) how
    # many of each of `layer_blocks` every chunk runs; None: every layer is `layer`
    other_layers: tuple[Block, ...] = ()
    counts: np.ndarray | None = None
    labels: tuple[str, ...] = ("layer",)  # a name per layer block, `layer` first

    @property
    def layers_per_chunk(self) -> int:
        """Layers of the fullest chunk (every chunk's, when the split is even)."""
        return int(self.chunk_layers.max())

    @property
    def layer_blocks(self) -> tuple[Block, ...]:
        """Every distinct layer block, `layer` first."""
        return (self.layer, *self.other_layers)

    @property
    def layer_counts(self) -> np.ndarray:
        """(k, pp, v) blocks of each of `layer_blocks` that every chunk runs."""
        return self.chunk_layers[None] if self.counts is None else self.counts


def p2p_bytes(job: Job) -> float:
    """The activation sent between pipeline stages per micro-batch: Megatron-Core sends the full
    [s, b, h] tensor, split along the sequence only under sequence parallelism
    (`pipeline_parallel/schedules.py::get_tensor_shapes`); stacks with the older scatter-gather
    optimization send 1/tp of it (simulator.job.framework)."""
    c = shape_context(job)
    split = c.sp or c.fw.p2p_scatter_gather
    return c.tokens * c.h * c.dt / (c.t if split else 1)


# Parallel-plan fields the blocks never read: every layout that differs only in these shares
# its blocks (a new ParallelPlan field is part of the key unless added here).
LAYOUT_ONLY = frozenset({"pp", "dp", "virtual_stages", "schedule", "distributed_optimizer",
                         "overlap_grad_reduce", "bucket_size_mb", "first_stage_layers",
                         "last_stage_layers"})

# Per blocks_key: the layer blocks (one per kind, then the MTP depth), the embedding and head,
# and a label per layer block.
GraphBlocks = tuple[tuple[Block, ...], Block, Block, tuple[str, ...]]
BLOCKS: Memo[GraphBlocks] = Memo(maxsize=512)


def blocks_key(job: Job) -> tuple[object, ...]:
    """What the layer, embedding and head blocks depend on: the whole model and training
    configs, the parallel plan's non-layout fields, whether the pipeline has one stage (a tied
    embedding's gradients are then summed on it), and for the eager stack the number of
    micro-batches (its gradient accumulation kernels run from the second one on). A
    low-precision run adds its format (the GPU generation decides it) and the micro-batches (the
    weight casts are spread over them; its bf16 layers follow from the model and training
    configs); FSDP whether dp > 1.
    tests/simulator_tests/test_caches.py checks that layouts sharing a key share their blocks."""
    par = job.parallel
    kept = tuple(v for k, v in par.__dict__.items() if k not in LAYOUT_ONLY)
    eager = semantics(job.training.framework).eager_autocast
    key: tuple[object, ...] = (job.model, job.training, kept, par.pp == 1,
                               job.num_microbatches if eager else 0)
    low = low_precision(job)
    if low is not None:
        key += (low, job.num_microbatches)
    if job.sharding.level >= DataParallelSharding.OPTIM_GRADS.level:
        key += (sharding_ranks(job) > 1,)
    return key


def build_graph(job: Job) -> JobGraph:
    """The job's graph. Its blocks are memoized under `blocks_key` (layouts of one model, tp and
    micro-batch share them); the stage split, the layers of each kind per chunk and the p2p size
    are the layout's own."""
    layers, emb, head, labels = BLOCKS.get(blocks_key(job), lambda: build_all_blocks(job))
    per_chunk = chunk_layers(job)
    if len(layers) == 1:
        return JobGraph(layers[0], emb, head, per_chunk, p2p_bytes(job))
    _, counts = chunk_kind_counts(job)
    if job.model.mtp_num_layers:
        mtp = np.zeros((1, *per_chunk.shape), dtype=np.int64)
        mtp[0, -1, -1] = job.model.mtp_num_layers
        counts = np.concatenate([counts, mtp])
    return JobGraph(layers[0], emb, head, per_chunk, p2p_bytes(job), layers[1:], counts, labels)


def build_blocks(job: Job) -> tuple[Block, Block, Block]:
    """The first layer block, the embedding and the head of one micro-batch (not memoized)."""
    layers, emb, head, _ = build_all_blocks(job)
    return layers[0], emb, head


def build_all_blocks(job: Job) -> GraphBlocks:
    """Every layer block (one per kind of layer, then one MTP depth), the embedding and the head
    of one micro-batch (not memoized), each carrying the host dispatch cost per launch of the
    stack that runs it (simulator.job.framework) and whether a CUDA graph replays it."""
    fw = semantics(job.training.framework)
    cost = fw.host_launch_cost
    if fw.eager_autocast:
        layer, emb, head = (replace(b, host_cost=cost) for b in _eager_blocks(job))
        return (layer,), emb, head, ("layer",)
    kinds, _ = chunk_kind_counts(job)
    layers = [_layer(job, kind) for kind in kinds]
    emb, head = build_embedding(job), build_head(job)
    labels = [kind.label for kind in kinds] if len(kinds) > 1 else ["layer"]
    if job.model.mtp_num_layers:
        kind = mtp_kind(job)
        ref = layers[kinds.index(kind)] if kind in kinds else _layer(job, kind)
        layers.append(build_mtp(job, emb, ref, head))
        labels.append("mtp")
    graphs = job.training.cuda_graphs
    whole = graphs is CudaGraphs.FULL_ITERATION
    emb, head = (replace(b, host_cost=cost, graph_captured=whole) for b in (emb, head))
    return (tuple(replace(b, host_cost=cost, graph_captured=whole or graphs is CudaGraphs.PER_LAYER)
                  for b in layers), emb, head, tuple(labels))


def _layer(job: Job, kind: LayerKind) -> Block:
    """A layer of `kind` with FSDP's per-layer collectives, if any."""
    block = build_layer(job, kind)
    fwd, bwd = fsdp_comm(job, layer_context(job, kind.high_precision))
    if not (fwd or bwd):
        return block
    return replace(block, forward_comm=block.forward_comm + fwd,
                   backward_comm=block.backward_comm + bwd)


def _eager_blocks(job: Job) -> tuple[Block, Block, Block]:
    """The eager PyTorch / autocast stack (simulator.graph.eager); tp = 1, no collectives.
    Full recompute (`torch.utils.checkpoint`) keeps each layer's fp32 input and re-runs the
    layer's forward, weight casts included."""
    layer, emb, head = graph_eager.eager_layer(job), graph_eager.eager_embedding(job), \
        graph_eager.eager_head(job)
    T, h = job.training.micro_batch_size * job.model.seq_length, job.model.hidden_size
    if job.training.recompute is Recompute.FULL:
        block = Block(layer.fwd, layer.bwd, layer.fwd, (), (), (), FP32 * T * h, layer.saved_bytes)
    else:
        block = Block(layer.fwd, layer.bwd, (), (), (), (), layer.saved_bytes, 0.0)
    return (block, Block(emb.fwd, emb.bwd, (), (), (), (), emb.saved_bytes, 0.0),
            Block(head.block.fwd, head.block.bwd, (), (), (), (), head.block.saved_bytes,
                  head.backward_transient_bytes, head.forward_transient_bytes))


__all__ = ["BLOCKS", "JobGraph", "blocks_key", "build_all_blocks", "build_blocks", "build_graph",
           "p2p_bytes"]
