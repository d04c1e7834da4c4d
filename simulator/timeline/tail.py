"""After the pipeline: data-parallel gradient reduction, embedding sync, optimizer step.

Without overlap, each stage reduces its gradients once its last backward is done (all-reduce, or
reduce-scatter with the distributed optimizer), in the framework's gradient dtype. With overlap,
gradients are reduced in buckets as the last micro-batch's backward produces them (PyTorch DDP /
Megatron bucketing): bucket i of a chunk is ready at fraction (i+1)/n of that chunk's last
backward, the buckets go through one communication stream, and only what outlasts the pipeline
is exposed; where the pipeline's gradient sends cross the network too, the two share the NICs
(`nic_share_left_by_p2p`). Then tied-embedding gradients are all-reduced between the first and
last stage; with sequence parallelism the gradients of the parameters every tp rank holds whole (norms,
row-parallel biases) are all-reduced over tp (Megatron's
`finalize_model_grads::_allreduce_non_tensor_model_parallel_grads`, counted as tp
communication); the optimizer all-reduces its gradient statistics (norm for clipping, fp16
overflow flag: one fp32 scalar each) over the model-parallel ranks and runs the Adam step over
the local (sharded, with ZeRO-1) parameters; ZeRO-1 then all-gathers the updated parameters,
unless the next iteration's forwards wait for them (`--overlap-param-gather`,
simulator.timeline.param_gather).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from simulator.costs.analytic import KernelModel
from simulator.graph.blocks import p2p_bytes
from simulator.graph.eager import optimizer_launches
from simulator.graph.fsdp import gathered_after_step_bytes, tail_reduced_params
from simulator.graph.ops import FRAMEWORK_STEP, Op, OpKind, Phase
from simulator.graph.params import final_norm_params, kind_params, padded_vocab
from simulator.job.buckets import bucket_count, bucketed_chunks
from simulator.job.enums import CollectiveKind, Norm, Precision
from simulator.job.framework import semantics
from simulator.job.layer_pattern import stage_kind_counts
from simulator.job.param_bytes import param_bytes
from simulator.job.partition import stage_layers
from simulator.job.specs import Job
from simulator.network.collectives import NetworkModel
from simulator.network.topology import (
    dp_placement,
    embedding_placement,
    grad_stats_placement,
    pp_placement,
    tp_placement,
)
from simulator.timeline import grad_sync
from simulator.timeline.contention import compute_slowdown, overlapped_s
from simulator.timeline.engine import Timeline

ADAM_BYTES_PER_PARAM = 36  # read grad + master/m/v, write master/m/v + fp16 copy, grad-norm read
ADAMW_FP32_BYTES_PER_PARAM = 28  # read param, grad, m, v; write param, m, v


@dataclass(frozen=True)
class Tail:
    """(p,) seconds per stage after its pipeline phase."""

    dp_exposed_s: np.ndarray
    embedding_sync_s: np.ndarray
    sp_grad_sync_s: np.ndarray  # tp all-reduce of sequence-parallel parameters' gradients
    optimizer_s: np.ndarray  # gradient-statistics all-reduces and the Adam step
    dp_comm_s: np.ndarray  # total dp communication of the tail (exposed or hidden), for the trace

    @property
    def total_s(self) -> np.ndarray:
        return self.dp_exposed_s + self.embedding_sync_s + self.sp_grad_sync_s + self.optimizer_s


def optimizer_op(params: float, job: Job) -> Op:
    """The Adam step over `params` local parameters. With fp32 parameters (PyTorch AMP) the
    fused AdamW reads parameter, gradient and moments and writes parameter and moments (28 bytes
    per parameter) in multi-tensor launches (graph_eager.optimizer_launches)."""
    n = int(params)
    if semantics(job.training.framework).fp32_parameters:
        launches = optimizer_launches(n, 12 * job.model.num_layers + 6)
        return Op("adamw_fused", OpKind.OPTIMIZER, Phase.STEP, (n,), 4, 10.0 * n,
                  ADAMW_FP32_BYTES_PER_PARAM * n, kernels=launches)
    return Op("adam", OpKind.OPTIMIZER, Phase.STEP, (n,), 4, 10.0 * n, ADAM_BYTES_PER_PARAM * n)


def grad_buffer_op(params: float, job: Job) -> Op | None:
    """The passes over one GPU's whole gradient buffer (`params` local parameters, dense and
    expert, before any sharding) that the framework makes each iteration besides the optimizer
    step (Megatron-Core's DDP: zeroing it and the per-bucket NaN-check norm,
    simulator.job.framework), memory-bound; None where it makes none. Megatron-FSDP's sharded
    gradient buffers (ZeRO-2/3) are not modelled here."""
    passes = semantics(job.training.framework).grad_buffer_passes
    if not passes or params <= 0 or job.shards_gradients:
        return None
    element = param_bytes(job).gradients
    return Op("grad_buffer_passes", OpKind.ELEMENTWISE, Phase.STEP, (int(params),), element, 0.0,
              passes * element * params, variant=FRAMEWORK_STEP, kernels=passes)


def grad_buffer_s(job: Job, params_per_stage: np.ndarray, kernels: KernelModel) -> np.ndarray:
    """(p,) seconds of `grad_buffer_op` on each stage."""
    def seconds(n: float) -> float:
        op = grad_buffer_op(n, job)
        return 0.0 if op is None else kernels.cost(op).seconds
    return per_value(params_per_stage, seconds)


def per_value(values: np.ndarray, fn: Callable[[float], float]) -> np.ndarray:
    """`fn` of each value, evaluated once per distinct value (the middle stages of a pipeline
    hold the same parameters, so their collectives and optimizer steps take the same time)."""
    seen: dict[float, float] = {}
    out = []
    for x in values.tolist():
        y = seen.get(x)
        if y is None:
            y = seen[x] = fn(x)
        out.append(y)
    return np.array(out, dtype=float)


@dataclass(frozen=True)
class FixedTail:
    """The tail's terms that do not depend on the pipeline's timeline (all of it, unless the
    gradient reduction overlaps the last backwards)."""

    dp_exposed_s: np.ndarray
    dp_comm_s: np.ndarray
    gather_s: np.ndarray | None  # ZeRO-1's parameter all-gather (distributed optimizer)
    embedding_sync_s: np.ndarray
    sp_grad_sync_s: np.ndarray
    optimizer_s: np.ndarray


def compute_tail(job: Job, timeline: Timeline, params_per_stage: np.ndarray,
                 kernels: KernelModel, network: NetworkModel,
                 fixed: FixedTail | None = None) -> Tail:
    """The tail of every stage. `fixed`: `fixed_tail` of the same job and models, when the
    caller has it (simulate memoizes it per job and models)."""
    if fixed is None:
        fixed = fixed_tail(job, params_per_stage, kernels, network)
    exposed, dp_total = fixed.dp_exposed_s, fixed.dp_comm_s
    # with --overlap-param-gather the next iteration's forwards wait for the gather instead
    # (simulator.timeline.param_gather; validation requires the overlapped reduction)
    gather = None if job.parallel.overlap_param_gather else fixed.gather_s
    if uses_parallel_groups(job):
        if job.parallel.overlap_grad_reduce:
            exposed, dp_total = _overlapped_parallel(job, timeline, params_per_stage, network)
            if gather is not None:
                exposed, dp_total = exposed + gather, dp_total + gather
    elif job.dp > 1 and job.parallel.overlap_grad_reduce:
        kind = (CollectiveKind.REDUCE_SCATTER if job.shards_optimizer
                else CollectiveKind.ALL_REDUCE)
        pb = param_bytes(job)
        reduced = tail_reduced_params(job, params_per_stage)
        exposed, dp_total = _overlapped(job, timeline, reduced * pb.gradients, kind, network)
        if gather is not None:
            exposed, dp_total = exposed + gather, dp_total + gather
    return Tail(exposed, fixed.embedding_sync_s, fixed.sp_grad_sync_s, fixed.optimizer_s,
                dp_total)


def uses_parallel_groups(job: Job) -> bool:
    """Experts or context parallelism: gradients reduce over their own groups (grad_sync)."""
    return job.model.is_moe or job.parallel.cp > 1


def _fixed_parallel(job: Job, params_per_stage: np.ndarray, kernels: KernelModel,
                    network: NetworkModel) -> FixedTail:
    """`fixed_tail` with dense gradients over dp x cp and experts' over expert_dp."""
    reduce, gather = grad_sync.reduction_s(job, params_per_stage, network)
    overlap = job.parallel.overlap_grad_reduce
    gather_s = gather if job.shards_optimizer else None
    total = (np.zeros(job.parallel.pp) if overlap else reduce) + gather
    optimizer = per_value(grad_sync.optimizer_params(job, params_per_stage),
                          lambda n: kernels.cost(optimizer_op(n, job)).seconds)
    optimizer = optimizer + grad_buffer_s(job, params_per_stage, kernels)
    return FixedTail(total.copy(), total, gather_s, _embedding_sync(job, network),
                     _sp_grad_sync(job, network), optimizer + _grad_stats_s(job, network))


def _overlapped_parallel(job: Job, timeline: Timeline, params: np.ndarray,
                         network: NetworkModel) -> tuple[np.ndarray, np.ndarray]:
    """Bucketed reduction overlapped with the last backwards: `_overlapped` with each bucket
    carrying its share of the stage's dense and expert gradients over their groups."""
    pb = param_bytes(job)
    kind = (CollectiveKind.REDUCE_SCATTER if job.shards_optimizer
            else CollectiveKind.ALL_REDUCE)

    def bucket_s(stage: int, pieces: int) -> float:
        """One bucket of `stage`: 1/pieces of its dense and of its expert gradients."""
        share = np.zeros(job.parallel.pp)
        share[stage] = params[stage]
        return float(grad_sync.reduction_s(job, share, network, 1.0 / pieces)[0][stage])

    return _overlapped(job, timeline, params * pb.gradients, kind, network, bucket_s)


def fixed_tail(job: Job, params_per_stage: np.ndarray, kernels: KernelModel,
               network: NetworkModel) -> FixedTail:
    if uses_parallel_groups(job):
        return _fixed_parallel(job, params_per_stage, kernels, network)
    p = job.parallel.pp
    pb = param_bytes(job)
    grad_bytes = tail_reduced_params(job, params_per_stage) * pb.gradients
    dp_total = np.zeros(p)
    exposed = np.zeros(p)
    gather = None
    if job.dp > 1:
        where = dp_placement(job)
        kind = (CollectiveKind.REDUCE_SCATTER if job.shards_optimizer
                else CollectiveKind.ALL_REDUCE)
        if not job.parallel.overlap_grad_reduce:  # else: compute_tail, from the timeline
            dp_total = per_value(grad_bytes, lambda b: network.time(kind, b, where))
            exposed = dp_total.copy()
        if job.shards_optimizer:
            gathered = gathered_after_step_bytes(job, params_per_stage, pb.weights)
            gather = per_value(gathered, lambda b: network.time(CollectiveKind.ALL_GATHER, b, where))
            if not job.parallel.overlap_grad_reduce:
                exposed = exposed + gather
                dp_total = dp_total + gather
    shard = job.dp if job.shards_optimizer else 1
    optimizer = per_value(params_per_stage,
                          lambda n: kernels.cost(optimizer_op(n / shard, job)).seconds)
    optimizer = optimizer + grad_buffer_s(job, params_per_stage, kernels)
    return FixedTail(exposed, dp_total, gather, _embedding_sync(job, network),
                     _sp_grad_sync(job, network), optimizer + _grad_stats_s(job, network))


def sp_parameters(job: Job) -> np.ndarray:
    """(pp,) parameters per stage whose gradients sequence parallelism leaves partial on each tp
    rank: norm weights (and biases) and the row-parallel linears' biases of every layer, and the
    final norm (Megatron sets `sequence_parallel` on exactly these)."""
    m = job.model
    if m.is_moe or m.multi_latent_attention or m.qk_layernorm or m.mtp_num_layers:
        # every parameter replicated on the tp ranks: also routers, MLA's down projections
        kinds, per_stage = stage_kind_counts(job)
        counts = sum((n * float(kind_params(m, kind).dense.replicated)
                      for kind, n in zip(kinds, per_stage, strict=True)), np.zeros(job.parallel.pp))
        counts[-1] += final_norm_params(m)
        return counts
    norm = m.hidden_size * (2 if m.norm is Norm.LAYERNORM else 1)
    per_layer = 2 * norm + (2 * m.hidden_size if m.use_bias else 0)
    counts = stage_layers(job) * float(per_layer)
    counts[-1] += final_norm_params(m)
    return counts


def _sp_grad_sync(job: Job, network: NetworkModel) -> np.ndarray:
    if not (job.parallel.sequence_parallel and job.parallel.tp > 1):
        return np.zeros(job.parallel.pp)
    gb = param_bytes(job).gradients
    where = tp_placement(job)
    return per_value(sp_parameters(job),
                     lambda n: network.time(CollectiveKind.ALL_REDUCE, n * gb, where))


def grad_stats_all_reduces(job: Job) -> int:
    """fp32 scalar all-reduces of the optimizer step: the gradient norm, and the overflow flag of
    fp16 loss scaling (none when the framework needs none)."""
    if not semantics(job.training.framework).grad_stats_all_reduce:
        return 0
    return 2 if job.training.precision is Precision.FP16 else 1


def _grad_stats_s(job: Job, network: NetworkModel) -> float:
    where = grad_stats_placement(job)
    return sum(network.time(CollectiveKind.ALL_REDUCE, 4.0, where)
               for _ in range(grad_stats_all_reduces(job)))


def _embedding_sync(job: Job, network: NetworkModel) -> np.ndarray:
    p, m, tp = job.parallel.pp, job.model, job.parallel.tp
    sync = np.zeros(p)
    if p > 1 and (m.tied_embeddings or m.mtp_num_layers):  # MTP embeds with the same table
        fw = semantics(job.training.framework)
        gb = param_bytes(job).gradients
        nbytes = padded_vocab(m, tp, fw.pads_vocab) * m.hidden_size / tp * gb
        t = network.time(CollectiveKind.ALL_REDUCE, nbytes, embedding_placement(job))
        sync[0] = sync[-1] = t
    return sync


def nic_share_left_by_p2p(job: Job, timeline: Timeline, network: NetworkModel) -> np.ndarray:
    """(p,) the share of each stage's NIC bandwidth that the pipeline's gradient sends leave the
    data-parallel reduction overlapped with the backward pass, when both cross the network: the
    two flows split the NIC max-min fairly, so the reduction keeps 1 - u of it for a p2p
    utilization u (a backward chunk's send time over its duration), and at least half."""
    p = job.parallel.pp
    share = np.ones(p)
    if p == 1 or not dp_placement(job).crosses_domains:
        return share
    plan = timeline.plan
    bwd = plan.backward == 1
    count = np.bincount(plan.stage[bwd], minlength=p)
    duration = np.bincount(plan.stage[bwd], weights=timeline.duration[bwd], minlength=p)
    nbytes = p2p_bytes(job)
    for s in range(p):
        where = pp_placement(job, (s - 1) % p)  # a stage sends its input gradients backwards
        if where.crosses_domains and duration[s] > 0:
            u = network.time(CollectiveKind.SEND_RECV, nbytes, where) * count[s] / duration[s]
            share[s] = max(0.5, 1.0 - u)
    return share


def _overlapped(job: Job, timeline: Timeline, grad_bytes: np.ndarray, kind: CollectiveKind,
                network: NetworkModel, bucket_s: Callable[[int, int], float] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    plan = timeline.plan
    p, v = job.parallel.pp, job.parallel.virtual_stages
    bwd = plan.backward == 1
    last_end = np.zeros((p, v))
    np.maximum.at(last_end, (plan.stage[bwd], plan.chunk[bwd]), timeline.end[bwd])
    last_dur = np.zeros((p, v))
    key = plan.stage[bwd] * v + plan.chunk[bwd]
    ends = timeline.end[bwd]
    order = np.lexsort((ends, key))  # last op of each (stage, chunk) is the last of its key group
    last = order[np.r_[np.flatnonzero(np.diff(key[order])), key.size - 1]]
    last_dur.flat[key[last]] = timeline.duration[bwd][last]
    chunk_bytes = np.repeat(grad_bytes[:, None] / v, v, axis=1)
    # bucketed chunks send nb buckets as their last backward produces them; the others one
    # collective of the whole chunk when it ends (simulator.job.buckets)
    bucketed = bucketed_chunks(job)
    nb = bucket_count(job, grad_bytes)
    if bucket_s is None:
        where = dp_placement(job)
        share = nic_share_left_by_p2p(job, timeline, network)
        unique: dict[tuple[float, float], float] = {}

        def seconds(nbytes: float, s: int) -> float:
            key = (nbytes, float(share[s]))
            if key not in unique:
                shared = replace(where, tier_factor=where.tier_factor * key[1])
                unique[key] = network.time(kind, nbytes, shared)
            return unique[key]

        bucket_time = np.array([[seconds(float(b) / (nb if bucketed[s, c] else 1), s)
                                 for c, b in enumerate(row)]
                                for s, row in enumerate(chunk_bytes.tolist())])  # (p, v)
    else:  # expert and context-parallel groups (simulator.timeline.grad_sync)
        bucket_time = np.array([[bucket_s(s, v * nb if bucketed[s, c] else v) for c in range(v)]
                                for s in range(p)])
    frac = (np.arange(nb) + 1) / nb
    start = (last_end - last_dur)[:, :, None]
    ready = np.where(bucketed[:, :, None], start + last_dur[:, :, None] * frac, last_end[:, :, None])
    first = np.arange(nb) == 0  # an unbucketed chunk: its one collective, then nothing
    times = np.where(bucketed[:, :, None], bucket_time[:, :, None],
                     np.where(first, bucket_time[:, :, None], 0.0)).reshape(p, -1)
    ready = ready.reshape(p, -1)
    idx = np.argsort(ready, axis=1)
    ready = np.take_along_axis(ready, idx, axis=1)
    times = np.take_along_axis(times, idx, axis=1)
    # one stream: bucket i ends at f_i = max_{j <= i}(ready_j + t_j + ... + t_i)
    sent = np.cumsum(times, axis=1)
    ends = sent + np.maximum.accumulate(ready - (sent - times), axis=1)
    # the buckets sent while the stage still computes slow that compute (SMs they hold)
    slower = compute_slowdown(job.hardware) * overlapped_s(ends - times, ends, timeline.stage_end)
    return np.maximum(slower, ends[:, -1] - timeline.stage_end).clip(0.0), times.sum(axis=1)
