"""Cut one training iteration of a trace into phases, from the trace's own structure.

No model-specific names are used; only what every PyTorch training loop produces:

1. **Iterations**: ``ProfilerStep#N`` annotations (torch.profiler's ``step()``) when present,
   else the whole trace is one iteration.
2. **Forward and backward**: the autograd engine records each backward node it runs as a
   top-level ``autograd::engine::evaluate_function: <Node>`` op (on its device thread on GPUs,
   on the calling thread on CPU). Top-level ops alternate in runs: forward (main thread), backward,
   forward, ... ; each (forward run, backward run) pair is one micro-batch, and what the main
   thread does after the last backward is the optimizer step (and gradient zeroing).
3. **Layers**: in each forward run the transformer layers are the longest block of top-level
   ops (name + input shapes) that repeats ``num_layers`` times back to back (the job says how
   many); what precedes is the embedding, what follows the head and loss. A layer starts where
   the repetition starts (pre-norm models repeat the layer's first op, a norm, in the head).
4. **Backward**: each backward node carries the autograd sequence number of the forward op
   that created it, so it belongs to that op's phase; nodes without one (AccumulateGrad) belong
   to the node before them.
5. **Recompute**: ops inside a backward node that record a sequence number are forward ops run
   again under grad mode (activation checkpointing, reentrant or not), i.e. that layer's
   recompute; the node's own backward kernels record none (the engine runs them without grad).

Each top-level op owns the host time from its start to the next top-level op's start, so the
host windows of the phases tile the iteration. A kernel belongs to the phase of the op that
launched it; kernels with no launching op are "unattributed" and reported as such.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from profiler.trace.events import RawTrace
from profiler.trace.links import NONE, Links
from simulator.costs.profile_format import TracePhase
from simulator.errors import DataError

BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
STEP_ANNOTATION = re.compile(r"^ProfilerStep#\d+$")


class PhaseCutError(DataError):
    """The trace's structure does not match the job (layers, micro-batches)."""


@dataclass(frozen=True)
class PhaseInstance:
    kind: TracePhase
    iteration: int
    micro_batch: int  # -1 for per-iteration phases (optimizer)
    layer: int  # -1 outside the layers


@dataclass
class IterationCut:
    start: float  # host time (us) where the iteration's first op starts
    end: float  # last op end on the host
    micro_batches: int
    layer_period: int  # top-level forward ops per layer


@dataclass
class Cut:
    """Phase instances, and for every top-level op and GPU event the instance it belongs to."""

    instances: list[PhaseInstance] = field(default_factory=list)
    op_instance: dict[int, int] = field(default_factory=dict)  # top-level op -> instance
    recompute_roots: dict[int, int] = field(default_factory=dict)  # outermost recompute op -> inst
    gpu_instance: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    iterations: list[IterationCut] = field(default_factory=list)
    unmapped_backward: int = 0  # backward nodes whose forward op was not found

    def add(self, kind: TracePhase, iteration: int, micro_batch: int = -1, layer: int = -1) -> int:
        self.instances.append(PhaseInstance(kind, iteration, micro_batch, layer))
        return len(self.instances) - 1


def is_backward(name: str) -> bool:
    return name.startswith(BACKWARD_PREFIX)


def find_layers(tokens: list[str], layers: int) -> tuple[int, int] | None:
    """(start, period) of the longest block repeated exactly `layers` times back to back,
    leftmost; None when there is none."""
    if layers < 2:
        return None
    ids = np.unique(np.array(tokens, dtype=object), return_inverse=True)[1] if tokens else np.zeros(0)
    n = len(ids)
    for period in range(n // layers, 0, -1):
        equal = ids[:-period] == ids[period:]
        # runs of equal positions, each as a number of back-to-back repetitions
        padded = np.concatenate(([0], equal.astype(np.int8), [0]))
        edges = np.flatnonzero(np.diff(padded))
        starts, ends = edges[::2], edges[1::2]
        # exactly `layers` repetitions: a block that repeats more often is not this model's layer
        repeats = (ends - starts) // period + 1
        exact = np.flatnonzero(repeats == layers)
        if exact.size:
            return int(starts[exact[0]]), period
    return None


def _main_thread(trace: RawTrace, tops: list[int]) -> object:
    counts = Counter(trace.ops[i].tid for i in tops if not is_backward(trace.ops[i].name))
    if not counts:
        raise PhaseCutError(f"{trace.path}: no forward operators found (only autograd backward "
                            f"nodes); the trace must cover a whole training iteration")
    return counts.most_common(1)[0][0]


def _iteration_windows(trace: RawTrace) -> list[tuple[float, float]]:
    steps = sorted((a.ts, a.ts + a.dur) for a in trace.annotations if STEP_ANNOTATION.match(a.name))
    if steps:
        return steps
    return [(trace.ops[0].ts, max(op.end for op in trace.ops) + 1.0)]


def _runs(trace: RawTrace, tops: list[int]) -> list[tuple[bool, list[int]]]:
    """Consecutive top-level ops grouped as (is_backward, ops)."""
    runs: list[tuple[bool, list[int]]] = []
    for i in tops:
        back = is_backward(trace.ops[i].name)
        if runs and runs[-1][0] == back:
            runs[-1][1].append(i)
        else:
            runs.append((back, [i]))
    return runs


def cut(trace: RawTrace, links: Links, num_layers: int) -> Cut:
    """Cut every iteration of `trace` (see the module docstring)."""
    top_level = [i for i in range(len(trace.ops)) if links.parent[i] == NONE]
    main = _main_thread(trace, top_level)
    tops = [i for i in top_level if trace.ops[i].tid == main or is_backward(trace.ops[i].name)]
    children = _children(links)
    result = Cut()
    for it, (lo, hi) in enumerate(_iteration_windows(trace)):
        mine = [i for i in tops if lo <= trace.ops[i].ts < hi]
        if mine:
            _cut_iteration(trace, links, children, mine, num_layers, it, result)
    if not result.iterations:
        raise PhaseCutError(f"{trace.path}: no iteration with forward and backward found")
    result.gpu_instance = _gpu_instances(trace, links, result)
    return result


def _children(links: Links) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(links.parent):
        if p != NONE:
            kids.setdefault(int(p), []).append(i)
    return kids


def _cut_iteration(trace: RawTrace, links: Links, children: dict[int, list[int]], tops: list[int],
                   num_layers: int, it: int, result: Cut) -> None:
    runs = _runs(trace, tops)
    while runs and runs[0][0]:  # a backward tail of the previous iteration
        runs.pop(0)
    pairs = [(runs[k][1], runs[k + 1][1]) for k in range(0, len(runs) - 1, 2) if runs[k + 1][0]]
    if not pairs:
        return
    period = 0
    for mb, (forward, backward) in enumerate(pairs):
        seq_phase, period = _cut_forward(trace, links, children, forward, num_layers, it, mb,
                                         result)
        _cut_backward(trace, children, backward, seq_phase, it, mb, result)
    tail = runs[2 * len(pairs):]
    last_ops = [i for back, ops in tail for i in ops]
    if last_ops:
        opt = result.add(TracePhase.OPTIMIZER, it)
        for i in last_ops:
            result.op_instance[i] = opt
    end = max(trace.ops[i].end for i in tops)
    result.iterations.append(IterationCut(trace.ops[tops[0]].ts, end, len(pairs), period))


def _cut_forward(trace: RawTrace, links: Links, children: dict[int, list[int]], forward: list[int],
                 num_layers: int, it: int, mb: int, result: Cut) -> tuple[dict[int, int], int]:
    """Assign the forward run's ops to embedding / layers / head; map sequence numbers."""
    tokens = [f"{trace.ops[i].name}|{trace.ops[i].dims}" for i in forward]
    found = find_layers(tokens, num_layers)
    if found is None:
        raise PhaseCutError(
            f"{trace.path}: iteration {it}, micro-batch {mb}: no block of operators repeats "
            f"{num_layers} times in the forward pass ({len(forward)} top-level ops); does the job's "
            f"model.num_layers ({num_layers}) match the traced model?")
    start, period = found
    emb = result.add(TracePhase.EMBEDDING_FORWARD, it, mb)
    layer_ids = [result.add(TracePhase.LAYER_FORWARD, it, mb, j) for j in range(num_layers)]
    head = result.add(TracePhase.HEAD_FORWARD, it, mb)
    seq_phase: dict[int, int] = {}
    for pos, i in enumerate(forward):
        k = pos - start
        if k < 0:
            inst, owner = emb, ("embedding", -1)
        elif k < num_layers * period:
            inst, owner = layer_ids[k // period], ("layer", k // period)
        else:
            inst, owner = head, ("head", -1)
        result.op_instance[i] = inst
        for j in _subtree(children, i):
            seq = trace.ops[j].seq
            if seq is not None:
                seq_phase[seq] = _backward_kind_key(owner)
    return seq_phase, period


def _backward_kind_key(owner: tuple[str, int]) -> int:
    """Encode (block, layer) as an int: -1 embedding, -2 head, layer index otherwise."""
    block, layer = owner
    return {"embedding": -1, "head": -2}.get(block, layer)


def _subtree(children: dict[int, list[int]], root: int) -> list[int]:
    out, stack = [], [root]
    while stack:
        i = stack.pop()
        out.append(i)
        stack.extend(children.get(i, ()))
    return out


def _cut_backward(trace: RawTrace, children: dict[int, list[int]], backward: list[int],
                  seq_phase: dict[int, int], it: int, mb: int, result: Cut) -> None:
    instances: dict[int, int] = {}
    recompute: dict[int, int] = {}

    def instance(key: int) -> int:
        if key not in instances:
            kind = {-1: TracePhase.EMBEDDING_BACKWARD, -2: TracePhase.HEAD_BACKWARD}.get(
                key, TracePhase.LAYER_BACKWARD)
            instances[key] = result.add(kind, it, mb, key if key >= 0 else -1)
        return instances[key]

    current = -2  # the loss's backward comes first
    for i in backward:
        seq = trace.ops[i].seq
        if seq is not None:
            if seq in seq_phase:
                current = seq_phase[seq]
            else:
                result.unmapped_backward += 1
        inst = instance(current)
        result.op_instance[i] = inst
        roots = _recompute_roots(trace, children, i)
        if roots and current >= 0:
            if current not in recompute:
                recompute[current] = result.add(TracePhase.LAYER_RECOMPUTE, it, mb, current)
            for r in roots:
                result.recompute_roots[r] = recompute[current]


def _recompute_roots(trace: RawTrace, children: dict[int, list[int]], top: int) -> list[int]:
    """Outermost ops under backward node `top` that re-run forward ops (they record a sequence
    number and are neither an engine ``evaluate_function`` nor the node's own op)."""
    roots: list[int] = []
    stack = [(k, top) for k in children.get(top, ())]
    while stack:
        i, parent = stack.pop()
        name, parent_name = trace.ops[i].name, trace.ops[parent].name
        node_op = is_backward(parent_name) and name == parent_name[len(BACKWARD_PREFIX):]
        if is_backward(name) or node_op or trace.ops[i].seq is None:
            stack.extend((k, i) for k in children.get(i, ()))
        else:
            roots.append(i)
    return roots


def _gpu_instances(trace: RawTrace, links: Links, result: Cut) -> np.ndarray:
    """Each GPU event's phase instance: that of its launching op's top-level op (recompute when
    launched inside a recompute root); NONE when unlinked or outside every phase."""
    root_of: dict[int, int] = {}
    for root, inst in result.recompute_roots.items():
        root_of[root] = inst
    out = np.full(len(trace.gpu), NONE, dtype=np.int64)
    for g in range(len(trace.gpu)):
        op = links.gpu_op(g)
        if op == NONE:
            continue
        rec = _recompute_instance(links, root_of, op)
        out[g] = rec if rec is not None else result.op_instance.get(int(links.top[op]), NONE)
    return out


def _recompute_instance(links: Links, root_of: dict[int, int], op: int) -> int | None:
    if not root_of:
        return None
    i = op
    while i != NONE:
        if i in root_of:
            return root_of[i]
        i = int(links.parent[i])
    return None
