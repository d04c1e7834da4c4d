"""Host time of a traced phase without the profiler, checked against the unprofiled iteration.

Kernel durations in a trace are real; host times are not. The profiler costs host time on every
recorded op, and a profiled iteration can stall beyond that (a buffer flush, the first recorded
iteration; `profiler.trace.summary` already keeps the least-disturbed iteration). Two estimates,
in order:

1. **Deflation per op.** `profile trace` times the same iteration without and with the profiler
   and records the difference per recorded op (`profiler_op_s`, and `profiler_step_op_s` for the
   optimizer step); each phase loses that cost times its ops (the trace's own measurement, else
   the profile's median, so a `trace` run on the same machine also corrects imported traces).
   The unprofiled iteration of a host-paced trace implies its per-op cost too (`implied_op_s`),
   which then also serves the profile's other traces. Without any of these, the cost measured
   on the reference stack (`DEFAULT_PROFILER_OP_S`, `bench/measure_profiler_overhead.py`).
2. **The traced shape's own unprofiled iteration** (`measured_iteration_s`: `trace` measures it,
   `import-trace --iteration-ms` takes it). The host/GPU timeline of the trace's own phases must
   reproduce it. Host time is the only free part (kernel times are measured), so one factor on
   the trace's host times is solved for:

   - the timeline is longer than the measurement and the GPU alone is not: the host estimate is
     inflated (a stall, or more profiler cost than measured); scale it down until they agree;
   - the GPU alone already explains the measurement: the host did not pace this iteration, so
     it is at most what the GPU hides (the largest factor whose timeline stays within the
     measurement's spread), never more than the estimate;
   - the timeline is shorter and the GPU alone explains the measurement: nothing is learned
     about the host; unchanged;
   - the timeline is shorter, the host paces it and explains the rest: scale the host up, at
     most to the traced (profiled) host time, since the profiler only ever adds host time; if
     the GPU paces the timeline (a small host change cannot be told from noise) or even the
     traced host does not reach the measurement, the host is not the cause: unchanged.

   Disagreements within the measurement's own spread (`NOISE`) change nothing.

The factor is a property of one trace's measurement (its machine, its stack, its stall) and is
applied to that trace only; per-op costs, measured or implied, describe the profiler on a machine
and are shared within a profile. Nothing is fitted to the jobs a profile predicts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from simulator.costs.host_timeline import Step, cycle_time
from simulator.costs.profile_format import TracePhase

# What torch.profiler(record_shapes=True) costs the host, measured on the reference stack
# (Megatron-structured eager PyTorch, bf16 autocast, AdamW) by bench/measure_profiler_overhead.py
# on this project's CPU (2026-11-23, 5 rounds): 2.10 us per recorded op of the forward and
# backward passes (1.81-2.49), host time without / with the profiler 0.76 (0.73-0.78). Used when
# no trace of the profile measured it (`trace` does) and none implies it; the per-op cost is the
# physical unit (the profiler records each op), the ratio is kept for the optimizer step, whose
# few ops over tensor lists cost the profiler far more each.
DEFAULT_PROFILER_OP_S = 2.10e-6
DEFAULT_HOST_RATIO = 0.76
MIN_HOST_FRACTION = 0.1  # never deflate a phase's host time below this share of the traced
AGREE = 1e-3  # relative: the timeline reaches the GPU floor
# The spread of an unprofiled measurement (re-measured medians of the shared H100 runs agree
# within 1.5%, ../shared/data/traces/h100/README.md): a smaller disagreement says nothing.
NOISE = 0.02
BISECTIONS = 40

Row = dict[str, Any]


def known(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


@dataclass(frozen=True)
class Deflation:
    """Step 1: the profiler's cost taken out of a phase's traced host time."""

    per_op: dict[str, float]  # trace id -> its profiler cost per op (measured, else implied)
    per_op_default: float  # the profile's median of those (else the default) for the others
    per_step_op_default: float | None  # the profile's median cost per optimizer-step op
    ratio_default: float  # host-time ratio where no per-op cost is known at all

    def host(self, trace: Row, phase: Row) -> float:
        host = float(phase["host_s"])
        if phase["phase"] == TracePhase.OPTIMIZER.value:
            per_op = known(trace.get("profiler_step_op_s"))
            per_op = per_op if per_op is not None else self.per_step_op_default
        else:
            per_op = self.per_op.get(str(trace["trace"]), self.per_op_default)
        if per_op is not None:
            return max(host - per_op * float(phase["cpu_ops"]), MIN_HOST_FRACTION * host)
        ratio = known(trace.get("host_ratio"))
        return host * (ratio if ratio is not None else self.ratio_default)


def deflation(traces: list[tuple[Row, dict[TracePhase, Row]]]) -> Deflation:
    """Per-op profiler costs of a profile's traces: measured by `trace`, else implied by the
    trace's own unprofiled iteration (`implied_op_s`); their median for the other traces."""
    per_step = _median([known(r.get("profiler_step_op_s")) for r, _ in traces])
    ratio = _median([known(r.get("host_ratio")) for r, _ in traces]) or DEFAULT_HOST_RATIO

    def step_host(trace: Row, phase: Row) -> float:
        host = float(phase["host_s"])
        if per_step is not None:
            return max(host - per_step * float(phase["cpu_ops"]), MIN_HOST_FRACTION * host)
        return host * ratio

    per_op: dict[str, float] = {}
    for row, phases in traces:
        value = known(row.get("profiler_op_s"))
        if value is None:
            value = implied_op_s(row, phases, partial(step_host, row))
        if value is not None:
            per_op[str(row["trace"])] = value
    default = _median(list(per_op.values()))
    return Deflation(per_op, default if default is not None else DEFAULT_PROFILER_OP_S, per_step,
                     ratio)


def implied_op_s(trace: Row, phases: dict[TracePhase, Row], step_host: Callable[[Row], float]
                 ) -> float | None:
    """The profiler's host cost per recorded op that makes the trace's own timeline reproduce
    its unprofiled iteration, when the host paced that iteration (the measurement is above
    the GPU floor) and the profiler visibly slowed it (the traced timeline is above the
    measurement), each by more than the measurement's spread; else None (nothing to learn)."""
    measured = known(trace.get("measured_iteration_s"))
    if measured is None or measured <= 0 or not phases:
        return None

    def host(cost: float) -> Callable[[Row], float]:
        def of(r: Row) -> float:
            if r["phase"] == TracePhase.OPTIMIZER.value:
                return step_host(r)
            raw = float(r["host_s"])
            return max(raw - cost * float(r["cpu_ops"]), MIN_HOST_FRACTION * raw)
        return of

    most = max((float(r["host_s"]) / max(float(r["cpu_ops"]), 1.0) for r in phases.values()),
               default=0.0)

    def negative_timeline(cost: float) -> float:  # non-decreasing in the cost
        return -own_iteration_s(trace, phases, host(cost), 1.0)

    raw, floor = -negative_timeline(0.0), -negative_timeline(most)
    if measured <= floor * (1 + NOISE) or raw <= measured * (1 + NOISE):
        return None
    return _solve(negative_timeline, -measured, 0.0, most)


def host_device_rows(trace: Row, phases: dict[TracePhase, Row]) -> dict[TracePhase, Row]:
    """A trace without GPU kernels (a CPU device: the host does the work) gets its phases' host
    times from the median instance of each phase over all profiled iterations, scaled so that
    the trace's host time in total is unchanged (the least-disturbed iteration's).

    On a CPU the phases' host windows hold the time other processes took the core, at random
    per phase instance; one iteration's mean then carries that noise into the split between the
    layers and the embedding, head and optimizer, which a deeper model multiplies (2-layer
    traces of one tiny model on this project's shared 2-core machine predicted 24 layers from
    -15% to +5% of the measured growth; with the per-phase median, -2% to +4%). The total stays
    the least-disturbed iteration's, and is checked against the unprofiled iteration as before
    (`host_scale`). On a GPU the iteration's own sequence of host times is what the host/GPU
    timeline needs (a host-paced stretch is a sum, not a median), so GPU traces are unchanged."""
    if float(trace.get("kernels", 0.0) or 0.0) > 0 or not phases:
        return phases
    mean = sum(float(r["host_s"]) * float(r["instances"]) for r in phases.values())
    median = sum(float(r["host_p50_s"]) * float(r["instances"]) for r in phases.values())
    if mean <= 0 or median <= 0:
        return phases
    out = {}
    for p, r in phases.items():
        robust = float(r["host_p50_s"]) * mean / median
        ratio = robust / float(r["host_s"]) if float(r["host_s"]) > 0 else 1.0
        first = known(r.get("first_host_s"))
        out[p] = {**r, "host_s": robust,
                  "first_host_s": first * ratio if first is not None else r.get("first_host_s")}
    return out


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.median(kept)) if kept else None


def own_iteration_s(trace: Row, phases: dict[TracePhase, Row], host: Callable[[Row], float],
                    scale: float) -> float:
    """The traced shape's iteration on the host/GPU timeline from its own phases, host times
    (`host(phase row)`) times `scale`: the micro-batches' phases in order, then the step.

    `host` takes the mean instance and the first one each, and the later micro-batches are
    what the mean holds besides the first, as the simulator's cost of a traced phase composes
    them (`traced_shapes.split_cost`). Deflating the later instances' raw host time instead
    would differ where the deflation's floor (`MIN_HOST_FRACTION`) holds for one and not the
    other (a first micro-batch that stalled), and the factor solved here would then not make
    the simulated job reproduce the measurement."""
    phases = {p: _host_applied(r, host) for p, r in phases.items()}
    gap = float(trace["gpu_gap_s"])
    layers, micro_batches = int(trace["layers"]), int(trace["micro_batches"])
    P = TracePhase

    def step(rows_of: dict[TracePhase, Row], names: tuple[TracePhase, ...], count: int = 1
             ) -> Step:
        rows = [rows_of[p] for p in names if p in rows_of]
        return Step(scale * sum(float(r["host_s"]) for r in rows),
                    sum(float(r["kernel_s"]) + float(r["kernels"]) * gap for r in rows),
                    sum(float(r["kernels"]) for r in rows), count)

    def sequence(rows_of: dict[TracePhase, Row]) -> list[Step]:
        return [step(rows_of, (P.EMBEDDING_FORWARD,)), step(rows_of, (P.LAYER_FORWARD,), layers),
                step(rows_of, (P.HEAD_FORWARD,)), step(rows_of, (P.HEAD_BACKWARD,)),
                step(rows_of, (P.LAYER_RECOMPUTE, P.LAYER_BACKWARD), layers),
                step(rows_of, (P.EMBEDDING_BACKWARD,))]

    first, later = micro_batch_rows(phases, micro_batches)
    opt = step(phases, (P.OPTIMIZER,))
    return cycle_time(sequence(later), micro_batches, sequence(first)) + max(opt.host_s, opt.gpu_s)


FIRST = {"kernel_s": "first_kernel_s", "kernels": "first_kernels", "host_s": "first_host_s"}


def _host_applied(row: Row, host: Callable[[Row], float]) -> Row:
    """A phase row whose mean and first-instance host times are `host` of each."""
    first = known(row.get("first_host_s"))
    return {**row, "host_s": host(row),
            "first_host_s": host({**row, "host_s": first}) if first is not None
            else row.get("first_host_s")}


def micro_batch_rows(phases: dict[TracePhase, Row], micro_batches: int
                     ) -> tuple[dict[TracePhase, Row], dict[TracePhase, Row]]:
    """Phase rows of the trace's first micro-batch and of each later one (the mean's
    remainder); both the mean where the trace does not tell them apart."""
    first: dict[TracePhase, Row] = {}
    later: dict[TracePhase, Row] = {}
    for p, r in phases.items():
        known_first = {k: known(r.get(c)) for k, c in FIRST.items()}
        if micro_batches < 2 or any(v is None for v in known_first.values()):
            first[p] = later[p] = r
            continue
        m = micro_batches
        first[p] = {**r, **known_first}
        later[p] = {**r, **{k: max(0.0, (m * float(r[k]) - v) / (m - 1))
                            for k, v in known_first.items() if v is not None}}
    return first, later


def _solve(f: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """The x in [lo, hi] where the non-decreasing f reaches `target` (bisection)."""
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def host_scale(trace: Row, phases: dict[TracePhase, Row], host: Callable[[Row], float]) -> float:
    """Step 2: the factor on the trace's (deflated) host times that makes its own timeline
    reproduce its unprofiled iteration (`measured_iteration_s`); 1 when it is unknown or says
    nothing about the host (see the module docstring)."""
    measured = known(trace.get("measured_iteration_s"))
    if measured is None or measured <= 0 or not phases:
        return 1.0
    deflated = sum(host(r) * _count(trace, p) for p, r in phases.items())
    if deflated <= 0:
        return 1.0
    traced = sum(float(r["host_s"]) * _count(trace, p) for p, r in phases.items())
    ceiling = max(1.0, traced / deflated)  # the profiler never removes host time

    def timeline(scale: float) -> float:
        return own_iteration_s(trace, phases, host, scale)

    now, floor = timeline(1.0), timeline(0.0)
    if abs(now / measured - 1) <= NOISE:
        return 1.0
    if now > measured:
        if floor < measured * (1 - NOISE):
            return _solve(timeline, measured, 0.0, 1.0)
        # the largest host the measurement allows (within its spread)
        return _solve(timeline, max(measured, floor) * (1 + NOISE), 0.0, 1.0)
    if measured <= floor * (1 + NOISE):  # the GPU explains the measurement: nothing learned
        return 1.0
    if now <= floor * (1 + NOISE) or timeline(ceiling) < measured:
        return 1.0  # the host does not pace the timeline, or cannot explain the rest
    return _solve(timeline, measured, 1.0, ceiling)


def _count(trace: Row, phase: TracePhase) -> float:
    """Instances of a phase in one traced iteration."""
    if phase is TracePhase.OPTIMIZER:
        return 1.0
    per_mb = int(trace["layers"]) if phase.value.startswith("layer") else 1
    return float(per_mb * int(trace["micro_batches"]))
