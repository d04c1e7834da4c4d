"""Timing one kernel: warm-up, then repeated timed calls; median and spread.

On a GPU each call is bracketed by CUDA events (device time, host dispatch excluded, as vTrain's
CUPTI traces measure kernels); on a CPU by the monotonic `time.perf_counter_ns`. Repeats stop at
`max_repeats` or once `budget_s` of timed calls have run (never below `min_repeats`), so that large
ops do not dominate a profiling run.
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


def time_cpu(fn: Callable[[], Any], cfg: TimingConfig) -> Stats:
    for _ in range(cfg.warmup):
        fn()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < cfg.max_repeats and (len(samples) < cfg.min_repeats or spent < cfg.budget_s):
        start = time.perf_counter_ns()
        fn()
        seconds = (time.perf_counter_ns() - start) * 1e-9
        samples.append(seconds)
        spent += seconds
    return Stats.of(samples)


def time_cuda(fn: Callable[[], Any], cfg: TimingConfig) -> Stats:  # pragma: no cover - GPU only
    import torch

    for _ in range(cfg.warmup):
        fn()
    torch.cuda.synchronize()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < cfg.max_repeats and (len(samples) < cfg.min_repeats or spent < cfg.budget_s):
        batch = max(1, min(cfg.min_repeats, cfg.max_repeats - len(samples)))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(batch)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        for start, end in events:
            seconds = start.elapsed_time(end) * 1e-3
            samples.append(seconds)
            spent += seconds
    return Stats.of(samples)
