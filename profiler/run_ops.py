"""`profile ops`: select the unique ops, measure each on the device, write the profile.

Resumable: each measured op is journaled as soon as it is timed (`profiler.store.Journal`), and a
resumed run skips every key already in the journal or in the finished table. An op that cannot
run on this device (out of memory, unsupported dtype) is logged and left to the interpolated or
analytic model instead of stopping the run.
"""

from __future__ import annotations

import gc
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from profiler.device import catalog_hardware, device_info, now_iso, resolve_device
from profiler.kernels import Inputs, make_kernel
from profiler.selection import Selection, SelectionRequest, select_ops
from profiler.store import Journal, check_fresh_or_resume, existing_rows, write_profile
from profiler.timing import Stats, TimingConfig, time_cpu, time_cuda
from simulator.enums import Precision
from simulator.ops import Op
from simulator.profile_format import OPS_KEY, OPS_TABLE, ProfileMeta, shape_to_str

log = logging.getLogger(__name__)

TORCH_DTYPES = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}
Progress = Callable[[int, int, Op], None]


@dataclass(frozen=True)
class OpsRun:
    request: SelectionRequest
    device: str
    out: Path
    resume: bool = False
    timing: TimingConfig = field(default_factory=TimingConfig)
    seed: int = 0
    hardware: str | None = None  # catalog id; None = detect from the CUDA device name


@dataclass(frozen=True)
class OpsReport:
    selection: Selection
    measured_now: int
    already_done: int
    failed: tuple[str, ...]
    meta: ProfileMeta


def row_key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(row[c]) for c in OPS_KEY)


def op_row(op: Op, stats: Stats) -> dict[str, Any]:
    return {"kind": op.kind.value, "variant": op.variant, "phase": op.phase.value,
            "shape": shape_to_str(op.shape), "dtype_bytes": op.dtype_bytes, "flops": op.flops,
            "bytes": op.bytes, "median_s": stats.median_s, "p10_s": stats.p10_s,
            "p90_s": stats.p90_s, "repeats": stats.repeats, "example": op.name}



def measure_op(op: Op, row: int, device: torch.device, dtype: torch.dtype, seed: int,
               timing: TimingConfig) -> Stats:
    """Time one op with seeded random inputs (seed mixed with the op's key: order-independent)."""
    op_seed = (seed * 1_000_003 + zlib.crc32(repr(op.profile_key).encode())) % 2**31
    kernel = make_kernel(op, row, Inputs(device, dtype, op_seed))
    timer = time_cuda if device.type == "cuda" else time_cpu
    try:
        return timer(kernel, timing)
    finally:
        del kernel
        if device.type == "cuda":  # pragma: no cover - GPU only
            torch.cuda.empty_cache()


def profile_ops(run: OpsRun, progress: Progress | None = None) -> OpsReport:
    device = resolve_device(run.device)
    check_fresh_or_resume(run.out, OPS_TABLE, run.resume)
    selection = select_ops(run.request)
    info = device_info(device)
    journal = Journal(run.out, OPS_TABLE)
    done = existing_rows(run.out, OPS_TABLE) if run.resume else []
    done += journal.rows()
    done_keys = {row_key(r) for r in done}
    dtype = TORCH_DTYPES[run.request.precision]
    todo = [op for op in selection.unique if row_key(op_row(op, Stats(0, 0, 0, 0))) not in done_keys]
    failed: list[str] = []
    for i, op in enumerate(todo):
        if progress:
            progress(i, len(todo), op)
        try:
            stats = measure_op(op, selection.row_hints.get(op.profile_key, 0), device, dtype,
                               run.seed, run.timing)
        except (RuntimeError, torch.OutOfMemoryError) as exc:
            gc.collect()  # free what the failed op's closures held before the next op
            failed.append(f"{op.name} {op.profile_key}: {str(exc).splitlines()[0][:160]}")
            log.warning("could not measure %s %s: %s", op.name, op.shape, failed[-1])
            continue
        row = op_row(op, stats)
        journal.append(row)
        done.append(row)
    hardware = run.hardware or (catalog_hardware(info.name) if info.kind == "cuda" else None)
    meta = write_profile(run.out, OPS_TABLE, done, OPS_KEY, info, hardware, run.request.precision,
                         now_iso(), _selection_summary(run, selection))
    journal.remove()
    measured = len(todo) - len(failed)
    return OpsReport(selection, measured, len(selection.unique) - len(todo), tuple(failed), meta)


def _selection_summary(run: OpsRun, selection: Selection) -> dict[str, Any]:
    req = run.request
    return {"models": list(req.models), "tp": list(req.tps), "micro_batch": list(req.micro_batches),
            "seq": list(req.seqs), "flash_attention": list(req.attention),
            "sequence_parallel": list(req.sequence_parallel), "graphs": selection.graphs,
            "total_ops": selection.total_ops, "unique_ops": len(selection.unique),
            "skipped": list(selection.skipped), "seed": run.seed,
            "timing": {"warmup": run.timing.warmup, "min_repeats": run.timing.min_repeats,
                       "max_repeats": run.timing.max_repeats, "budget_s": run.timing.budget_s}}
