"""Megatron-Core's `--overlap-param-gather` (`overlap_param_gather`) in the closed form: what
it changes in the closed form's time, as physics, a term of every row's estimate since schema 26
(and a feature). Until then it was a term of MoE rows only: computed on the rows' own fields, a
GB200's 4-GPU trays made every data-parallel gather cross the network where the simulator keeps
it in the NVL72 domain, and on dense rows the term made the held-out error grow (2.21% -> 2.34%
over 6 splits, schema 24). On the effective rows (`surrogate.extended.effective_fields`: the
NVLink domain as the node, as the dense form's own tail gather that it replaces) dense rows
with the flag went from +0.030 / 0.078 to +0.003 / 0.045 (log residual mean / std, B200, not
interleaved), and the 6-split MAPE from 1.89% to 1.83% (runs/samples/moe-cp-40k-s15). On MoE
rows it includes the experts' gathers over expert_dp (`experts_one`, `experts_bucket`).

The simulator (simulator.timeline.param_gather) takes the distributed optimizer's parameter
all-gather out of the tail and makes each chunk's first forward wait for what has not arrived.
The dense form (surrogate.timing.iteration) charges the gather in the tail; this moves it:

- interleaved (v > 1, Megatron's aligned dispatch): chunks 0-1 are dispatched when the
  iteration starts and chunk k + 1 with chunk k, so the first chunk's share (1/v of the gather)
  is what the first forward waits for, and the rest runs beside compute;
- not interleaved: the first stage's first chunk prefetches one bucket ahead (its wait
  g + (n - 1) max(0, g - f) for n buckets of g seconds against f seconds of forward per
  bucket, simulator.timeline.param_gather.chunk_wait), and every later stage waits for its
  whole gather at its first forward; in the 1F1B warm-up those waits add up along the
  pipeline, so the critical path carries all p of them.

What runs beside compute slows it (simulator.timeline.contention: the `comm_slowdown` per
second beside)."""

from __future__ import annotations

from typing import Any

from simulator.jit import njit
from surrogate.compiled_ops import Vec, maximum, minimum, skips, where
from surrogate.physics import Rows
from surrogate.timing import collective_s, dp_placement, grad_buckets


@njit(inline=True)
def param_gather_shift_s(r: Rows, opg: Any, stage: Vec, bucketed: Vec, stage_mb_s: Vec,
                         experts_one: Vec, experts_bucket: Vec) -> Vec:
    """Seconds the parameter gather under the next forward would add to the dense estimate
    (negative: save) on rows with `opg`; zero elsewhere. `r`: the effective rows the dense form
    ran on (`surrogate.extended.effective_fields`); `stage`: the stage's
    parameters gathered over dp (a MoE row's outside its routed experts), `bucketed`: all the
    stage's parameters, which size the gradient buckets (simulator.job.buckets), `stage_mb_s`:
    one micro-batch's stage time; `experts_one`, `experts_bucket`: the routed experts' gather
    over expert_dp in one call and per bucket (0 on dense rows)."""
    d, p, v = r.d, r.p, r.v
    if skips(opg & (d > 1)):  # a compiled row without the overlapped gather: 0.0 either way
        return 0.0
    dense_gather = collective_s(r, 2.0 * stage, d, dp_placement(r), r.gpn, 1.0, True)
    gather = dense_gather + experts_one  # what a chunk's first forward waits for, whole
    element = where(r.bf16 > 0, 4.0, 2.0)  # the gradients the buckets are sized by
    overlapped = 1.0  # the flag requires overlapped reduction
    n0 = maximum(grad_buckets(bucketed * element, d, v, element, overlapped) - (v - 1), 1.0)
    forward = stage_mb_s / v / 3  # one chunk's forward of one micro-batch
    # each of the first chunk's buckets is its own all-gather, paying its latency
    g0 = collective_s(r, 2.0 * stage / v, d, dp_placement(r), r.gpn, n0, True) / n0 + experts_bucket
    f0 = forward / n0
    first = g0 + (n0 - 1) * maximum(0.0, g0 - f0)
    exposed = where(v > 1, gather / v, first + (p - 1) * gather)
    beside = maximum(gather - minimum(exposed, gather), 0.0)
    # less what the dense form's tail charged for the gather (the experts' tail leaves theirs
    # out under overlap_param_gather, as the simulator's tail: dp_terms.expert_tail_s)
    shift = exposed + r.hw.comm_slowdown * beside - dense_gather
    return where(opg & (d > 1), shift, 0.0)
