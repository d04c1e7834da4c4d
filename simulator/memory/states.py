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

from simulator.graph.fsdp import sharding_ranks
from simulator.graph.params import (
    final_norm_params,
    kind_params,
    layer_params,
    linear_weight_params,
    optimizer_shards,
    padded_vocab,
    position_params,
    stage_expert_param_counts,
    stage_quantized_linear_counts,
)
from simulator.job.enums import DataParallelSharding, Precision
from simulator.job.framework import semantics
from simulator.job.layer_pattern import layer_kinds, stage_kind_counts
from simulator.job.param_bytes import param_bytes
from simulator.job.partition import stage_layers
from simulator.job.precision import LowPrecisionFormat, low_precision
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
    return param_bytes(job).per_param(shard)


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
    """Each stage's model states (see `ModelStates`) of a job without experts (those:
    simulator.memory.parallel_terms). The distributed optimizer and the FSDP units shard over
    dp x cp ranks (simulator.graph.params.optimizer_shards, simulator.graph.fsdp.sharding_ranks).
    FSDP units are the transformer layers (simulator.graph.fsdp): the embedding and output layer
    stay whole. Megatron-FSDP holds at most two units unsharded at a time (the one computing and
    the one prefetched; its double buffer, `docs/user-guide/features/megatron_fsdp.md`): their
    parameters under ZeRO-3 and their gradients, before the reduce-scatter, under ZeRO-2 and
    ZeRO-3.

    Low precision: Transformer Engine keeps each quantized weight for the iteration
    (`is_first_microbatch`): one copy per usage it needs (Hopper's FP8 transpose, MXFP8's and
    NVFP4's columnwise copy) with its scales (`quantized_weights`). With `fp8_param_gather` the
    linear weights ARE the quantized tensors, with no 16-bit copy (Megatron: "keep the compute
    param in fp8"). Under ZeRO-3 cached copies exist only for the units in flight, and quantized
    parameters are sharded like the others."""
    pb = param_bytes(job)
    n, layers = stage_param_counts(job), stage_layers(job)
    shard, ranks = optimizer_shards(job)[0], sharding_ranks(job)
    level = job.sharding.level if ranks > 1 else 0
    zero2 = level >= DataParallelSharding.OPTIM_GRADS.level
    zero3 = level == DataParallelSharding.OPTIM_GRADS_PARAMS.level
    per_layer = layer_params(job.model).per_rank(job.parallel.tp)
    units, in_flight = layers * per_layer, np.minimum(layers, FSDP_UNITS_IN_FLIGHT) * per_layer
    q = quantized_weights(job)
    d = ranks if zero3 else 1
    # (the plain product when nothing is sharded or quantized: the same floats as before)
    weights = pb.weights * ((n - units) + (units - q.held_dense) / d) if zero3 or q.as_params \
        else pb.weights * n
    lowp = q.bytes_per_param * q.dense
    if zero3:
        lowp = lowp / d if q.as_params else q.bytes_per_param * q.per_layer * np.minimum(
            q.low_layers, FSDP_UNITS_IN_FLIGHT)
    grads = pb.gradients * (n - units + units / ranks) if zero2 else pb.gradients * n
    fsdp = pb.gradients * in_flight if zero2 else np.zeros_like(n)
    if zero3:
        gathered = pb.weights * in_flight
        if q.as_params:  # the units' linear weights travel and sit quantized
            gathered = gathered - np.minimum(layers, FSDP_UNITS_IN_FLIGHT) * q.per_layer * (
                pb.weights - q.bytes_per_param)
        fsdp = fsdp + gathered
    return ModelStates(weights, lowp, grads, pb.main_gradients * n / shard,
                       (pb.master_weights + pb.optimizer_states) * n / shard, fsdp)


@dataclass(frozen=True)
class QuantizedWeights:
    """The linear weights a low-precision recipe quantizes, per GPU of each stage ((pp,) arrays;
    zeros for a 16-bit job): simulator.graph.params.stage_quantized_linear_counts."""

    dense: np.ndarray  # non-expert linear weights of the low-precision layers (and MTP)
    experts: np.ndarray  # routed experts' fc1 and fc2
    bytes_per_param: float  # of the cached copies: data and scales of each usage's copy
    as_params: bool  # fp8_param_gather: they are the parameters (no 16-bit copy)
    low_layers: np.ndarray  # low-precision layers per stage
    per_layer: float  # one dense layer's quantized linear weights (FSDP's unit)

    @property
    def held_dense(self) -> np.ndarray | float:
        """Non-expert parameters held quantized instead of in 16 bits."""
        return self.dense if self.as_params else 0.0

    @property
    def held_experts(self) -> np.ndarray | float:
        return self.experts if self.as_params else 0.0


def quantized_weights(job: Job) -> QuantizedWeights:
    dense, experts = stage_quantized_linear_counts(job)
    fmt: LowPrecisionFormat | None = low_precision(job)
    kinds, per_stage = stage_kind_counts(job)
    low = sum((c for kind, c in zip(kinds, per_stage, strict=True) if not kind.high_precision),
              np.zeros(job.parallel.pp))
    return QuantizedWeights(
        dense, experts, fmt.bytes_per_element * fmt.copies if fmt else 0.0,
        bool(fmt) and job.training.fp8_param_gather, low if fmt else np.zeros(job.parallel.pp),
        linear_weight_params(job.model).dense.per_rank(job.parallel.tp))


def stage_param_counts(job: Job) -> np.ndarray:
    """Parameters held by one GPU of each pipeline stage: its layers' tp shard plus, on the first
    stage, the word embedding's shard and the replicated position embedding, on the last the
    replicated final norm and the output layer's shard (or, with more than one stage, the tied
    word embedding's copy); with mixture of experts also the stage's routed experts held by this
    GPU (`stage_expert_param_counts`), with multi-token prediction its modules and the embedding
    table's copy on the last stage."""
    p, tp, m = job.parallel.pp, job.parallel.tp, job.model
    pad = semantics(job.training.framework).pads_vocab
    table = padded_vocab(m, tp, pad) * m.hidden_size / tp
    if m.is_moe or m.mtp_num_layers:
        counts = _dense_layer_counts(job) + stage_expert_param_counts(job)
    else:
        counts = stage_layers(job) * layer_params(m).per_rank(tp)
    counts[0] += table + position_params(m)
    counts[-1] += final_norm_params(m)
    if not m.tied_embeddings or p > 1:  # an untied output layer, or the tied table's copy
        counts[-1] += table
    if m.mtp_num_layers and p > 1:  # MTP embeds its input with the model's table
        counts[-1] += table
    return counts


def _dense_layer_counts(job: Job) -> np.ndarray:
    """(pp,) the non-expert parameters of each stage's layers per GPU (split over tp or
    replicated), MTP modules included on the last stage."""
    m, tp = job.model, job.parallel.tp
    kinds, per_stage = stage_kind_counts(job)
    counts = np.zeros(job.parallel.pp)
    for kind, n in zip(kinds, per_stage, strict=True):
        counts = counts + n * kind_params(m, kind).dense.per_rank(tp)
    if m.mtp_num_layers:
        last = kind_params(m, layer_kinds(m)[-1])
        h = m.hidden_size
        own = last.dense.per_rank(tp) + 2 * h * h / tp + 3 * final_norm_params(m)
        counts[-1] += m.mtp_num_layers * own
    return counts
