"""The CUDA launch queue seen from a trace: when it is full, the host waits and slows down.

The driver queues launched GPU work up to a fixed depth (about 1,000 kernels on the H100 traces
of ../shared/data/traces/h100: `mgpt_h1024_..._mb8` never has more than 1,022 launched and
unfinished). A GPU-bound iteration fills it and from then on every launch call waits for a slot.
Two things in a trace's host timings are then not the host's own pace:

1. the wait itself, inside the launch call (its duration beyond that of the same call at an
   uncongested queue), `queue_waits`;
2. everything else on the host runs slower too: in that trace an op's own host time (without its
   children and runtime calls) is 20-45% longer when the queue is full than the same op on the
   same shapes earlier in the iteration, when it was not (aten::empty 4.2 -> 5.9 us, aten::copy_
   5.2 -> 7.1 us, aten::addmm 43 -> 64 us), `pressure_slowdown`.

Neither matters for the traced iteration (the GPU paces it), but both would when its host times
stand for a host-paced job's; so they are measured here, per trace, and taken out.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from profiler.trace.events import RawTrace
from profiler.trace.links import NONE, Links

# Full: at least this share of the deepest queue the trace reached; uncongested: below this one.
FULL_QUEUE_SHARE, UNCONGESTED_SHARE = 0.9, 0.5
# The deepest queue is the driver's limit only when the trace sat there: at least this share of
# its launch calls found it (0.40-0.85 in the GPU-bound H100 traces, at most 0.14 in the others,
# whose deepest queue is a passing peak: 6 to 452 kernels).
PLATEAU_SHARE = 0.25
MIN_SAMPLES = 3  # uncongested calls of an (op, shapes) needed to know its unhurried time


def pending_at(trace: RawTrace, links: Links, times: np.ndarray) -> tuple[np.ndarray, float]:
    """GPU events launched and not finished at each of `times` (us), and the queue's capacity:
    the most the trace's launch calls found, when the queue sat at that level (PLATEAU_SHARE),
    else infinity (the queue never filled)."""
    launched = [(int(c), g) for g, c in enumerate(links.gpu_call) if c != NONE]
    if not launched:
        return np.zeros(len(times)), np.inf
    starts = np.sort([trace.runtime[c].ts for c, _ in launched])
    ends = np.sort([trace.gpu[g].end for _, g in launched])

    def pending(t: np.ndarray) -> np.ndarray:
        return (np.searchsorted(starts, t) - np.searchsorted(ends, t)).astype(float)

    at_launch = pending(starts)
    depth = float(at_launch.max())
    if (at_launch >= FULL_QUEUE_SHARE * depth).mean() < PLATEAU_SHARE:
        depth = np.inf
    return pending(np.asarray(times, dtype=float)), depth


def queue_waits(trace: RawTrace, links: Links) -> np.ndarray:
    """Microseconds each runtime call waited for a slot in a full launch queue (0 for calls
    that found room): its duration beyond the median of its name at an uncongested queue."""
    waits = np.zeros(len(trace.runtime))
    calls = np.array(sorted({int(c) for c in links.gpu_call if c != NONE}), dtype=np.int64)
    if not calls.size:
        return waits
    pending, depth = pending_at(trace, links, np.array([trace.runtime[c].ts for c in calls]))
    names = np.array([trace.runtime[c].name for c in calls], dtype=object)
    durations = np.array([trace.runtime[c].dur for c in calls])
    full, free = pending >= FULL_QUEUE_SHARE * depth, pending < UNCONGESTED_SHARE * depth
    for name in set(names[full]):
        mine = names == name
        if (mine & free).any():
            typical = float(np.median(durations[mine & free]))
            hit = mine & full
            waits[calls[hit]] = np.maximum(0.0, durations[hit] - typical)
    return waits


def pressure_excess(trace: RawTrace, links: Links) -> tuple[np.ndarray, float]:
    """Per CPU op, the microseconds of its own host time (without child ops and runtime calls)
    that the full queue added: for an op that started with the queue full, its time times
    (1 - unhurried / hurried), the medians of its (op, input shapes) at an uncongested queue
    (at least MIN_SAMPLES calls) and with it full, or the trace's typical slowdown for an op
    that never ran unhurried; and that typical slowdown (the median of the per-op ratios over
    the ops that ran with the queue full; 1 when the trace cannot tell, never below 1)."""
    own = _own_time(trace, links)
    pending, depth = pending_at(trace, links, np.array([op.ts for op in trace.ops]))
    full = pending >= FULL_QUEUE_SHARE * depth
    free = pending < UNCONGESTED_SHARE * depth
    times: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for i in np.flatnonzero(free | full):
        times[(trace.ops[i].name, trace.ops[i].dims)][int(full[i])].append(float(own[i]))
    ratio: dict[tuple[str, str], float] = {}
    weights: list[float] = []
    for key, (unhurried, hurried) in times.items():
        base = float(np.median(unhurried)) if len(unhurried) >= MIN_SAMPLES else 0.0
        if hurried and base > 0:
            ratio[key] = max(1.0, float(np.median(hurried)) / base)
            weights.extend([ratio[key]] * len(hurried))
    typical = float(np.median(weights)) if weights else 1.0
    excess = np.zeros(len(trace.ops))
    for i in np.flatnonzero(full):
        r = ratio.get((trace.ops[i].name, trace.ops[i].dims), typical)
        excess[i] = own[i] * (1.0 - 1.0 / r)
    return excess, typical


def _own_time(trace: RawTrace, links: Links) -> np.ndarray:
    """Each op's duration less its child ops' and the runtime calls made directly inside it."""
    durations = np.array([op.dur for op in trace.ops], dtype=float)
    own = durations.copy()
    parents = np.asarray(links.parent)
    kids = parents != NONE
    np.subtract.at(own, parents[kids], durations[kids])
    callers = np.asarray(links.call_op)
    inside = callers != NONE
    np.subtract.at(own, callers[inside], np.array([c.dur for c in trace.runtime])[inside])
    return np.maximum(own, 0.0)
