"""Timing one kernel: warm-up, then repeated timed calls; median and spread.

On a GPU each call is bracketed by CUDA events (device time, host dispatch excluded, as vTrain's
CUPTI traces measure kernels); on a CPU by the monotonic `time.perf_counter_ns`.

`budget_s` is a bound on the wall time of one op's measurement, warm-up included: a call is only
started when the time spent so far plus the last call's duration fits in it, so repeats stop at
`max_repeats` or when the budget is spent, whichever comes first (`min_repeats` applies only
while the budget allows). When the budget ends during warm-up, the last warm-up call is the
sample. What the loop cannot bound is the first call of an op, whose duration is unknown until it
returns: `profiler.run_ops` predicts it from the device's measured rates and skips an op that
could not finish one call within the budget. `budget_s <= 0` means no time limit (counts only).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 3
    min_repeats: int = 5
    max_repeats: int = 30
    budget_s: float = 0.5


@dataclass(frozen=True)
class Stats:
    median_s: float
    p10_s: float
    p90_s: float
    repeats: int

    @classmethod
    def of(cls, samples: list[float]) -> Stats:
        arr = np.asarray(samples, float)
        p10, med, p90 = (_sig(float(x)) for x in np.percentile(arr, [10, 50, 90]))
        return cls(med, p10, p90, int(arr.size))


def _sig(seconds: float) -> float:
    """Six significant digits: far below run-to-run noise, and the tables stay readable."""
    return float(f"{seconds:.6g}")


def _fits(cfg: TimingConfig, began: float, last_s: float) -> bool:
    """Whether one more call, predicted to take as long as the last, fits in the budget."""
    return cfg.budget_s <= 0 or (time.perf_counter() - began) + last_s <= cfg.budget_s


def _call_s(fn: Callable[[], Any]) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) * 1e-9


def time_cpu(fn: Callable[[], Any], cfg: TimingConfig) -> Stats:
    began = time.perf_counter()
    last = 0.0
    for _ in range(cfg.warmup):
        if not _fits(cfg, began, last):
            break
        last = _call_s(fn)
    samples: list[float] = []
    while len(samples) < cfg.max_repeats and _fits(cfg, began, last):
        last = _call_s(fn)
        samples.append(last)
    if not samples:  # the warm-up spent the budget: its last call is the measurement
        samples = [last] if cfg.warmup else [_call_s(fn)]
    return Stats.of(samples)


def time_cuda(fn: Callable[[], Any], cfg: TimingConfig) -> Stats:  # pragma: no cover - GPU only
    """CUDA events in batches (one synchronize per batch); a batch holds as many calls as the
    remaining budget fits at the last measured duration."""
    import torch

    def synced(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / max(calls, 1)

    began = time.perf_counter()
    last = 0.0
    for _ in range(cfg.warmup):
        if not _fits(cfg, began, last):
            break
        last = synced(1)
    samples: list[float] = []
    while len(samples) < cfg.max_repeats and _fits(cfg, began, last):
        room = cfg.max_repeats - len(samples)
        if cfg.budget_s > 0 and last > 0:
            room = min(room, int((cfg.budget_s - (time.perf_counter() - began)) / last))
        batch = max(1, min(cfg.min_repeats, room))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(batch)]
        start_s = time.perf_counter()
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        last = (time.perf_counter() - start_s) / batch
        samples += [start.elapsed_time(end) * 1e-3 for start, end in events]
    if not samples:
        samples = [last] if cfg.warmup else [synced(1)]
    return Stats.of(samples)
