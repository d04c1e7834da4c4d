"""Trace file + job -> rows of a profile's trace tables; accumulate them into a profile directory.

One code path for `import-trace` (a trace the user brings) and `trace` (a trace we record):
read (streaming), link, cut, summarize, then write ``traces.csv``, ``phases.csv`` and
``phase_kernels.csv`` (`simulator.costs.profile_format`). A trace is identified by its file's sha256,
so importing the same file again replaces its rows with identical ones: nothing changes.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from profiler.device import catalog_hardware, now_iso
from profiler.store import write_tables
from profiler.trace.classify import parameter_shapes
from profiler.trace.events import RawTrace, read_trace
from profiler.trace.links import link
from profiler.trace.phases import cut
from profiler.trace.summary import TraceSummary, summarize
from simulator.costs.profile_format import (
    META_FILE,
    PHASE_KERNEL_KEY,
    PHASE_KERNELS_TABLE,
    PHASE_KEY,
    PHASES_TABLE,
    TRACES_TABLE,
    DeviceInfo,
    ProfileMeta,
    TracePhase,
    read_profile,
)
from simulator.job.specs import Job

TRACE_ID_HEX = 16


@dataclass(frozen=True)
class TraceSource:
    """One trace to import and what is known about it besides the file."""

    path: Path
    job: Job
    stack: str
    source: str = "import-trace"
    host_ratio: float | None = None  # host time without / with the profiler, when measured
    measured_iteration_s: float | None = None  # the job's unprofiled iteration time
    peak_memory_bytes: float | None = None
    host_s: float | None = None  # an iteration's host time without the profiler (`trace`)
    profiled_host_s: float | None = None  # ... and with it
    optimizer_host_s: float | None = None  # the optimizer step's part of host_s
    profiled_optimizer_host_s: float | None = None  # ... of profiled_host_s
    # (host, optimizer host) seconds of each profiled iteration in the trace, in order (`trace`):
    # the profiler's cost is measured on the iteration the phases' host times come from
    profiled_hosts: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class ImportedTrace:
    source: TraceSource
    trace_id: str
    device: DeviceInfo
    summary: TraceSummary
    rows: dict[str, list[dict[str, Any]]] = field(repr=False)


@dataclass(frozen=True)
class ImportReport:
    imported: list[ImportedTrace]
    meta: ProfileMeta
    traces_in_profile: int


def file_id(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:TRACE_ID_HEX]


def device_of(trace: RawTrace) -> DeviceInfo:
    props = trace.device_properties[0] if trace.device_properties else {}
    if not props:
        return DeviceInfo(kind="cpu", name="cpu (trace without GPU activity)")
    return DeviceInfo(kind="cuda", name=str(props.get("name", "unknown GPU")),
                      memory_bytes=float(props.get("totalGlobalMem", 0.0)))


def analyze(source: TraceSource) -> ImportedTrace:
    """Read, link, cut and summarize one trace; its rows for the three tables."""
    job = source.job
    raw = read_trace(source.path)
    links = link(raw)
    phases = cut(raw, links, job.model.num_layers)
    summary = summarize(raw, links, phases, parameter_shapes(job), job.model.num_layers)
    trace_id = file_id(source.path)
    rows = {TRACES_TABLE: [_trace_row(source, trace_id, summary)],
            PHASES_TABLE: _phase_rows(trace_id, summary),
            PHASE_KERNELS_TABLE: _kernel_rows(trace_id, summary)}
    return ImportedTrace(source, trace_id, device_of(raw), summary, rows)


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def shape_columns(job: Job, layers: int, micro_batches: int) -> dict[str, Any]:
    """The traced shape as `simulator.costs.profile_format.TRACE_SHAPE_COLUMNS` (booleans as 0/1)."""
    m, t, p = job.model, job.training, job.parallel
    return {
        "hidden": m.hidden_size, "heads": m.num_attention_heads, "query_groups": m.query_groups,
        "ffn": m.ffn, "gated_mlp": int(m.gated_mlp), "norm": m.norm.value, "use_bias": int(m.use_bias),
        "position_embedding": m.position_embedding.value, "tied_embeddings": int(m.tied_embeddings),
        "vocab": m.vocab_size, "hidden_dropout": m.hidden_dropout,
        "attention_dropout": m.attention_dropout, "seq": m.seq_length,
        "micro_batch": t.micro_batch_size, "tp": p.tp,
        "sequence_parallel": int(p.sequence_parallel and p.tp > 1), "recompute": t.recompute.value,
        "flash_attention": int(t.flash_attention), "precision": t.precision.value,
        "framework": t.framework.value, "layers": layers, "micro_batches": micro_batches,
    }


def _trace_row(source: TraceSource, trace_id: str, s: TraceSummary) -> dict[str, Any]:
    return {"trace": trace_id, "file": source.path.name, "source": source.source,
            "stack": source.stack, **shape_columns(source.job, s.layers, s.micro_batches),
            "iteration_s": s.iteration_s, "kernels": s.kernels, "kernel_s": s.kernel_s,
            "busy_s": s.busy_s, "unattributed_kernels": s.unattributed_kernels,
            "unattributed_kernel_s": s.unattributed_kernel_s, "gpu_gap_s": s.gpu_gap_s,
            **_host_columns(source, s),
            "measured_iteration_s": _nan(source.measured_iteration_s),
            "peak_memory_bytes": _nan(source.peak_memory_bytes)}


def _host_columns(source: TraceSource, s: TraceSummary) -> dict[str, float]:
    """What the profiler did to this stack's host time: the ratio of an iteration's host time
    without / with it, and the time it added per recorded CPU op, separately for forward and
    backward and for the optimizer step (whose ops, over lists of tensors, cost it more)."""
    ratio, per_op, per_step_op = source.host_ratio, None, None
    profiled, opt_prof = source.profiled_host_s, source.profiled_optimizer_host_s or 0.0
    if len(source.profiled_hosts) == s.iterations:  # the iteration the phases' host times are
        profiled, opt_prof = source.profiled_hosts[s.host_iteration]
    if source.host_s is not None and profiled:
        ratio = source.host_s / profiled
        step = s.phases.get(TracePhase.OPTIMIZER)
        step_ops = step.cpu_ops / s.iterations if step else 0.0
        ops = sum(st.cpu_ops for st in s.phases.values()) / s.iterations - step_ops
        opt = source.optimizer_host_s or 0.0
        if ops > 0:
            per_op = max(0.0, (profiled - opt_prof) - (source.host_s - opt)) / ops
        if step_ops > 0 and source.optimizer_host_s is not None:
            per_step_op = max(0.0, opt_prof - opt) / step_ops
    return {"host_ratio": _nan(ratio), "profiler_op_s": _nan(per_op),
            "profiler_step_op_s": _nan(per_step_op)}


def _phase_rows(trace_id: str, s: TraceSummary) -> list[dict[str, Any]]:
    rows = []
    for phase, st in s.phases.items():
        per = st.per_instance
        rows.append({"trace": trace_id, "phase": phase.value, "instances": st.instances,
                     "kernels": per(st.kernels), "kernel_s": per(st.kernel_s),
                     "busy_s": per(st.busy_s), "host_s": st.host_per_instance_s,
                     "host_p50_s": st.host_p50_s, "cpu_ops": per(st.cpu_ops),
                     "launches": per(st.launches), "runtime_s": per(st.runtime_s),
                     "sync_s": per(st.sync_s), "blocked_s": per(st.blocked_s),
                     "host_lead_s": st.host_lead_s,
                     "first_kernels": st.per_first(st.first_kernels),
                     "first_kernel_s": st.per_first(st.first_kernel_s),
                     "first_host_s": st.per_first(st.first_host_s, host=True)})
    return rows


def _kernel_rows(trace_id: str, s: TraceSummary) -> list[dict[str, Any]]:
    rows = []
    for phase, st in s.phases.items():
        for (cls, scale), (count, seconds) in sorted(st.by_class.items()):
            rows.append({"trace": trace_id, "phase": phase.value, "kernel_class": cls.value,
                         "scales_with": scale.value, "kernels": st.per_instance(count),
                         "kernel_s": st.per_instance(seconds)})
    return rows


def _existing(out: Path, table: str, replaced: set[str]) -> list[dict[str, Any]]:
    """Rows of `table` already in the profile at `out`, except those of re-imported traces."""
    if not (out / META_FILE).is_file():
        return []
    profile = read_profile(out)
    frame: pd.DataFrame | None = {TRACES_TABLE: profile.traces, PHASES_TABLE: profile.phases,
                                  PHASE_KERNELS_TABLE: profile.phase_kernels}[table]
    if frame is None:
        return []
    kept = frame[~frame["trace"].isin(replaced)]
    records: list[dict[str, Any]] = kept.to_dict("records")  # type: ignore[assignment]
    return records


def write_imported(out: Path, imported: list[ImportedTrace], hardware: str | None,
                   selection: dict[str, Any] | None = None) -> ImportReport:
    """Accumulate the traces' rows into the profile at `out` (created if needed)."""
    assert imported, "nothing to write"
    ids = {t.trace_id for t in imported}
    keys = {TRACES_TABLE: ("trace",), PHASES_TABLE: PHASE_KEY, PHASE_KERNELS_TABLE: PHASE_KERNEL_KEY}
    tables: dict[str, tuple[list[dict[str, Any]], tuple[str, ...]]] = {}
    for table, key in keys.items():
        rows = _existing(out, table, ids) + [r for t in imported for r in t.rows[table]]
        tables[table] = (rows, key)
    first = imported[0]
    device = first.device
    hw = hardware if hardware is not None else catalog_hardware(device.name)
    meta = write_tables(out, tables, device, hw, first.source.job.training.precision,
                        _date(out, imported), selection)
    return ImportReport(imported, meta, len(tables[TRACES_TABLE][0]))


def _date(out: Path, imported: list[ImportedTrace]) -> str:
    """Re-importing the same traces changes nothing, not even the date."""
    if (out / META_FILE).is_file():
        profile = read_profile(out)
        if profile.traces is not None and {t.trace_id for t in imported} <= set(profile.traces["trace"]):
            return profile.meta.date
    return now_iso()


def phase_share_lines(summary: TraceSummary) -> list[str]:
    """The printed summary: share of kernel time per phase, unattributed included."""
    lines = []
    for phase in TracePhase:
        stats = summary.phases.get(phase)
        if stats is None and phase is not TracePhase.UNATTRIBUTED:
            continue
        share = summary.kernel_share(phase)
        count = stats.instances if stats and phase is not TracePhase.UNATTRIBUTED else 0
        per = (f"{stats.per_instance(stats.kernel_s) * 1e3:8.3f} ms GPU, "
               f"{stats.host_per_instance_s * 1e3:7.3f} ms host, "
               f"{stats.per_instance(stats.kernels):6.1f} kernels each" if stats and count else "")
        lines.append(f"  {phase.value:20s} {share:6.1%}  {count:4d} x {per}".rstrip(" x"))
    return lines
