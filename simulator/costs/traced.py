"""Phase costs from traces of the real training stack (a profile's trace tables) -> block costs.

vTrain's central idea (Bang et al., MICRO'24, Sec. 4) is that the profile comes from the real
framework: every kernel the stack launches, and what it costs, is in the table. A traced profile
(`simulator.costs.profile_format`, schema 2, written by ``python -m vtrain_ml.profile import-trace`` or
``trace``) holds, per traced shape, what one transformer layer's forward / recompute / backward,
the embedding, the head and loss and the optimizer step cost on the GPU (kernel time by kernel
class) and on the host. This module turns them into the simulator's `BlockCost`s for any job of
the same stack; `simulate` composes them over layers, micro-batches and pipeline stages with
its schedule, communication and memory models, exactly as it composes op costs.

Per phase of the job, the cost comes from:

1. **traced** -- a trace of exactly this per-rank shape (hidden, heads, query groups and FFN per
   tp rank, sequence, micro-batch, attention kernel): its measured means;
2. **scaled** -- the nearest traced shape of the same layer structure, moved to this shape per
   kernel class through the analytic model fitted to the traced kernels: a class's traced time
   times analytic(job) / analytic(traced shape) of the graph ops of that class that both graphs
   have (matched by op name); the share of ops only the traced structure has vanishes (e.g.
   flash attention for an unfused job), and ops only the job has cost analytic x the trace's
   measured/analytic ratio (bmm + fp32 softmax + dropout + bmm from a flash trace); kernels that
   read parameter-shaped tensors (autocast weight casts, gradient casts and accumulation) scale
   with the per-rank parameters; host time scales with the kernel count;
3. **analytic** -- nothing of this structure was traced: the op-level kernel model.

The host runs ahead of the GPU: on one pipeline stage the micro-batches' phases run through a
host/GPU timeline (`simulator.costs.host_timeline`; over a long window it is max(GPU time, host
time)); with pipeline parallelism a layer's forward (and its recompute + backward) is a window
of max(GPU, host) on its own, and the embedding and head are inside the window of the stage
chunk that holds them. GPU time is kernel time plus the trace's measured gap
between back-to-back kernels. Host time in a trace is inflated by the profiler (every recorded
op costs host time); without a measurement of the stack's own host time (`trace` records
``host_ratio`` = host time without / with the profiler) the ratio measured on a Megatron-
structured eager layer by ``bench/measure_profiler_overhead.py`` is used.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from simulator.costs.analytic import AnalyticKernelModel, CostSource, KernelModel, OpCost
from simulator.costs.blocks import BlockCost
from simulator.costs.host_timeline import Step, cycle_time
from simulator.costs.profile_format import Profile, TracePhase, read_profile
from simulator.costs.traced_host import DEFAULT_HOST_RATIO, deflation, host_scale
from simulator.costs.traced_shapes import (
    MATMUL_CLASSES,
    ClassSums,
    Instance,
    PhaseCost,
    Trace,
    analytic_by_class,
    block_params,
    load_traces,
    param_tensors,
    per_rank_shape,
    phase_ops,
    row_structure,
    split_cost,
    structure,
    traced_job,
)
from simulator.errors import ProfileError
from simulator.graph.blocks import JobGraph, build_graph
from simulator.graph.ops import FRAMEWORK_STEP, Op, OpKind
from simulator.job.enums import Recompute
from simulator.job.specs import Job

__all__ = ["DEFAULT_HOST_RATIO", "TracedCosts", "TracedKernelModel", "TracedOptions", "traced_costs"]

SOURCES = ("traced", "scaled", "analytic")


@dataclass(frozen=True)
class TracedOptions:
    """profiled_host: keep the trace's own (profiler-inflated) host times, to reproduce the
    profiled iteration itself; host_ratio: override the host time ratio for every trace."""

    profiled_host: bool = False
    host_ratio: float | None = None


class TracedCosts:
    """Phase costs of one job from a traced profile (see the module docstring)."""

    def __init__(self, profile: Profile, job: Job, options: TracedOptions | None = None,
                 fallback: KernelModel | None = None) -> None:
        self.job, self.options = job, options or TracedOptions()
        self.analytic = AnalyticKernelModel(job.hardware, job.training.precision.base)
        self.fallback = fallback or self.analytic
        traces = load_traces(profile)
        self.deflation = deflation([(t.row, _phases(t)) for t in traces])
        self._host_scales: dict[str, float] = {}
        self.graph = build_graph(job)
        self.candidates = [t for t in traces if row_structure(t.row) == structure(job)]
        self._ref_graphs: dict[str, tuple[Job, JobGraph]] = {}
        self.phases: dict[TracePhase, PhaseCost | None] = {
            p: self._phase(p) for p in TracePhase if p is not TracePhase.UNATTRIBUTED}

    # ---------------------------------------------------------------- choosing a traced shape
    def _nearest(self, phase: TracePhase) -> Trace | None:
        have = [t for t in self.candidates if phase in t.phases]
        if not have:
            return None
        target = per_rank_shape(self.job)
        m = self.job.model

        def distance(t: Trace) -> tuple[float, ...]:
            r = t.row
            tp = int(r["tp"])
            shape = (int(r["hidden"]), int(r["heads"]) // tp, int(r["query_groups"]) // tp,
                     int(r["ffn"]) // tp)
            tokens = math.log(int(r["micro_batch"]) * int(r["seq"]) / (
                self.job.training.micro_batch_size * m.seq_length))
            return (float(int(r["flash_attention"]) != target[7]),
                    sum(abs(math.log(a / b)) for a, b in zip(shape, target[:4], strict=True)),
                    abs(tokens), abs(math.log(int(r["seq"]) / m.seq_length)),
                    float(Recompute(r["recompute"]) is not self.job.training.recompute))
        return min(have, key=distance)

    def _ref(self, t: Trace) -> tuple[Job, JobGraph]:
        key = str(t.row["trace"])
        if key not in self._ref_graphs:
            job = traced_job(self.job, t.row)
            self._ref_graphs[key] = (job, build_graph(job))
        return self._ref_graphs[key]

    def _exact(self, t: Trace) -> bool:
        ref_job, _ = self._ref(t)
        return per_rank_shape(ref_job) == per_rank_shape(self.job)

    # ---------------------------------------------------------------- one phase
    def _phase(self, phase: TracePhase) -> PhaseCost | None:
        wanted = phase
        if phase is TracePhase.LAYER_RECOMPUTE and self.job.training.recompute is Recompute.NONE:
            return None
        t = self._nearest(phase)
        if t is None and phase is TracePhase.LAYER_RECOMPUTE:  # a recompute re-runs the forward
            wanted = TracePhase.LAYER_FORWARD
            t = self._nearest(wanted)
        if t is None:
            return None
        exact = self._exact(t) and wanted is phase
        if phase is TracePhase.OPTIMIZER:  # the step depends on the parameters, not the shape
            ref_job, _ = self._ref(t)
            exact = (block_params(ref_job, phase, int(t.row["layers"]))
                     == block_params(self.job, phase, _stage_layers(self.job)))
        if exact:
            row = t.phases[phase]
            gap = float(t.row["gpu_gap_s"])
            mean = Instance(float(row["kernel_s"]) + float(row["kernels"]) * gap,
                            self._host(t, row), float(row["kernels"]))
            first = None
            if _first_known(row):
                first = Instance(float(row["first_kernel_s"]) + float(row["first_kernels"]) * gap,
                                 self._host(t, {**row, "host_s": row["first_host_s"]}),
                                 float(row["first_kernels"]))
            return split_cost(mean, first, int(t.row["micro_batches"]),
                              self.job.num_microbatches, "traced")
        return self._scaled(t, wanted, phase)

    def _host(self, t: Trace, row: dict[str, Any]) -> float:
        """A phase instance's host time without the profiler (`simulator.costs.traced_host`): the
        traced one less the profiler's cost, times the trace's factor that reproduces its own
        unprofiled iteration; as traced with `profiled_host`."""
        host = float(row["host_s"])
        if self.options.profiled_host:
            return host
        if self.options.host_ratio is not None:
            return host * self.options.host_ratio
        return self.deflation.host(t.row, row) * self.host_scale(t)

    def host_scale(self, t: Trace) -> float:
        key = str(t.row["trace"])
        if key not in self._host_scales:
            self._host_scales[key] = host_scale(t.row, _phases(t),
                                                lambda r: self.deflation.host(t.row, r))
        return self._host_scales[key]

    def _scaled(self, t: Trace, traced: TracePhase, phase: TracePhase) -> PhaseCost:
        """Move a traced phase to this job's shape; see the module docstring (source 2).

        The traced shape's graph and the job's are compared op by op (by name): ops both have
        (the linears, norms, casts, residuals) scale per kernel class by the analytic ratio of
        those common ops; ops only the trace's structure has (e.g. `sdpa` when the job runs
        bmm + softmax + bmm) leave with their share of their class; ops only the job has are
        added at their analytic cost times the trace's measured/analytic ratio. Comparing by
        op, not by class, matters because the trace's kernel classes and the graph's op kinds do
        not correspond one to one: the unfused attention's fp32 casts are `copy` kernels in a
        trace but part of the graph's softmax op, and a flash layer's backward has `reduction`
        kernels (bias gradients) that its graph files elsewhere; a class-level ratio would
        inflate unrelated kernels by the new structure's growth, or hide the new structure
        behind a class the trace happens to have."""
        ref_job, ref_graph = self._ref(t)
        ref_ops = phase_ops(ref_graph, traced, ref_job)
        job_ops = phase_ops(self.graph, phase, self.job)
        common = {o.name for o in ref_ops} & {o.name for o in job_ops}
        ref_model = AnalyticKernelModel(ref_job.hardware, ref_job.training.precision.base)
        a_ref = analytic_by_class(ref_ops, ref_model)
        a_ref_common = analytic_by_class([o for o in ref_ops if o.name in common], ref_model)
        a_job = analytic_by_class([o for o in job_ops if o.name in common], self.analytic)
        a_new = analytic_by_class([o for o in job_ops if o.name not in common], self.analytic)
        p_ref = block_params(ref_job, traced, int(t.row["layers"]))
        p_job = block_params(self.job, phase, _stage_layers(self.job))
        rows = t.kernels.get(traced, [])
        if phase is TracePhase.OPTIMIZER:  # the step's every kernel is per parameter
            rows = [{**r, "scales_with": "params"} for r in rows]
        traced_tokens: dict[str, float] = defaultdict(float)
        for r in rows:
            if r["scales_with"] == "tokens":
                traced_tokens[r["kernel_class"]] += float(r["kernel_s"])
        mem_ref = sum(v for c, v in traced_tokens.items() if c not in MATMUL_CLASSES)
        k_mem = mem_ref / a_ref.membound() if a_ref.membound() > 0 and mem_ref > 0 else 1.0
        # kernels the graph does not model (casts, copies) grow with the common token work
        mem_scale = (a_job.membound() / a_ref_common.membound() if a_ref_common.membound() > 0
                     else 1.0)
        gpu = kernels = 0.0
        for r in rows:
            cls, sec, n = str(r["kernel_class"]), float(r["kernel_s"]), float(r["kernels"])
            if r["scales_with"] == "params":
                gpu += sec * (p_job / p_ref if p_ref > 0 else 1.0)
                kernels += n * (p_job / p_ref if phase is TracePhase.OPTIMIZER and p_ref > 0 else 1.0)
            elif a_ref.seconds.get(cls, 0.0) > 0:  # the common ops' share, moved to the job
                gpu += sec * a_job.seconds.get(cls, 0.0) / a_ref.seconds[cls]
                kernels += n * a_job.kernels.get(cls, 0.0) / max(a_ref.kernels[cls], 1e-9)
            else:  # a class the graph does not model (casts, copies): memory-bound token work
                gpu += sec * mem_scale
                kernels += n
        for cls, sec in a_new.seconds.items():  # kernels only the job's structure has
            k = self._matmul_ratio(traced_tokens, a_ref) if cls in MATMUL_CLASSES else k_mem
            gpu += sec * k
            kernels += a_new.kernels[cls]
        traced_row = t.phases[traced]
        n_ref = float(traced_row["kernels"])
        gpu += kernels * float(t.row["gpu_gap_s"])
        # host work is per launched kernel (a trace without GPU kernels, from a CPU: unchanged)
        host_factor = kernels / n_ref if n_ref > 0 else 1.0
        if phase is TracePhase.OPTIMIZER:  # the step's host work is per parameter tensor
            host_factor = (param_tensors(self.job, _stage_layers(self.job))
                           / param_tensors(ref_job, int(t.row["layers"])))
        host = self._host(t, traced_row) * host_factor
        return self._scaled_split(t, traced_row, Instance(gpu, host, kernels), host_factor,
                                  p_job / p_ref if p_ref > 0 else 1.0)

    def _scaled_split(self, t: Trace, row: dict[str, Any], mean: Instance, host_factor: float,
                      params: float) -> PhaseCost:
        """First and later micro-batches of a scaled phase: the traced shape's difference of
        its first micro-batch from its mean is gradient accumulation (per parameter: GPU time
        times the parameter ratio; launches unchanged) and host time (times the phase's host
        factor)."""
        if not _first_known(row):
            return PhaseCost(mean.gpu_s, mean.host_s, mean.kernels, "scaled")
        gap = float(t.row["gpu_gap_s"])
        d_gpu = (float(row["first_kernel_s"]) + float(row["first_kernels"]) * gap
                 - float(row["kernel_s"]) - float(row["kernels"]) * gap)
        d_host = (self._host(t, {**row, "host_s": row["first_host_s"]}) - self._host(t, row))
        d_kernels = float(row["first_kernels"]) - float(row["kernels"])
        first = Instance(max(0.0, mean.gpu_s + d_gpu * params),
                         max(0.0, mean.host_s + d_host * host_factor),
                         max(0.0, mean.kernels + d_kernels))
        return split_cost(mean, first, int(t.row["micro_batches"]), self.job.num_microbatches,
                          "scaled")

    @staticmethod
    def _matmul_ratio(traced: dict[str, float], analytic: ClassSums) -> float:
        a = sum(analytic.seconds.get(c, 0.0) for c in MATMUL_CLASSES)
        m = sum(traced.get(c, 0.0) for c in MATMUL_CLASSES)
        return m / a if a > 0 and m > 0 else 1.0

    # ---------------------------------------------------------------- the simulator's view
    def coverage(self) -> dict[str, float]:
        """Share of the job's phase time (max of GPU and host) per source, weighted like
        `simulate`'s coverage (layers count num_layers times)."""
        totals: dict[str, float] = defaultdict(float)
        layers = self.job.model.num_layers
        for phase, cost in self.phases.items():
            if cost is None or phase is TracePhase.OPTIMIZER:
                continue
            weight = layers if phase.value.startswith("layer") else 1
            totals[cost.source] += weight * max(cost.gpu_s, cost.host_s)
        grand = sum(totals.values()) or 1.0
        return {s: totals.get(s, 0.0) / grand for s in SOURCES}

    def sources(self) -> dict[str, str]:
        return {p.value: (c.source if c else "analytic") for p, c in self.phases.items()
                if c is not None or p is not TracePhase.LAYER_RECOMPUTE
                or self.job.training.recompute is not Recompute.NONE}

    def replace_blocks(self, graph: JobGraph, layer: BlockCost, emb: BlockCost, head: BlockCost
                       ) -> tuple[BlockCost, BlockCost, BlockCost]:
        """`simulator.timeline.lowering.lower`'s hook: traced compute and host time in the blocks; their
        tensor-parallel communication stays the network model's."""
        P = TracePhase
        new_layer = self._block(layer, P.LAYER_FORWARD, P.LAYER_BACKWARD, P.LAYER_RECOMPUTE)
        new_emb = self._block(emb, P.EMBEDDING_FORWARD, P.EMBEDDING_BACKWARD, None)
        new_head = self._block(head, P.HEAD_FORWARD, P.HEAD_BACKWARD, None)
        if None in (new_layer, new_emb, new_head):
            return layer, emb, head  # no trace of this structure: the op-level model throughout
        assert new_layer is not None and new_emb is not None and new_head is not None
        if self.job.parallel.pp == 1 and self.job.parallel.virtual_stages == 1:
            return self._timeline(new_layer, new_emb, new_head)
        return new_layer, *self._chunk_windows(graph, new_layer, new_emb, new_head)

    def _timeline(self, layer: BlockCost, emb: BlockCost, head: BlockCost
                  ) -> tuple[BlockCost, BlockCost, BlockCost]:
        """One pipeline stage: the micro-batches' phases in order on the host and the GPU
        (`simulator.costs.host_timeline`); what the host adds beyond the GPU time goes to the
        embedding's forward (the breakdown's overhead)."""
        P, L = TracePhase, self.job.model.num_layers

        def step(phases: list[TracePhase], gpu: float, first: bool, count: int = 1) -> Step:
            costs = [c for c in (self.phases.get(p) for p in phases) if c is not None]
            at = [c.at(first) for c in costs]
            # the block's GPU time (communication included) moved by this micro-batch's difference
            gpu += sum(a.gpu_s - c.gpu_s for a, c in zip(at, costs, strict=True))
            return Step(sum(a.host_s for a in at), gpu, sum(a.kernels for a in at), count)

        def sequence(first: bool) -> list[Step]:
            return [step([P.EMBEDDING_FORWARD], _gpu(emb, "f"), first),
                    step([P.LAYER_FORWARD], _gpu(layer, "f"), first, L),
                    step([P.HEAD_FORWARD], _gpu(head, "f"), first),
                    step([P.HEAD_BACKWARD], _gpu(head, "b"), first),
                    step([P.LAYER_RECOMPUTE, P.LAYER_BACKWARD], _gpu(layer, "b"), first, L),
                    step([P.EMBEDDING_BACKWARD], _gpu(emb, "b"), first)]

        m = self.job.num_microbatches
        seq = sequence(False)
        gpu = sum(s.gpu_s * s.count for s in seq) * (m - 1) / m + sum(
            s.gpu_s * s.count for s in sequence(True)) / m
        excess = max(0.0, cycle_time(seq, m, sequence(True)) / m - gpu)
        return (replace(layer, forward_host_excess=0.0, backward_host_excess=0.0),
                replace(emb, forward_host_excess=excess, backward_host_excess=0.0),
                replace(head, forward_host_excess=0.0, backward_host_excess=0.0))

    def _block(self, base: BlockCost, fwd: TracePhase, bwd: TracePhase, rec: TracePhase | None
               ) -> BlockCost | None:
        f, b = self.phases.get(fwd), self.phases.get(bwd)
        r = self.phases.get(rec) if rec is not None else None
        if f is None or b is None:
            return None
        rec_gpu = r.gpu_s if r else 0.0
        rec_host = r.host_s if r else 0.0
        by_source: dict[CostSource, float] = defaultdict(float)
        for c in (f, b, r):
            if c is not None:
                by_source[_COST_SOURCE[c.source]] += c.gpu_s
        fwd_excess = max(0.0, f.host_s - f.gpu_s - base.forward_comm)
        bwd_excess = max(0.0, b.host_s + rec_host - b.gpu_s - rec_gpu - base.backward_comm
                         - base.recompute_comm)
        return replace(base, forward=f.gpu_s, backward=b.gpu_s, recompute=rec_gpu,
                       forward_host_excess=fwd_excess, backward_host_excess=bwd_excess,
                       by_source=dict(by_source))

    def _chunk_windows(self, graph: JobGraph, layer: BlockCost, emb: BlockCost, head: BlockCost
                       ) -> tuple[BlockCost, BlockCost]:
        """The host runs ahead across a whole stage chunk: the embedding's and head's host time
        is absorbed by the GPU time of the layers in their chunk (and the reverse). Their
        excess is what the chunk's window adds beyond the layers' own."""
        first, last = _edge_chunk_layers(graph, self.job)
        same = self.job.parallel.pp == 1 and self.job.parallel.virtual_stages == 1
        P = TracePhase

        def window(direction: str, parts: list[tuple[int, BlockCost, list[TracePhase]]]) -> float:
            host = gpu = 0.0
            for count, block, phases in parts:
                gpu += count * _gpu(block, direction)
                host += count * sum(c.host_s for c in (self.phases.get(p) for p in phases) if c)
            return max(0.0, host - gpu)

        lf, lb = [P.LAYER_FORWARD], [P.LAYER_BACKWARD, P.LAYER_RECOMPUTE]
        if same:
            x_f = window("f", [(1, emb, [P.EMBEDDING_FORWARD]), (first, layer, lf),
                               (1, head, [P.HEAD_FORWARD])])
            x_b = window("b", [(1, emb, [P.EMBEDDING_BACKWARD]), (first, layer, lb),
                               (1, head, [P.HEAD_BACKWARD])])
            return (replace(emb, forward_host_excess=x_f - first * layer.forward_host_excess,
                            backward_host_excess=x_b - first * layer.backward_host_excess),
                    replace(head, forward_host_excess=0.0, backward_host_excess=0.0))
        e_f = window("f", [(1, emb, [P.EMBEDDING_FORWARD]), (first, layer, lf)])
        e_b = window("b", [(1, emb, [P.EMBEDDING_BACKWARD]), (first, layer, lb)])
        h_f = window("f", [(1, head, [P.HEAD_FORWARD]), (last, layer, lf)])
        h_b = window("b", [(1, head, [P.HEAD_BACKWARD]), (last, layer, lb)])
        return (replace(emb, forward_host_excess=e_f - first * layer.forward_host_excess,
                        backward_host_excess=e_b - first * layer.backward_host_excess),
                replace(head, forward_host_excess=h_f - last * layer.forward_host_excess,
                        backward_host_excess=h_b - last * layer.backward_host_excess))


_COST_SOURCE = {"traced": CostSource.MEASURED, "scaled": CostSource.INTERPOLATED,
                "analytic": CostSource.ANALYTIC}


def _gpu(block: BlockCost, direction: str) -> float:
    if direction == "f":
        return block.forward + block.forward_comm
    return block.backward + block.recompute + block.backward_comm + block.recompute_comm


def _edge_chunk_layers(graph: JobGraph, job: Job) -> tuple[int, int]:
    """Layers in the first and the last stage chunk."""
    chunks = getattr(graph, "chunk_layers", None)
    if chunks is not None:
        arr = np.asarray(chunks)
        return int(arr.flat[0]), int(arr.flat[-1])
    n = int(getattr(graph, "layers_per_chunk", job.model.num_layers))
    return n, n


def _stage_layers(job: Job) -> int:
    return job.model.num_layers // job.parallel.pp


def _first_known(row: dict[str, Any]) -> bool:
    """Whether a phase row has its first micro-batch's figures (profiles before they were
    recorded read NaN)."""
    return all(not pd.isna(row.get(c, math.nan))
               for c in ("first_kernels", "first_kernel_s", "first_host_s"))


def _phases(t: Trace) -> dict[TracePhase, dict[str, Any]]:
    return {p: r for p, r in t.phases.items() if p is not TracePhase.UNATTRIBUTED}


@dataclass(frozen=True, eq=False)
class TracedKernelModel:
    """The kernel model the tail sees: the optimizer step from its traced phase (scaled by the
    stage's parameters), the framework's other step kernels free (the traced iteration ran
    them: its phases hold them), every other op from the fallback model."""

    costs: TracedCosts
    fallback: KernelModel

    def cost(self, op: Op) -> OpCost:
        step = self.costs.phases.get(TracePhase.OPTIMIZER)
        if op.variant == FRAMEWORK_STEP and step is not None:  # inside the traced phases
            return OpCost(0.0, CostSource.MEASURED)
        if op.kind is not OpKind.OPTIMIZER or step is None:
            return self.fallback.cost(op)
        full = block_params(self.costs.job, TracePhase.OPTIMIZER, _stage_layers(self.costs.job))
        share = op.shape[0] / full if full > 0 else 1.0
        return OpCost(max(step.gpu_s, step.host_s) * share,
                      CostSource.MEASURED if step.source == "traced" else CostSource.INTERPOLATED)


def traced_costs(path_or_profile: str | Profile, job: Job, options: TracedOptions | None = None,
                 fallback: KernelModel | None = None) -> TracedCosts:
    profile = path_or_profile if isinstance(path_or_profile, Profile) else read_profile(path_or_profile)
    if not profile.traced:
        raise ProfileError(f"profile {profile.path} holds no traces; add one with `python -m "
                           f"vtrain_ml.profile import-trace TRACE --job JOB --out {profile.path}`")
    return TracedCosts(profile, job, options, fallback)


