"""Memory per pipeline stage per GPU at the moment of its peak, term by term.

Static terms follow the framework's bytes per parameter (simulator.job.framework: Megatron-LM,
Megatron-DeepSpeed / ZeRO, PyTorch AMP), the sharded ones split over dp as the job's sharding
says (ZeRO-1/2/3, simulator.memory.states), with a low-precision recipe's quantized weight
copies and FSDP's unsharded units as terms of their own. Activations: per-micro-batch saved
bytes of each chunk from the graph (Korthikanti et al. 2022 for Megatron; autograd's saved
tensors for eager PyTorch) times the micro-batches in flight, taken from the stage's actual
schedule order.

The peak is a moment, not a sum of maxima. Three moments are evaluated per stage and the largest
is reported with its name:
- `forward`: the most micro-batches in flight (end of the warm-up forwards for 1F1B), and on the
  last stage the loss's logits temporaries (16-bit logits alive while their fp32 copy is made);
  eager autocast also holds every bf16 weight copy (autocast's cache) at that point;
- `backward`: the same activations plus the larger of one layer's backward working set (its
  recomputed activations) and, on the last stage, the loss backward's temporaries (eager
  PyTorch: two fp32 logits-sized gradients);
- `optimizer`: after the last backward: all gradients, the fp32 copies of 16-bit main
  gradients Megatron-LM makes for its step, and (eager) the embedding table's dense gradient
  being added to the accumulated one.
Eager PyTorch allocates gradients on the first backward of an iteration (`zero_grad(
set_to_none=True)`): they are absent from the first micro-batch's moments, so a job with one
micro-batch peaks without them. What `torch.cuda.max_memory_allocated` reports is
`allocated_bytes`: these terms plus the cuBLAS/cuBLASLt workspaces PyTorch allocates through its
caching allocator. The allocator reserves more than it hands out (block rounding, segments it
cannot split or return): `allocator_reserved_bytes` = allocated x (1 + ALLOCATOR_OVERHEAD), what
`torch.cuda.max_memory_reserved` shows when memory is plentiful. Near the capacity the allocator
frees its cache and retries before failing, so what must fit is the allocated peak plus the
CUDA context and communication buffers of the hardware file (`total_bytes`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from simulator.graph import eager as graph_eager
from simulator.graph.blocks import JobGraph
from simulator.graph.params import optimizer_shards
from simulator.job.enums import Recompute
from simulator.job.framework import semantics
from simulator.job.param_bytes import param_bytes
from simulator.job.partition import stage_layers
from simulator.job.specs import GiB, Job
from simulator.memo import Memo, Pinned
from simulator.memory.global_buffer import global_buffer_bytes
from simulator.memory.parallel_terms import (
    ParallelTerms,
    chunk_moe_activation_bytes,
    expert_and_dense_counts,
    parallel_terms,
    uses_parallel_terms,
)
from simulator.memory.states import BF16, ModelStates, model_states, quantized_weights, stage_param_counts
from simulator.memory.te_dummy import dummy_wgrad_bytes
from simulator.timeline.engine import RoundPlan

# Measured with bench/measure_memory_terms.py on an H100 (PyTorch 2.11, fresh process per job,
# ten probe jobs that are not the validation rows): allocated at an iteration's start exceeded
# weights + optimizer states by 63-80 MiB (the cuBLAS and cuBLASLt workspaces), and
# max_memory_reserved exceeded max_memory_allocated by 3-18%, median 7%.
WORKSPACE_BYTES = 64 * 2**20
ALLOCATOR_OVERHEAD = 0.07


@dataclass(frozen=True)
class StageMemory:
    """Bytes held by one GPU of a stage at its peak moment, by what holds them."""

    weights_bytes: float
    gradients_bytes: float
    main_gradients_bytes: float  # fp32 copies of 16-bit gradients for the optimizer step
    optimizer_states_bytes: float  # fp32 master weights and Adam moments
    activations_bytes: float  # saved for the backward, every micro-batch in flight
    amp_weight_copies_bytes: float  # autocast's bf16 copies of fp32 weights
    loss_temporaries_bytes: float  # logits copies / gradients alive in the loss
    working_bytes: float  # one layer's recomputed activations during its backward
    embedding_gradient_bytes: float  # a dense table gradient being accumulated (eager)
    workspace_bytes: float  # cuBLAS workspaces
    context_bytes: float  # CUDA context and communication buffers (outside the allocator)
    moment: str  # forward | backward | optimizer
    # mixture of experts and context parallelism (simulator.memory.parallel_terms); the
    # weights, gradients, optimizer states and activations above are then the rest
    expert_weights_bytes: float = 0.0  # routed experts over ep x expert_tp
    expert_gradients_bytes: float = 0.0
    expert_optimizer_states_bytes: float = 0.0  # sharded over expert_dp
    moe_activations_bytes: float = 0.0  # routers, dispatched token copies, experts
    moe_dispatch_buffers_bytes: float = 0.0  # one layer's all-to-all buffers
    cp_kv_buffers_bytes: float = 0.0  # K/V received from other context-parallel ranks
    low_precision_weights_bytes: float = 0.0  # FP8/FP4 weight copies, transposes and scales
    fsdp_unsharded_bytes: float = 0.0  # whole parameters / gradients of the FSDP units in flight
    te_dummy_wgrads_bytes: float = 0.0  # TE's cached placeholder weight gradients (te_dummy)
    global_buffer_bytes: float = 0.0  # Megatron's all-gather buffer of the output layer's input

    @property
    def allocated_bytes(self) -> float:
        """What `torch.cuda.max_memory_allocated` measures."""
        return (self.weights_bytes + self.gradients_bytes + self.main_gradients_bytes
                + self.optimizer_states_bytes + self.activations_bytes
                + self.amp_weight_copies_bytes + self.loss_temporaries_bytes + self.working_bytes
                + self.embedding_gradient_bytes + self.workspace_bytes + self.expert_weights_bytes
                + self.expert_gradients_bytes + self.expert_optimizer_states_bytes
                + self.moe_activations_bytes + self.moe_dispatch_buffers_bytes
                + self.cp_kv_buffers_bytes + self.low_precision_weights_bytes
                + self.fsdp_unsharded_bytes + self.te_dummy_wgrads_bytes
                + self.global_buffer_bytes)

    @property
    def allocator_reserved_bytes(self) -> float:
        """What `torch.cuda.max_memory_reserved` measures."""
        return self.allocated_bytes * (1 + ALLOCATOR_OVERHEAD)

    @property
    def total_bytes(self) -> float:
        """What the device must hold at least: the allocated peak and the context. The
        allocator's extra reservation is not added: when a request cannot be met, PyTorch's
        caching allocator frees its cached blocks and retries before it raises out-of-memory."""
        return self.allocated_bytes + self.context_bytes

    @property
    def parameters_bytes(self) -> float:
        return self.weights_bytes

    def to_dict(self) -> dict[str, float | str]:
        """Every term (those of experts, context parallelism and TE's placeholders only when
        held)."""
        terms = {k: v for k, v in asdict(self).items() if v or k not in SHOWN_WHEN_HELD}
        return {**terms, "allocated_bytes": self.allocated_bytes,
                "allocator_reserved_bytes": self.allocator_reserved_bytes,
                "total_bytes": self.total_bytes, "parameters_bytes": self.parameters_bytes}


SHOWN_WHEN_HELD = frozenset({"expert_weights_bytes", "expert_gradients_bytes",
                             "expert_optimizer_states_bytes", "moe_activations_bytes",
                             "moe_dispatch_buffers_bytes", "cp_kv_buffers_bytes",
                             "te_dummy_wgrads_bytes", "global_buffer_bytes"})


def chunk_activation_bytes(job: Job, graph: JobGraph) -> np.ndarray:
    """(p, v) activation bytes one micro-batch leaves saved on each stage chunk."""
    p, v = job.parallel.pp, job.parallel.virtual_stages
    if graph.other_layers:
        per_block = np.array([b.saved_bytes for b in graph.layer_blocks])
        act = np.tensordot(per_block, graph.layer_counts.astype(float), axes=1)
    else:
        act = graph.chunk_layers * graph.layer.saved_bytes
    act[0, 0] += graph.embedding.saved_bytes
    act[p - 1, v - 1] += graph.head.saved_bytes
    return act


def _deltas(plan: RoundPlan, act: np.ndarray, m: int) -> np.ndarray:
    p, v = act.shape
    sign, chunk = ORDER_SIGNS.get(Pinned(plan), lambda: _order_signs(plan, p, v, m))
    # +-1 times a byte count is exact: the same deltas as selecting act or -act per op
    return sign * (act[:, :1] if v == 1 else act[np.arange(p)[:, None], chunk])


def in_flight_peak(plan: RoundPlan, act: np.ndarray, m: int) -> np.ndarray:
    """(p,) peak of saved activations over each stage's schedule order (F adds, B frees)."""
    return np.cumsum(_deltas(plan, act, m), axis=1).max(axis=1)


def in_flight_part(plan: RoundPlan, act: np.ndarray, part: np.ndarray, m: int) -> np.ndarray:
    """(p,) how much of `part` (a share of `act`) is held at each stage's peak of `act`."""
    total = np.cumsum(_deltas(plan, act, m), axis=1)
    mine = np.cumsum(_deltas(plan, part, m), axis=1)
    return mine[np.arange(act.shape[0]), total.argmax(axis=1)]


# Per round plan (cached by `engine.round_plan`, so keyed by identity): see `_order_signs`.
ORDER_SIGNS: Memo[tuple[np.ndarray, np.ndarray]] = Memo(maxsize=256)


def _order_signs(plan: RoundPlan, p: int, v: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """+1 for a forward, -1 for a backward, and the model chunk, of each op in stage order (a
    function of the cached plan only)."""
    orders = plan.orders
    backward = orders // (v * p * m)
    return np.where(backward == 0, 1.0, -1.0), orders // (p * m) % v


@dataclass(frozen=True)
class _Moments:
    """(p,) arrays of the terms that differ between the moments of each stage."""

    static: dict[str, np.ndarray]  # weights, optimizer states, quantized weights, FSDP units
    grads_in_flight: np.ndarray  # gradients present while micro-batches are in flight
    grads_all: np.ndarray
    main: np.ndarray
    act: np.ndarray
    amp_forward: np.ndarray
    amp_saved: np.ndarray
    head_forward: np.ndarray
    head_backward: np.ndarray
    working: np.ndarray
    table_grad: np.ndarray
    extra: ParallelTerms | None = None  # experts and context parallelism
    moe_act: np.ndarray | None = None  # the MoE part of `act`
    head_held: np.ndarray | None = None  # the head's saved bytes in `act`, one micro-batch's at most


def _moments(job: Job, graph: JobGraph, plan: RoundPlan) -> _Moments:
    if uses_parallel_terms(job):
        return _parallel_moments(job, graph, plan)
    p = job.parallel.pp
    fw = semantics(job.training.framework)
    pb = param_bytes(job)
    states = model_states(job)
    grads = states.gradients
    # eager: allocated by the first backward of the iteration; DDP's buckets are allocated once
    later = (job.num_microbatches > 1) + (job.dp > 1)
    in_flight = grads if fw.persistent_grad_buffer else grads * later
    last = np.arange(p) == p - 1
    layers = stage_layers(job)
    amp_forward = amp_saved = table_grad = np.zeros(p)
    if fw.eager_autocast:
        per_layer, head = graph_eager.amp_cast_params(job)
        amp_forward = BF16 * (layers * per_layer + last * head)
        full = job.training.recompute is Recompute.FULL  # checkpointed layers drop their copies
        amp_saved = amp_forward - (BF16 * layers * per_layer if full else 0.0)
        tied = job.model.tied_embeddings
        table_grad = (np.arange(p) == 0) * pb.gradients * job.model.vocab_size \
            * job.model.hidden_size * (2 if tied else 1)
    return _Moments(
        static={"weights_bytes": states.weights, "optimizer_states_bytes": states.optimizer_states,
                "low_precision_weights_bytes": states.low_precision_weights,
                "fsdp_unsharded_bytes": states.fsdp_unsharded,
                "te_dummy_wgrads_bytes": dummy_wgrad_bytes(job),
                "global_buffer_bytes": global_buffer_bytes(job)},
        grads_in_flight=in_flight, grads_all=grads * (1 + (not fw.persistent_grad_buffer
                                                          and job.dp > 1)),
        main=states.main_gradients,
        act=in_flight_peak(plan, chunk_activation_bytes(job, graph), job.num_microbatches),
        amp_forward=amp_forward, amp_saved=amp_saved,
        head_forward=last * graph.head.forward_transient_bytes,
        head_backward=last * graph.head.working_bytes,
        working=_working(graph, layers), table_grad=table_grad)


def _working(graph: JobGraph, layers: np.ndarray) -> np.ndarray:
    """(p,) the largest backward working set among the layer blocks each stage runs."""
    if not graph.other_layers:
        return (layers > 0) * graph.layer.working_bytes
    present = graph.layer_counts.sum(axis=2) > 0
    return (np.array([b.working_bytes for b in graph.layer_blocks])[:, None] * present).max(axis=0)


def _parallel_moments(job: Job, graph: JobGraph, plan: RoundPlan) -> _Moments:
    """`_moments` of a Megatron-LM job with experts or context parallelism: the dense states
    sharded over dp x cp, the experts' apart (simulator.memory.parallel_terms); a low-precision
    recipe's quantized copies of both (with `fp8_param_gather` instead of their 16-bit
    weights). Under FSDP (dense models only: validation refuses it with experts or MTP) the
    states are `model_states`', sharded over dp x cp."""
    p = job.parallel.pp
    pb = param_bytes(job)
    n, _ = expert_and_dense_counts(job, stage_param_counts(job))
    shard, _ = optimizer_shards(job)
    q = quantized_weights(job)
    extra = parallel_terms(job, graph, q.held_experts)
    act_chunks = chunk_activation_bytes(job, graph)
    m = job.num_microbatches
    last = np.arange(p) == p - 1
    working = _working(graph, stage_layers(job))
    zero = np.zeros(p)
    weights = pb.weights * (n - q.held_dense) if q.as_params else pb.weights * n
    states = model_states(job) if job.shards_gradients else ModelStates(
        weights, q.bytes_per_param * (q.dense + q.experts), pb.gradients * n,
        pb.main_gradients * n / shard, (pb.master_weights + pb.optimizer_states) * n / shard, zero)
    return _Moments(
        static={"weights_bytes": states.weights,
                "optimizer_states_bytes": states.optimizer_states,
                "low_precision_weights_bytes": states.low_precision_weights,
                "fsdp_unsharded_bytes": states.fsdp_unsharded,
                "te_dummy_wgrads_bytes": dummy_wgrad_bytes(job),
                "global_buffer_bytes": global_buffer_bytes(job)},
        grads_in_flight=states.gradients, grads_all=states.gradients,
        main=states.main_gradients + extra.expert_main_gradients,
        act=in_flight_peak(plan, act_chunks, m), amp_forward=zero, amp_saved=zero,
        head_forward=last * graph.head.forward_transient_bytes,
        head_backward=last * graph.head.working_bytes, working=working, table_grad=zero,
        extra=extra,
        moe_act=in_flight_part(plan, act_chunks, chunk_moe_activation_bytes(job, graph), m),
        head_held=_head_held(job, graph, plan, act_chunks))


def _head_held(job: Job, graph: JobGraph, plan: RoundPlan, act_chunks: np.ndarray) -> np.ndarray:
    """(p,) what the output block's saved tensors add to each stage's activation peak, at most one
    micro-batch's: a layer's transient buffers are freed before the head's forward of its
    micro-batch and allocated again only after the head's backward freed them."""
    head = np.zeros_like(act_chunks)
    head[-1, -1] = graph.head.saved_bytes
    held = in_flight_part(plan, act_chunks, head, job.num_microbatches)
    return np.minimum(held, graph.head.saved_bytes)


def stage_memory(job: Job, graph: JobGraph, plan: RoundPlan) -> list[StageMemory]:
    """Each stage's memory at its peak moment (see the module docstring)."""
    return list(stage_memory_table(job, graph, plan).stages)


@dataclass(frozen=True)
class MemoryTable:
    """Each stage's `StageMemory` and, as (p,) arrays, their `allocated_bytes` and
    `total_bytes` (the same sums in the same order, so the same floats)."""

    stages: tuple[StageMemory, ...]
    allocated_bytes: np.ndarray
    total_bytes: np.ndarray


def stage_memory_table(job: Job, graph: JobGraph, plan: RoundPlan) -> MemoryTable:
    """`stage_memory` with the per-stage sums computed for all stages at once."""
    mo = _moments(job, graph, plan)
    if mo.extra is not None:
        return _parallel_table(job, mo)
    p = job.parallel.pp
    zero = np.zeros(p)
    candidates = {
        "forward": dict(gradients_bytes=mo.grads_in_flight, activations_bytes=mo.act,
                        amp_weight_copies_bytes=mo.amp_forward,
                        loss_temporaries_bytes=mo.head_forward),
        "backward": dict(gradients_bytes=mo.grads_in_flight, activations_bytes=mo.act,
                         amp_weight_copies_bytes=mo.amp_saved,
                         loss_temporaries_bytes=np.where(mo.head_backward > mo.working,
                                                         mo.head_backward, 0.0),
                         working_bytes=np.where(mo.head_backward > mo.working, 0.0, mo.working)),
        "optimizer": dict(gradients_bytes=mo.grads_all, main_gradients_bytes=mo.main,
                          embedding_gradient_bytes=mo.table_grad),
    }
    keys = ("gradients_bytes", "main_gradients_bytes", "activations_bytes",
            "amp_weight_copies_bytes", "loss_temporaries_bytes", "working_bytes",
            "embedding_gradient_bytes")
    names = tuple(candidates)
    # (moment, term, stage) and the moment each stage peaks at; built once, not per stage
    terms = np.array([[c.get(k, zero) for k in keys]
                      for c in candidates.values()])
    peak = terms.sum(axis=1).argmax(axis=0)
    chosen = terms[peak, :, np.arange(p)]  # (stage, term)
    weights = mo.static["weights_bytes"]
    states = mo.static["optimizer_states_bytes"]
    lowp, fsdp = mo.static["low_precision_weights_bytes"], mo.static["fsdp_unsharded_bytes"]
    context = job.hardware.reserved_memory_GiB * GiB
    t = chosen.T  # gradients, main gradients, activations, amp, loss, working, embedding
    # StageMemory.allocated_bytes / total_bytes, term by term in their order
    dummy = mo.static["te_dummy_wgrads_bytes"]
    allocated = weights + t[0] + t[1] + states + t[2] + t[3] + t[4] + t[5] + t[6] + WORKSPACE_BYTES
    if lowp.any() or fsdp.any():
        allocated = allocated + lowp + fsdp
    if dummy.any():
        allocated = allocated + dummy
    buffer = mo.static["global_buffer_bytes"]
    if buffer.any():
        allocated = allocated + buffer
    moments = [names[i] for i in peak.tolist()]
    stages = tuple(
        StageMemory(ws, g, mg, st, a, amp, loss, w, emb, WORKSPACE_BYTES, context, moment,
                    low_precision_weights_bytes=lp, fsdp_unsharded_bytes=fs,
                    te_dummy_wgrads_bytes=dw, global_buffer_bytes=gb)
        for ws, st, (g, mg, a, amp, loss, w, emb), moment, lp, fs, dw, gb
        in zip(weights.tolist(), states.tolist(), chosen.tolist(), moments, lowp.tolist(),
               fsdp.tolist(), dummy.tolist(), buffer.tolist(), strict=True))
    return MemoryTable(stages, allocated, allocated + context)


def _parallel_table(job: Job, mo: _Moments) -> MemoryTable:
    """`stage_memory_table` with the terms of experts and context parallelism."""
    assert mo.extra is not None and mo.moe_act is not None
    x = mo.extra
    p = job.parallel.pp
    zero = np.zeros(p)
    # one layer's transient communication buffer: the larger of the two kinds
    dispatch = np.where(x.dispatch_buffers >= x.kv_buffers, x.dispatch_buffers, 0.0)
    kv = np.where(x.dispatch_buffers >= x.kv_buffers, 0.0, x.kv_buffers)
    assert mo.head_held is not None
    dense_act = mo.act - mo.moe_act
    in_flight = dict(gradients_bytes=mo.grads_in_flight, expert_gradients_bytes=x.expert_gradients,
                     moe_activations_bytes=mo.moe_act)
    # While a layer runs (its communication buffers, its recomputed activations) the stage does
    # not hold its micro-batch's output-block tensors: the head's forward comes after the last
    # layer's, and its backward frees them before the last layer's backward (`_head_held`).
    in_layer = dict(in_flight, activations_bytes=dense_act - mo.head_held,
                    moe_dispatch_buffers_bytes=dispatch, cp_kv_buffers_bytes=kv)
    candidates = (
        ("forward", dict(in_flight, activations_bytes=dense_act,
                         loss_temporaries_bytes=mo.head_forward)),
        ("forward", in_layer),
        ("backward", dict(in_flight, activations_bytes=dense_act,
                          loss_temporaries_bytes=mo.head_backward)),
        ("backward", dict(in_layer, working_bytes=mo.working)),
        ("optimizer", dict(gradients_bytes=mo.grads_all, main_gradients_bytes=mo.main,
                           expert_gradients_bytes=x.expert_gradients)),
    )
    keys = ("gradients_bytes", "main_gradients_bytes", "activations_bytes",
            "loss_temporaries_bytes", "working_bytes", "expert_gradients_bytes",
            "moe_activations_bytes", "moe_dispatch_buffers_bytes", "cp_kv_buffers_bytes")
    terms = np.array([[c.get(k, zero) for k in keys] for _, c in candidates])
    peak = terms.sum(axis=1).argmax(axis=0)
    chosen = terms[peak, :, np.arange(p)]  # (stage, term)
    names = tuple(name for name, _ in candidates)
    context = job.hardware.reserved_memory_GiB * GiB
    stages = []
    for i in range(p):
        g, mg, a, loss, w, eg, ma, db, kb = chosen[i].tolist()
        stages.append(StageMemory(
            float(mo.static["weights_bytes"][i]), g, mg,
            float(mo.static["optimizer_states_bytes"][i]), a, 0.0, loss, w, 0.0, WORKSPACE_BYTES,
            context, names[int(peak[i])], float(x.expert_weights[i]), eg,
            float(x.expert_optimizer_states[i]), ma, db, kb,
            low_precision_weights_bytes=float(mo.static["low_precision_weights_bytes"][i]),
            fsdp_unsharded_bytes=float(mo.static["fsdp_unsharded_bytes"][i]),
            te_dummy_wgrads_bytes=float(mo.static["te_dummy_wgrads_bytes"][i]),
            global_buffer_bytes=float(mo.static["global_buffer_bytes"][i])))
    allocated = np.array([s.allocated_bytes for s in stages])
    return MemoryTable(tuple(stages), allocated, allocated + context)
