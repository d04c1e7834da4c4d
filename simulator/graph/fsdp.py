"""Megatron-FSDP's collectives of a transformer layer (its FSDP unit) for one micro-batch.

Megatron-LM's default FSDP units are the transformer layers (`distributed/fsdp/
mcore_fsdp_adapter.py`: `fsdp_unit_modules = [TransformerLayer, ...]` for every strategy but
`no_shard`); the embedding and the output layer are not units (their parameters stay whole and
their gradients are reduced after the last backward, simulator.timeline.tail). Per unit and
micro-batch (`docs/user-guide/features/megatron_fsdp.md`, "Data-Parallel Sharding
Strategies" and "FSDP Module Hooks"):
- `optim_grads` (ZeRO-2): the unit's gradients are reduce-scattered after its backward, every
  micro-batch, overlapped with the backward of the next unit;
- `optim_grads_params` (ZeRO-3): also, its parameters are all-gathered before its forward and
  again before its backward (they are resharded after the forward; with recomputation the
  backward's gather serves the recomputed forward too), prefetched while the previous unit
  computes.
Each runs on its own stream beside the compute (`OVERLAP_BLOCK`): per layer only what outlasts
the layer's compute of that direction is exposed. Parameters travel in their compute dtype
(quantized with `fp8_param_gather`: the quantized copies each pass needs), gradients in the
framework's gradient dtype. The units shard over the data-parallel group with context
parallelism, dp x cp ranks (`sharding_ranks`; `mcore_fsdp_adapter._init_dist_index` takes
`get_data_parallel_group(with_context_parallel=True)`, the distributed optimizer's group), and
their collectives run over its placement (simulator.network.groups.data_parallel_placement).
Modelled for dense layers (validation refuses FSDP with experts or MTP). The distributed
optimizer's all-gather after its step (ZeRO-1/2, and the non-unit parameters under ZeRO-3)
moves quantized bytes with `fp8_param_gather`: `param_gather_bytes`.
"""

from __future__ import annotations

import numpy as np

from simulator.graph.ops import OVERLAP_BLOCK, CommGroup, CommOp
from simulator.graph.params import layer_params, linear_weight_params, stage_quantized_linear_counts
from simulator.graph.primitives import ShapeContext
from simulator.job.enums import CollectiveKind, DataParallelSharding
from simulator.job.partition import stage_layers
from simulator.job.precision import low_precision
from simulator.job.specs import Job

AG, RS = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER


def sharding_ranks(job: Job) -> int:
    """Ranks the FSDP units shard over: dp x cp (the data-parallel group with context
    parallelism)."""
    return job.dp * job.parallel.cp


def shards_units(job: Job) -> bool:
    """ZeRO-2/3 over more than one rank: the layers' collectives are part of their blocks."""
    return sharding_ranks(job) > 1 and job.sharding.level >= DataParallelSharding.OPTIM_GRADS.level


def _op(name: str, kind: CollectiveKind, nbytes: float) -> CommOp:
    return CommOp(name, kind, nbytes, CommGroup.DP, OVERLAP_BLOCK)


def gathered_param_bytes(job: Job, c: ShapeContext) -> float:
    """Bytes of one layer's parameters on one tp rank as FSDP all-gathers them for one pass:
    16-bit, or with quantized parameters the linear weights in the recipe's format (one copy per
    pass: the rowwise one before the forward, the columnwise one before the backward)."""
    params = layer_params(job.model).per_rank(job.parallel.tp)
    if not (c.quantized_params and c.low is not None):
        return params * c.dt
    linear = linear_weight_params(job.model).dense.per_rank(job.parallel.tp)
    return (params - linear) * c.dt + linear * c.low.bytes_per_element


def fsdp_comm(job: Job, c: ShapeContext) -> tuple[tuple[CommOp, ...], tuple[CommOp, ...]]:
    """Forward and backward collectives of one layer (shape context `c`: the job's, or a 16-bit
    layer's) under the job's sharding."""
    sharding = job.sharding
    if not shards_units(job):
        return (), ()
    grads = layer_params(job.model).per_rank(job.parallel.tp) * c.grad_bytes
    backward = (_op("fsdp.grad_reduce_scatter", RS, grads),)
    if sharding is not DataParallelSharding.OPTIM_GRADS_PARAMS:
        return (), backward
    params = gathered_param_bytes(job, c)
    return ((_op("fsdp.param_all_gather", AG, params),),
            (_op("fsdp.param_all_gather_bwd", AG, params), *backward))


def _units(job: Job) -> np.ndarray:
    """(pp,) parameters of the FSDP units (the transformer layers) one GPU of each stage holds."""
    return stage_layers(job) * float(layer_params(job.model).per_rank(job.parallel.tp))


def tail_reduced_params(job: Job, params_per_stage: np.ndarray) -> np.ndarray:
    """(pp,) parameters whose gradients are reduced after the last backward: all of them, or
    under ZeRO-2/3 only those outside the FSDP units (the units' are reduce-scattered per
    layer in the backward)."""
    if shards_units(job):
        return params_per_stage - _units(job)
    return params_per_stage


def gathered_after_step_bytes(job: Job, params_per_stage: np.ndarray, weight_bytes: int
                              ) -> np.ndarray:
    """(pp,) bytes the sharded optimizer all-gathers after its step: every updated parameter
    (ZeRO-1/2), or under ZeRO-3 those outside the units (the units' are gathered by the next
    forward, per layer); see `param_gather_bytes`."""
    if job.sharding is DataParallelSharding.OPTIM_GRADS_PARAMS:
        return (params_per_stage - _units(job)) * weight_bytes
    dense, experts = stage_quantized_linear_counts(job)
    return param_gather_bytes(job, params_per_stage, dense + experts, weight_bytes)


def param_gather_bytes(job: Job, params: np.ndarray, quantized: np.ndarray, weight_bytes: int
                       ) -> np.ndarray:
    """Bytes of the distributed optimizer's all-gather of `params` updated parameters, of which
    `quantized` are linear weights the recipe quantizes: with `fp8_param_gather` these travel in
    their format (the rowwise data, and the columnwise copy of a block format, which cannot be
    transposed), the rest in 16 bits."""
    fmt = low_precision(job)
    if fmt is None or not job.training.fp8_param_gather:
        return params * weight_bytes
    copies = 1 if fmt.transposes else fmt.copies
    return (params - quantized) * weight_bytes + quantized * fmt.bytes_per_element * copies
