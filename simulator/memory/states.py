"""Model states per GPU: bytes per parameter of weights, gradients and optimizer states under the
job's framework (simulator.job.framework: Megatron-LM, Megatron-DeepSpeed / ZeRO, PyTorch AMP),
the sharded part split over dp by the distributed optimizer (ZeRO-1); and the parameters one GPU
of each pipeline stage holds. A new precision's weight copies or a new sharding of the states
changes these terms, not the activation moments (simulator.memory.stages).
"""

from __future__ import annotations

import numpy as np

from simulator.graph.params import final_norm_params, layer_params, padded_vocab, position_params
from simulator.job.enums import Precision
from simulator.job.framework import semantics
from simulator.job.partition import stage_layers
from simulator.job.specs import Job

BF16 = 2


# Megatron-DeepSpeed's accounting, kept for callers that want a lower bound on Megatron stacks'
# static memory (2 + these bytes per parameter); `static_bytes_per_param` is the exact one.
OPTIMIZER_BYTES_PER_PARAM = 12  # fp32 master weights, Adam momentum and variance


def grad_bytes_per_param(precision: Precision) -> int:
    return 4 if precision.base is Precision.BF16 else 2


def static_bytes_per_param(job: Job) -> float:
    """Bytes per parameter of weights, gradients and optimizer states under the job's framework
    (simulator.job.framework), the sharded part split over dp with the distributed optimizer."""
    shard = job.dp if job.parallel.distributed_optimizer else 1
    return semantics(job.training.framework).param_bytes(job.training.precision).per_param(shard)


def stage_param_counts(job: Job) -> np.ndarray:
    """Parameters held by one GPU of each pipeline stage: its layers' tp shard plus, on the first
    stage, the word embedding's shard and the replicated position embedding, on the last the
    replicated final norm and the output layer's shard (or, with more than one stage, the tied
    word embedding's copy)."""
    p, tp, m = job.parallel.pp, job.parallel.tp, job.model
    pad = semantics(job.training.framework).pads_vocab
    table = padded_vocab(m, tp, pad) * m.hidden_size / tp
    counts = stage_layers(job) * layer_params(m).per_rank(tp)
    counts[0] += table + position_params(m)
    counts[-1] += final_norm_params(m)
    if not m.tied_embeddings or p > 1:  # an untied output layer, or the tied table's copy
        counts[-1] += table
    return counts
