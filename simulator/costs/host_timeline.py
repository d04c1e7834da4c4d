"""The host issues, the GPU executes: two cursors over a sequence of phases.

Eager PyTorch launches kernels asynchronously; the host runs ahead of the GPU until something
waits. A phase with host time H, GPU time G and n kernels cannot start on the GPU before the
host has issued its first kernel (after about H/n) nor finish before the host has issued its
last one (H) and that kernel ran (G/n). So a GPU-heavy phase late in a host-bound stretch delays
what follows, and a host-heavy phase is absorbed by the lead the GPU-heavy ones built up: over a
long window this reduces to max(total host, total GPU), over a short one it keeps the order.
The first micro-batch may be a different sequence (see `cycle_time`).
Runs of identical phases (layers, micro-batches) are extrapolated once their increments repeat,
so the cost does not grow with the layer or micro-batch count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    host_s: float
    gpu_s: float
    kernels: float
    count: int = 1  # identical phases back to back


def advance(h: float, g: float, step: Step) -> tuple[float, float]:
    """Host and GPU cursors after one phase."""
    n = max(step.kernels, 1.0)
    start = max(g, h + step.host_s / n)
    g = max(start + step.gpu_s, h + step.host_s + step.gpu_s / n)
    return h + step.host_s, g


def _same(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) for x, y in zip(a, b, strict=True))


def run(h: float, g: float, step: Step, count: int) -> tuple[float, float]:
    """`count` repetitions of one phase."""
    prev: tuple[float, float] | None = None
    for i in range(count):
        h2, g2 = advance(h, g, step)
        inc = (h2 - h, g2 - g)
        h, g = h2, g2
        if prev is not None and _same(inc, prev):
            left = count - i - 1
            return h + inc[0] * left, g + inc[1] * left
        prev = inc
    return h, g


def cycle_time(sequence: list[Step], cycles: int, first: list[Step] | None = None) -> float:
    """Seconds until both cursors are done after `cycles` repetitions of `sequence`; with
    `first`, the first repetition is `first` instead (the first micro-batch of a gradient
    accumulation differs from the later ones: nothing to accumulate into yet)."""
    h = g = 0.0
    if first is not None and cycles > 0:
        for step in first:
            h, g = run(h, g, step, step.count)
        cycles -= 1
    prev: tuple[float, float] | None = None
    for c in range(cycles):
        h0, g0 = h, g
        for step in sequence:
            h, g = run(h, g, step, step.count)
        inc = (h - h0, g - g0)
        if prev is not None and _same(inc, prev):
            left = cycles - c - 1
            h, g = h + inc[0] * left, g + inc[1] * left
            break
        prev = inc
    return max(h, g)
