"""Trace rows -> workloads: models loaded, iterations counted, deadlines and requests resolved.

``deadline_factor`` is resolved against a *reference* curve, never the linear oracle's: the job's
duration on its best plan at its largest useful GPU count (the count with the shortest exact
iteration time on this cluster), times the factor. The reference is the exact simulator (or the
surrogate oracle's exactly verified plans, when that is the oracle in use), so one trace means
the same deadlines for every oracle compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import ConfigError
from simulator.job.catalog import load_model, model_names, read_yaml
from simulator.job.specs import ModelSpec, parse
from vtrain_ml.scheduler.curve import Levels, ScalingCurve
from vtrain_ml.scheduler.layouts import Shape
from vtrain_ml.scheduler.trace import Trace, TraceRow, iterations


@dataclass(frozen=True)
class Workload:
    """One job as the scheduler sees it (deadline absolute, work in iterations)."""

    row: int  # 0-based position in the trace
    name: str
    arrival_s: float
    deadline_s: float
    iterations: int
    shape: Shape
    priority: float = 1.0
    requested_gpus: int | None = None


def _model_file(path: Path, where: str) -> ModelSpec:
    data = read_yaml(path)
    if isinstance(data, dict) and isinstance(data.get("model"), dict):
        data = data["model"]
    if isinstance(data, dict) and "preset" in data:
        rest = {k: v for k, v in data.items() if k != "preset"}
        return load_model(str(data["preset"]), rest or None)
    return parse(ModelSpec, data, f"{where}: model file {path}")


def resolve_model(row: TraceRow, folder: Path, where: str) -> ModelSpec:
    """A preset name or a model file (relative to the working directory, else to the trace)."""
    name = row.model
    candidates = [Path(name), folder / name]
    is_file = Path(name).suffix in {".yaml", ".yml", ".json"}
    file = next((p for p in candidates if p.is_file()), None) if is_file else None
    if is_file and file is None:
        raise ConfigError(f"{where}: model={name!r}: no such model file; give a preset "
                          f"({', '.join(model_names())}) or an existing file")
    try:
        model = _model_file(file, where) if file else load_model(name)
        if row.seq_length is not None:
            model = parse(ModelSpec, {**model.model_dump(exclude_none=True), "seq_length": row.seq_length},
                          f"{where}: seq_length")
    except ConfigError as exc:
        raise ConfigError(f"{where}: model={name!r}: {exc}") from None
    return model


@dataclass(frozen=True)
class DraftJob:
    """A row with its model loaded; the deadline may still be a factor."""

    row: TraceRow
    index: int
    shape: Shape
    iterations: int


def draft(trace: Trace) -> list[DraftJob]:
    out = []
    models: dict[tuple[str, int | None], ModelSpec] = {}
    for index, row in enumerate(trace.rows):
        key = (row.model, row.seq_length)
        if key not in models:
            models[key] = resolve_model(row, trace.folder, trace.where(index))
        model = models[key]
        out.append(DraftJob(row, index, Shape(model, row.global_batch_size),
                            iterations(row, model.seq_length)))
    return out


def check_fits(trace: Trace, drafts: Sequence[DraftJob], curves: Mapping[str, ScalingCurve],
               capacity: int, gpu: str) -> None:
    """The cluster-too-small error: one line naming the first job whose model fits nowhere."""
    for d in drafts:
        if not curves[d.shape.key].fits:
            raise ConfigError(
                f"{trace.where(d.index)}: model={d.row.model!r} with global_batch_size="
                f"{d.row.global_batch_size} fits no layout on up to {capacity} {gpu} GPUs "
                f"(tp <= node size, pp | layers, dp | batch, recompute up to full); give --gpus "
                f"more GPUs, a larger GPU with --gpu, or a smaller model")


def resolve(trace: Trace, drafts: Sequence[DraftJob],
            reference: Mapping[str, ScalingCurve]) -> list[Workload]:
    """Absolute deadlines (factors against the reference curves)."""
    out = []
    for d in drafts:
        row = d.row
        if row.deadline_s is not None:
            deadline = row.deadline_s
        else:
            best = reference[d.shape.key].fastest_actual()
            assert best is not None, "check_fits runs first"
            assert row.deadline_factor is not None
            deadline = row.arrival_s + row.deadline_factor * d.iterations * best.iteration_time_s
        out.append(Workload(d.index, row.name, row.arrival_s, deadline, d.iterations, d.shape,
                            row.priority, row.gpus))
    return out


def fixed_request(work: Workload, levels: Levels) -> int:
    """The GPU count a FIFO/EDF job asks for: its row's ``gpus`` (rounded down to a level), else
    the fewest GPUs predicted to finish within its deadline when started at once, else the
    fastest level. 0 when the job has no level at all."""
    if len(levels.gpus) == 0:
        return 0
    if work.requested_gpus is not None:
        i = levels.floor(work.requested_gpus)
        return int(levels.gpus[i]) if i >= 0 else 0
    window = work.deadline_s - work.arrival_s
    for gpus, seconds in zip(levels.gpus, levels.predicted_s, strict=True):
        if work.iterations * seconds <= window:
            return int(gpus)
    return int(levels.gpus[-1])
