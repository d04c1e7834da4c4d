"""Model states per GPU: bytes per parameter of weights, gradients and optimizer states under the
job's framework (simulator.job.framework: Megatron-LM, Megatron-DeepSpeed / ZeRO, PyTorch AMP),
sharded over dp as the job's `data_parallel_sharding` says (ZeRO-1 the optimizer states, ZeRO-2
also the gradients, ZeRO-3 also the weights: Megatron-FSDP); the quantized weight copies of a
low-precision recipe; and the parameters one GPU of each pipeline stage holds. A new precision's
weight copies or a new sharding of the states changes these terms, not the activation moments
(simulator.memory.stages).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.graph.params import (
    final_norm_params,
    layer_params,
    linear_weight_params,
    padded_vocab,
    position_params,
)
from simulator.job.enums import DataParallelSharding, Precision
from simulator.job.framework import semantics
from simulator.job.partition import stage_layers
from simulator.job.precision import high_precision_layers, low_precision
from simulator.job.specs import Job

FSDP_UNITS_IN_FLIGHT = 2  # the unit computing and the one prefetched (Megatron-FSDP's double buffer)

BF16 = 2


# Megatron-DeepSpeed's accounting, kept for callers that want a lower bound on Megatron stacks'
# static memory (2 + these bytes per parameter); `static_bytes_per_param` is the exact one.
OPTIMIZER_BYTES_PER_PARAM = 12  # fp32 master weights, Adam momentum and variance


def grad_bytes_per_param(precision: Precision) -> int:
    return 4 if precision.base is Precision.BF16 else 2


def static_bytes_per_param(job: Job) -> float:
    """Bytes per parameter of weights, gradients and optimizer states under the job's framework
    (simulator.job.framework), the sharded part split over dp with the distributed optimizer."""
    shard = job.dp if job.shards_optimizer else 1
    return semantics(job.training.framework).param_bytes(job.training.precision).per_param(shard)


@dataclass(frozen=True)
class ModelStates:
    """(pp,) bytes one GPU of each stage holds for the model's states, by role."""

    weights: np.ndarray  # 16-bit weights (a ZeRO-3 shard of the layers')
    low_precision_weights: np.ndarray  # quantized weight copies (or quantized parameters)
    gradients: np.ndarray  # gradient buffers (a ZeRO-2/3 shard of the layers')
    main_gradients: np.ndarray  # fp32 copies of 16-bit gradients for the step (sharded, ZeRO-1+)
    optimizer_states: np.ndarray  # fp32 master weights and Adam moments (sharded, ZeRO-1+)
    fsdp_unsharded: np.ndarray  # whole parameters / gradients of the FSDP units in flight


def model_states(job: Job) -> ModelStates:
    """Each stage's model states (see `ModelStates`). FSDP units are the transformer layers
    (simulator.graph.fsdp): the embedding and output layer stay whole. Megatron-FSDP holds at
    most two units unsharded at a time (the one computing and the one prefetched; its double
    buffer, `docs/user-guide/features/megatron_fsdp.md`): their parameters under ZeRO-3 and
    their gradients, before the reduce-scatter, under ZeRO-2 and ZeRO-3.

    Low precision: Transformer Engine keeps each quantized weight for the iteration
    (`is_first_microbatch`): one copy per usage it needs (Hopper's FP8 transpose, MXFP8's and
    NVFP4's columnwise copy) with its scales. With `fp8_param_gather` the linear weights ARE the
    quantized tensors, with no 16-bit copy (Megatron: "keep the compute param in fp8"). Under
    ZeRO-3 cached copies exist only for the units in flight, and quantized parameters are
    sharded like the others."""
    pb = semantics(job.training.framework).param_bytes(job.training.precision)
    n, layers = stage_param_counts(job), stage_layers(job)
    shard = job.dp if job.shards_optimizer else 1
    level = job.sharding.level if job.dp > 1 else 0
    zero2 = level >= DataParallelSharding.OPTIM_GRADS.level
    zero3 = level == DataParallelSharding.OPTIM_GRADS_PARAMS.level
    per_layer = layer_params(job.model).per_rank(job.parallel.tp)
    units, in_flight = layers * per_layer, np.minimum(layers, FSDP_UNITS_IN_FLIGHT) * per_layer
    fmt = low_precision(job)
    linear = linear_weight_params(job.model) / job.parallel.tp
    low_layers = layers - high_precision_layers(job).sum(axis=1) if fmt else np.zeros_like(n)
    quantized = linear * (fmt.bytes_per_element * fmt.copies if fmt else 0.0)
    as_params = bool(fmt) and job.training.fp8_param_gather
    held_16 = low_layers * linear if as_params else 0.0  # linear weights held quantized instead
    d = job.dp if zero3 else 1
    # (the plain product when nothing is sharded or quantized: the same floats as before)
    weights = pb.weights * ((n - units) + (units - held_16) / d) if zero3 or as_params \
        else pb.weights * n
    if as_params:
        lowp = quantized * low_layers / d
    else:
        lowp = quantized * (np.minimum(low_layers, FSDP_UNITS_IN_FLIGHT) if zero3 else low_layers)
    grads = pb.gradients * (n - units + units / job.dp) if zero2 else pb.gradients * n
    fsdp = pb.gradients * in_flight if zero2 else np.zeros_like(n)
    if zero3:
        gathered = pb.weights * in_flight
        if as_params:  # the units' linear weights travel and sit quantized
            gathered = gathered - np.minimum(layers, FSDP_UNITS_IN_FLIGHT) * linear * (
                pb.weights - quantized / linear)
        fsdp = fsdp + gathered
    return ModelStates(weights, lowp, grads, pb.main_gradients * n / shard,
                       (pb.master_weights + pb.optimizer_states) * n / shard, fsdp)


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
