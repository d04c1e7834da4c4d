"""The few fields of a Kineto trace the importer needs, kept compactly while streaming.

Kineto writes complete events (``"ph": "X"``, microseconds) in categories: ``cpu_op`` (an ATen
operator or autograd node, with ``Sequence number``, ``External id`` and, with record_shapes,
``Input Dims``), ``user_annotation`` (`torch.profiler.record_function`, e.g. ``ProfilerStep#3``
and ``Optimizer.step#AdamW.step``), ``cuda_runtime`` / ``cuda_driver`` (cudaLaunchKernel,
cuLaunchKernelEx, cudaMemsetAsync, ... with ``correlation``), and on the GPU ``kernel``,
``gpu_memset``, ``gpu_memcpy`` (with the same ``correlation`` and the stream). Flow events
``ac2g`` (``"ph": "s"`` at the launch, ``"f"`` at the kernel, ``id`` = correlation) link the two
in traces whose GPU events lack a ``correlation`` argument.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.trace.reader import TraceFormatError, iter_trace

OP_CATEGORIES = frozenset({"cpu_op", "operator"})
ANNOTATION_CATEGORIES = frozenset({"user_annotation"})
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
GPU_CATEGORIES = frozenset({"kernel", "gpu_memset", "gpu_memcpy", "Kernel", "Memset", "Memcpy"})


@dataclass(slots=True)
class CpuOp:
    """One CPU operator (or autograd node) call. Times in microseconds."""

    name: str
    tid: Any
    ts: float
    dur: float
    seq: int | None  # autograd sequence number: forward op <-> its backward node
    dims: str  # the input shapes as written (interned), "" without record_shapes

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(slots=True)
class Annotation:
    name: str
    tid: Any
    ts: float
    dur: float


@dataclass(slots=True)
class RuntimeCall:
    """A CUDA runtime / driver call on a CPU thread; `corr` links it to what it launched."""

    name: str
    tid: Any
    ts: float
    dur: float
    corr: int | None


@dataclass(slots=True)
class GpuEvent:
    """A kernel, memset or memcpy on a GPU stream."""

    name: str
    category: str
    stream: Any
    ts: float
    dur: float
    corr: int | None

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class RawTrace:
    """Everything the importer keeps of one trace file."""

    path: Path
    ops: list[CpuOp] = field(default_factory=list)
    annotations: list[Annotation] = field(default_factory=list)
    runtime: list[RuntimeCall] = field(default_factory=list)
    gpu: list[GpuEvent] = field(default_factory=list)
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    flow_starts: dict[tuple[Any, float], int] = field(default_factory=dict)  # (tid, ts) -> id
    flow_ends: dict[tuple[Any, float], int] = field(default_factory=dict)  # (stream, ts) -> id

    @property
    def device_name(self) -> str:
        props = self.device_properties
        return str(props[0].get("name", "")) if props else ""


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _add(trace: RawTrace, e: dict[str, Any]) -> None:
    phase, cat = e.get("ph"), e.get("cat")
    if phase == "X":
        args = e.get("args") or {}
        ts, dur = float(e.get("ts", 0.0)), float(e.get("dur", 0.0))
        name = sys.intern(str(e.get("name", "")))
        if cat in OP_CATEGORIES:
            dims = args.get("Input Dims")
            trace.ops.append(CpuOp(name, e.get("tid"), ts, dur, _int(args.get("Sequence number")),
                                   sys.intern(str(dims)) if dims is not None else ""))
        elif cat in ANNOTATION_CATEGORIES:
            trace.annotations.append(Annotation(name, e.get("tid"), ts, dur))
        elif cat in RUNTIME_CATEGORIES:
            trace.runtime.append(RuntimeCall(name, e.get("tid"), ts, dur, _int(args.get("correlation"))))
        elif cat in GPU_CATEGORIES:
            stream = args.get("stream", e.get("tid"))
            trace.gpu.append(GpuEvent(name, str(cat).lower(), stream, ts, dur,
                                      _int(args.get("correlation"))))
    elif cat == "ac2g" and phase in ("s", "f"):
        ident = _int(e.get("id"))
        if ident is None:
            return
        where = (e.get("tid"), float(e.get("ts", 0.0)))
        (trace.flow_starts if phase == "s" else trace.flow_ends)[where] = ident


def read_trace(path: str | Path) -> RawTrace:
    """Stream a trace file into a `RawTrace` (events sorted by start time)."""
    trace = RawTrace(Path(path))
    for kind, item in iter_trace(path):
        if kind == "event":
            _add(trace, item)
        elif item[0] == "deviceProperties" and isinstance(item[1], list):
            trace.device_properties = [p for p in item[1] if isinstance(p, dict)]
    if not trace.ops:
        raise TraceFormatError(f"{trace.path} holds no CPU operator events (cat 'cpu_op'); record "
                               f"it with torch.profiler and ProfilerActivity.CPU")
    _fill_correlations(trace)
    trace.ops.sort(key=lambda o: (o.ts, -o.dur))
    trace.runtime.sort(key=lambda r: r.ts)
    trace.gpu.sort(key=lambda g: g.ts)
    return trace


def _fill_correlations(trace: RawTrace) -> None:
    """Some traces carry the launch <-> kernel link only as ac2g flow events."""
    for g in trace.gpu:
        if g.corr is None:
            g.corr = trace.flow_ends.get((g.stream, g.ts))
    for r in trace.runtime:
        if r.corr is None:
            r.corr = trace.flow_starts.get((r.tid, r.ts))
    trace.flow_starts.clear()
    trace.flow_ends.clear()
