"""Who launched what: CPU-op nesting per thread, and each GPU kernel's launching call and op.

A kernel carries the ``correlation`` id of the runtime call (cudaLaunchKernel, cuLaunchKernelEx,
cudaMemsetAsync, ...) that enqueued it; that call runs inside a stack of CPU ops on its thread
(e.g. ``aten::linear > aten::addmm``). Nesting is recovered from time containment on each thread,
as the trace viewers do (Kineto records no parent ids for CPU ops).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiler.trace.events import RawTrace

NONE = -1


@dataclass(frozen=True)
class Links:
    """Index arrays over `RawTrace` lists; NONE (-1) where there is no such event."""

    parent: np.ndarray  # per op: its enclosing op
    top: np.ndarray  # per op: its outermost enclosing op (itself when top-level)
    call_op: np.ndarray  # per runtime call: the innermost op around it
    gpu_call: np.ndarray  # per GPU event: the runtime call that launched it

    def gpu_op(self, g: int) -> int:
        """The innermost CPU op that launched GPU event `g` (NONE when unlinked)."""
        call = int(self.gpu_call[g])
        return NONE if call == NONE else int(self.call_op[call])


def link(trace: RawTrace) -> Links:
    n_ops = len(trace.ops)
    parent = np.full(n_ops, NONE, dtype=np.int64)
    call_op = np.full(len(trace.runtime), NONE, dtype=np.int64)
    # ops (sorted by start, longest first) and calls in one sweep per thread: a stack of open ops
    items: dict[object, list[tuple[float, int, int]]] = {}
    for i, op in enumerate(trace.ops):
        items.setdefault(op.tid, []).append((op.ts, 0, i))
    for j, call in enumerate(trace.runtime):
        items.setdefault(call.tid, []).append((call.ts, 1, j))
    for seq in items.values():
        seq.sort()
        stack: list[int] = []
        for ts, kind, idx in seq:
            while stack and trace.ops[stack[-1]].end <= ts:
                stack.pop()
            if kind == 0:
                parent[idx] = stack[-1] if stack else NONE
                stack.append(idx)
            else:
                call_op[idx] = stack[-1] if stack else NONE
    top = np.arange(n_ops)
    for i in range(n_ops):  # parents start before children: their `top` is final already
        if parent[i] != NONE:
            top[i] = top[parent[i]]
    by_corr = {c.corr: j for j, c in enumerate(trace.runtime) if c.corr is not None}
    gpu_call = np.array([by_corr.get(g.corr, NONE) if g.corr is not None else NONE
                         for g in trace.gpu], dtype=np.int64)
    return Links(parent, top, call_op, gpu_call)
