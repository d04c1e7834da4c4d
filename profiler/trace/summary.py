"""Per-phase costs of a cut trace: GPU kernel time, busy span, kernel classes, host time.

Every number is per phase *instance* (one layer's forward of one micro-batch, one optimizer
step, ...), averaged over the instances of that phase in the trace. Host time is the time the
phase's top-level ops own on the host timeline (each op until the next top-level op starts), less
time spent waiting in synchronizing CUDA calls and in launch calls that found the launch queue
full, and less the slowdown of the host's own work while the queue was full
(`profiler.trace.launch_queue`); a recompute's host time is the span of its re-run forward ops,
taken out of the enclosing
backward. Microseconds in the trace, seconds here.

GPU kernel durations are the real ones in every profiled iteration; host times are not: besides
the profiler's cost per recorded op, one profiled iteration can stall (the first one after the
profiler starts recording was 3x slower than the next on the H100, `profile trace` of GPT-2 at
micro-batch 4: 100 ms vs 35 ms). So host figures come from the trace's least-disturbed iteration
(the one with the least host time: disturbances only add time, as `timeit` reasons for taking
the minimum of repeats), kernel figures from all iterations.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from profiler.trace.classify import KernelClass, Scale, kernel_class, scale_of
from profiler.trace.events import RawTrace
from profiler.trace.launch_queue import pressure_excess, queue_waits
from profiler.trace.links import NONE, Links
from profiler.trace.phases import Cut
from simulator.costs.profile_format import TracePhase

US = 1e-6
SYNC_CALL = re.compile(r"Synchronize|^cudaMemcpy$|^cuMemcpyDtoH")
# A launch call that takes this many times the trace's median for its name was blocked: the
# driver's launch queue was full (the GPU is behind) -- waiting, not host work.
BLOCKED_FACTOR = 5.0



@dataclass
class PhaseStats:
    """One phase's totals over its instances; `per_instance` divides them."""

    phase: TracePhase
    instances: int = 0
    kernels: float = 0.0
    kernel_s: float = 0.0
    busy_s: float = 0.0
    host_s: float = 0.0  # summed over the instances of the least-disturbed iteration
    host_instances: int = 0  # ... and their number
    host_p50_s: float = 0.0  # median host time of one instance (all iterations)
    cpu_ops: float = 0.0
    launches: float = 0.0
    runtime_s: float = 0.0
    sync_s: float = 0.0  # waiting in synchronizing calls (not in host_s)
    blocked_s: float = 0.0  # waiting in launch calls on a full queue (not in host_s)
    lead_s: float = 0.0  # summed over kernels: kernel start - launch call start
    by_class: dict[tuple[KernelClass, Scale], list[float]] = field(default_factory=dict)
    # the first micro-batch's instances alone (its backward has no gradient to accumulate into)
    first_instances: int = 0
    first_kernels: float = 0.0
    first_kernel_s: float = 0.0
    first_host_s: float = 0.0  # summed over the least-disturbed iteration's first instances
    first_host_instances: int = 0

    def per_first(self, value: float, host: bool = False) -> float:
        """`value` over the first micro-batch's instances (NaN when the phase has none)."""
        count = self.first_host_instances if host else self.first_instances
        return value / count if count else float("nan")

    def per_instance(self, value: float) -> float:
        return value / self.instances if self.instances else 0.0

    @property
    def host_per_instance_s(self) -> float:
        """Host seconds of one instance in the trace's least-disturbed iteration."""
        return self.host_s / self.host_instances if self.host_instances else 0.0

    @property
    def host_lead_s(self) -> float:
        return self.lead_s / self.kernels if self.kernels else 0.0


@dataclass
class TraceSummary:
    iterations: int
    micro_batches: int
    layers: int
    layer_period: int
    iteration_s: float  # mean over iterations: first op start to the last kernel's or op's end
    kernels: float  # per iteration
    kernel_s: float
    busy_s: float
    unattributed_kernels: float
    unattributed_kernel_s: float
    gpu_gap_s: float  # median idle gap between back-to-back queued kernels
    unmapped_backward: int
    phases: dict[TracePhase, PhaseStats]
    host_iteration: int = 0  # the least-disturbed iteration (the host figures are its)
    pressure_slowdown: float = 1.0  # host work with the launch queue full / without (taken out)
    host_by_iteration_s: tuple[float, ...] = ()  # each iteration's host time (less waits)

    def kernel_share(self, phase: TracePhase) -> float:
        """Share of the iteration's kernel time in `phase` (all its instances)."""
        stats = self.phases.get(phase)
        total = self.kernel_s * self.iterations
        return stats.kernel_s / total if stats and total > 0 else 0.0


def _op_instances(trace: RawTrace, links: Links, cut: Cut) -> np.ndarray:
    """Phase instance of every op (recompute roots and everything under them re-assigned)."""
    out = np.full(len(trace.ops), NONE, dtype=np.int64)
    for i in range(len(trace.ops)):
        parent = int(links.parent[i])
        if i in cut.recompute_roots:
            out[i] = cut.recompute_roots[i]
        elif parent == NONE:
            out[i] = cut.op_instance.get(i, NONE)
        else:
            out[i] = out[parent]
    return out


def _host_windows(trace: RawTrace, links: Links, cut: Cut) -> dict[int, float]:
    """Host microseconds owned by each instance's top-level ops: each op until the next top-level
    op of the same iteration starts (the last one until it ends)."""
    owned: dict[int, float] = defaultdict(float)
    tops = sorted(cut.op_instance, key=lambda i: trace.ops[i].ts)
    for k, i in enumerate(tops):
        op, inst = trace.ops[i], cut.op_instance[i]
        nxt = tops[k + 1] if k + 1 < len(tops) else None
        same = nxt is not None and (cut.instances[cut.op_instance[nxt]].iteration
                                    == cut.instances[inst].iteration)
        owned[inst] += (trace.ops[nxt].ts if same and nxt is not None else op.end) - op.ts
    for root, inst in cut.recompute_roots.items():  # a recompute is carved out of its backward
        span = trace.ops[root].dur
        owned[inst] += span
        owner = cut.op_instance.get(int(links.top[root]), NONE)
        if owner != NONE:
            owned[owner] -= span
    return owned


def _call_caps(trace: RawTrace) -> dict[str, float]:
    """Per runtime-call name, the duration (us) beyond which a call counts as blocked."""
    durations: dict[str, list[float]] = defaultdict(list)
    for call in trace.runtime:
        durations[call.name].append(call.dur)
    return {name: BLOCKED_FACTOR * float(np.median(d)) for name, d in durations.items()}


def _busy(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -np.inf
    for s, e in sorted(intervals):
        if s >= end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def gpu_gap(trace: RawTrace, links: Links) -> float:
    """Median idle time between consecutive kernels of a stream when the second was already
    queued (its launch call returned before the first ended): the GPU's own launch gap."""
    gaps: list[float] = []
    last: dict[object, int] = {}
    for g, ev in enumerate(trace.gpu):
        prev = last.get(ev.stream)
        last[ev.stream] = g
        call = int(links.gpu_call[g])
        if prev is None or call == NONE:
            continue
        before = trace.gpu[prev]
        queued = trace.runtime[call].ts + trace.runtime[call].dur < before.end
        if queued and ev.ts >= before.end:
            gaps.append(ev.ts - before.end)
    return float(np.median(gaps)) * US if gaps else 0.0


def summarize(trace: RawTrace, links: Links, cut: Cut, params: frozenset[tuple[int, ...]],
              layers: int) -> TraceSummary:
    """Aggregate the cut trace per phase (see the module docstring)."""
    n = len(cut.instances)
    host = np.zeros(n)
    for inst, us in _host_windows(trace, links, cut).items():
        host[inst] += us * US
    op_inst = _op_instances(trace, links, cut)
    excess, slowdown = pressure_excess(trace, links)
    mapped = op_inst != NONE
    np.subtract.at(host, op_inst[mapped], excess[mapped] * US)
    stats = {p: PhaseStats(p) for p in TracePhase}
    kind_of = [inst.kind for inst in cut.instances]
    for inst in op_inst[op_inst != NONE]:
        stats[kind_of[inst]].cpu_ops += 1
    caps, queued = _call_caps(trace), queue_waits(trace, links)
    for j, call in enumerate(trace.runtime):
        op = int(links.call_op[j])
        inst = int(op_inst[op]) if op != NONE else NONE
        if inst == NONE:
            continue
        s = stats[kind_of[inst]]
        s.runtime_s += call.dur * US
        if SYNC_CALL.search(call.name):
            s.sync_s += call.dur * US
            host[inst] -= call.dur * US
            continue
        wait = max(0.0, call.dur - caps[call.name], float(queued[j]))
        s.blocked_s += wait * US
        host[inst] -= wait * US
    spans = _kernel_stats(trace, links, cut, op_inst, params, stats)
    iteration = np.array([inst.iteration for inst in cut.instances])
    by_iteration = tuple(float(host[iteration == k].sum()) for k in range(len(cut.iterations)))
    best = int(np.argmin(by_iteration))
    for inst, kind in enumerate(kind_of):
        stats[kind].instances += 1
        first = cut.instances[inst].micro_batch == 0
        stats[kind].first_instances += first
        if iteration[inst] == best:
            stats[kind].host_instances += 1
            stats[kind].host_s += host[inst]
            stats[kind].first_host_instances += first
            stats[kind].first_host_s += host[inst] if first else 0.0
    for kind, iv in spans.items():
        stats[kind].busy_s = _busy(iv) * US
    for kind in stats:
        mine = [host[i] for i in range(n) if kind_of[i] is kind]
        stats[kind].host_p50_s = float(np.median(mine)) if mine else 0.0
    n_it = len(cut.iterations)
    un = stats[TracePhase.UNATTRIBUTED]
    un.instances = n_it
    return TraceSummary(
        iterations=n_it,
        micro_batches=cut.iterations[0].micro_batches,
        layers=layers,
        layer_period=cut.iterations[0].layer_period,
        iteration_s=_iteration_s(trace, cut) / n_it,
        kernels=len(trace.gpu) / n_it,
        kernel_s=sum(ev.dur for ev in trace.gpu) * US / n_it,
        busy_s=_busy([(ev.ts, ev.end) for ev in trace.gpu]) * US / n_it,
        unattributed_kernels=un.kernels / n_it,
        unattributed_kernel_s=un.kernel_s / n_it,
        gpu_gap_s=gpu_gap(trace, links),
        unmapped_backward=cut.unmapped_backward,
        phases={p: s for p, s in stats.items() if s.instances},
        host_iteration=best,
        host_by_iteration_s=by_iteration,
        pressure_slowdown=slowdown,
    )


def _kernel_stats(trace: RawTrace, links: Links, cut: Cut, op_inst: np.ndarray,
                  params: frozenset[tuple[int, ...]], stats: dict[TracePhase, PhaseStats]
                  ) -> dict[TracePhase, list[tuple[float, float]]]:
    """Add every GPU event to its phase (or to "unattributed"); the phases' busy intervals."""
    spans: dict[TracePhase, list[tuple[float, float]]] = defaultdict(list)
    for g, ev in enumerate(trace.gpu):
        inst = int(cut.gpu_instance[g])
        op = links.gpu_op(g)
        kind = cut.instances[inst].kind if inst != NONE else TracePhase.UNATTRIBUTED
        s = stats[kind]
        s.kernels += 1
        s.kernel_s += ev.dur * US
        if inst != NONE and cut.instances[inst].micro_batch == 0:
            s.first_kernels += 1
            s.first_kernel_s += ev.dur * US
        spans[kind].append((ev.ts, ev.end))
        if op != NONE:
            s.launches += 1
            s.lead_s += (ev.ts - trace.runtime[int(links.gpu_call[g])].ts) * US
        dims = trace.ops[op].dims if op != NONE else ""
        cls = kernel_class(ev.name, ev.category)
        acc = s.by_class.setdefault((cls, scale_of(cls, dims, params)), [0.0, 0.0])
        acc[0] += 1
        acc[1] += ev.dur * US
    spans.pop(TracePhase.UNATTRIBUTED, None)
    return spans


def _iteration_s(trace: RawTrace, cut: Cut) -> float:
    """Seconds summed over iterations: first op start to the last GPU event or op end."""
    total = 0.0
    ends = [ev.end for ev in trace.gpu]
    starts = np.array([ev.ts for ev in trace.gpu])
    for k, it in enumerate(cut.iterations):
        nxt = cut.iterations[k + 1].start if k + 1 < len(cut.iterations) else np.inf
        mine = [ends[g] for g in np.flatnonzero((starts >= it.start) & (starts < nxt))]
        total += (max([it.end, *mine]) - it.start) * US
    return total
