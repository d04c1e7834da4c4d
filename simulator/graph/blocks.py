"""Job -> operator graph of one micro-batch: one transformer layer, the embedding and the head.

Every transformer layer of a job is identical, so the graph holds one `Block` per kind and the
schedule repeats it; a pipeline chunk's cost is `layers * layer cost` (identical layers are costed
once). The blocks come from the layer modules of this package (dense, embedding, head; eager
for the PyTorch autocast stack) and are memoized per model, training and non-layout plan; the
stage split and the p2p size are the layout's own. What differs between training stacks comes from
`simulator.job.framework`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simulator.graph import eager as graph_eager
from simulator.graph.dense import build_layer
from simulator.graph.embedding import build_embedding
from simulator.graph.fsdp import fsdp_comm
from simulator.graph.head import build_head
from simulator.graph.ops import Block
from simulator.graph.primitives import FP32, ShapeContext, shape_context
from simulator.job.enums import CudaGraphs, DataParallelSharding, Recompute
from simulator.job.framework import semantics
from simulator.job.partition import chunk_layers
from simulator.job.precision import high_precision_layers, low_precision
from simulator.job.specs import Job
from simulator.memo import Memo


@dataclass(frozen=True)
class JobGraph:
    layer: Block
    embedding: Block
    head: Block
    chunk_layers: np.ndarray  # (pp, v) transformer layers of each stage's model chunks
    p2p_bytes: float  # activation (or its gradient) sent between stages per micro-batch per GPU
    # a low-precision run's 16-bit layers (`first_last_layers_bf16`): their block and how many
    # of each chunk's layers they are (None: every layer is `layer`)
    high_layer: Block | None = None
    high_layers: np.ndarray | None = None

    @property
    def layers_per_chunk(self) -> int:
        """Layers of the fullest chunk (every chunk's, when the split is even)."""
        return int(self.chunk_layers.max())


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

BLOCKS: Memo[tuple[Block, Block, Block, Block | None]] = Memo(maxsize=512)


def blocks_key(job: Job) -> tuple[object, ...]:
    """What the layer, embedding and head blocks depend on: the whole model and training
    configs, the parallel plan's non-layout fields, whether the pipeline has one stage (a tied
    embedding's gradients are then summed on it), and for the eager stack the number of
    micro-batches (its gradient accumulation kernels run from the second one on). A
    low-precision run adds its format (the GPU generation decides it), the micro-batches (the
    weight casts are spread over them) and the bf16 layers' presence; FSDP whether dp > 1.
    tests/simulator_tests/test_caches.py checks that layouts sharing a key share their blocks."""
    par = job.parallel
    kept = tuple(v for k, v in par.__dict__.items() if k not in LAYOUT_ONLY)
    eager = semantics(job.training.framework).eager_autocast
    key: tuple[object, ...] = (job.model, job.training, kept, par.pp == 1,
                               job.num_microbatches if eager else 0)
    low = low_precision(job)
    if low is not None:
        key += (low, job.num_microbatches, bool(high_precision_layers(job).any()))
    if job.sharding.level >= DataParallelSharding.OPTIM_GRADS.level:
        key += (job.dp > 1,)
    return key


def build_graph(job: Job) -> JobGraph:
    """The job's graph. Its blocks are memoized under `blocks_key` (layouts of one model, tp and
    micro-batch share them); the stage split and p2p size are the layout's own."""
    layer, emb, head, high = BLOCKS.get(blocks_key(job), lambda: build_blocks(job))
    if high is None:
        return JobGraph(layer, emb, head, chunk_layers(job), p2p_bytes(job))
    return JobGraph(layer, emb, head, chunk_layers(job), p2p_bytes(job), high,
                    high_precision_layers(job))


def build_blocks(job: Job) -> tuple[Block, Block, Block, Block | None]:
    """The layer, embedding and head blocks of one micro-batch (not memoized), each carrying the
    host dispatch cost per launch of the stack that runs it (simulator.job.framework), and the
    16-bit layer of a low-precision run that keeps its first / last layers in bf16 (else None).
    FSDP's per-layer collectives (simulator.graph.fsdp) join the layer blocks; CUDA graphs
    (`training.cuda_graphs`) capture the layers, or with `full_iteration` every block."""
    fw = semantics(job.training.framework)
    high: Block | None = None
    if fw.eager_autocast:
        blocks: tuple[Block, ...] = _eager_blocks(job)
    else:
        c = shape_context(job)
        layer = _with_fsdp(job, build_layer(job, c), c, low=True)
        blocks = (layer, build_embedding(job), build_head(job))
        if c.low is not None and high_precision_layers(job).any():
            c16 = replace(c, low=None, quantized_params=False, fp8_attention=False)
            high = _with_fsdp(job, build_layer(job, c16), c, low=False)
    cost = fw.host_launch_cost
    graphs = job.training.cuda_graphs
    captured = (graphs is CudaGraphs.PER_LAYER, graphs is CudaGraphs.FULL_ITERATION,
                graphs is CudaGraphs.FULL_ITERATION)
    layer, emb, head = (replace(b, host_cost=cost, graph_captured=g)
                        for b, g in zip(blocks, (captured[0] or captured[1], *captured[1:]),
                                        strict=True))
    if high is not None:
        high = replace(high, host_cost=cost, graph_captured=layer.graph_captured)
    return layer, emb, head, high


def _with_fsdp(job: Job, layer: Block, c: ShapeContext, low: bool) -> Block:
    fwd, bwd = fsdp_comm(job, c, low)
    if not (fwd or bwd):
        return layer
    return replace(layer, forward_comm=layer.forward_comm + fwd,
                   backward_comm=layer.backward_comm + bwd)


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


__all__ = ["BLOCKS", "JobGraph", "blocks_key", "build_blocks", "build_graph", "p2p_bytes"]
