"""`profile ops`: select the unique ops, measure each on the device, write the profile.

Resumable: each measured op is journaled as soon as it is timed (`profiler.store.Journal`), and a
resumed run skips every key already in the journal or in the finished table. An op that cannot
run on this device (out of memory, unsupported dtype) is logged and left to the interpolated or
analytic model instead of stopping the run.

The time budget per op (`TimingConfig.budget_s`, `--budget-s`) holds: `profiler.timing` never
starts a call that would overrun it, and an op whose *first* call alone would (a large fp16 GEMM
on a CPU takes minutes) is not started at all. Its call time is predicted from this device's
measured rates (`probe_rates`: a GEMM and a copy in the profile's dtype; a roofline, Williams et
al. 2009) and the op is left to the interpolated or analytic model with the reason.
"""

from __future__ import annotations

import gc
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from profiler.device import catalog_hardware, device_info, now_iso, resolve_device
from profiler.kernels import Inputs, make_kernel
from profiler.selection import Selection, SelectionRequest, select_ops
from profiler.store import Journal, check_fresh_or_resume, existing_rows, write_profile
from profiler.timing import Stats, TimingConfig, time_cpu, time_cuda
from simulator.costs.profile_format import OPS_KEY, OPS_TABLE, ProfileMeta, shape_to_str
from simulator.graph.ops import Op
from simulator.job.enums import Precision

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



@dataclass(frozen=True)
class DeviceRates:
    """FLOP/s and bytes/s this device reaches in the profile's dtype (`probe_rates`)."""

    flops_per_s: float
    bytes_per_s: float

    def call_s(self, op: Op) -> float:
        """Roofline prediction of one call of `op`."""
        return max(op.flops / self.flops_per_s, op.bytes / self.bytes_per_s)


def _best_s(fn: Callable[[], Any], device: torch.device, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats + 1):  # the first call warms up
        start = time.perf_counter()
        fn()
        if device.type == "cuda":  # pragma: no cover - GPU only
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def probe_rates(device: torch.device, dtype: torch.dtype, probe_s: float = 0.01) -> DeviceRates:
    """Measured GEMM and copy rates: square GEMMs double in size (256 -> 4096) until one takes
    `probe_s`, so that the rate is near what large ops reach without a slow probe on a CPU."""
    gen = torch.Generator().manual_seed(0)
    n, flops_per_s = 256, 0.0
    while True:
        a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
        seconds = _best_s(partial(torch.matmul, a, a), device)
        flops_per_s = max(flops_per_s, 2.0 * n**3 / seconds)
        if seconds >= probe_s or n >= 4096:
            break
        n *= 2
    x = torch.zeros(1 << 22, device=device, dtype=dtype)
    y = torch.empty_like(x)
    copy_s = _best_s(lambda: y.copy_(x), device)
    return DeviceRates(flops_per_s, 2.0 * x.numel() * x.element_size() / copy_s)


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
    budget = run.timing.budget_s
    rates = probe_rates(device, dtype) if todo and budget > 0 else None
    for i, op in enumerate(todo):
        if progress:
            progress(i, len(todo), op)
        predicted = rates.call_s(op) if rates is not None else 0.0
        if predicted > budget > 0:
            failed.append(f"{op.name} {op.profile_key}: one call would take ~{predicted:.3g} s on this "
                          f"device, over --budget-s {budget:g}; left to the interpolated or analytic "
                          f"model (raise --budget-s to measure it)")
            log.warning("not measuring %s %s: %s", op.name, op.shape, failed[-1])
            continue
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
