"""Context parallelism as a transformation of a layer's attention core: the same fused kernel
(simulator.graph.fused_attention) split into the steps each rank runs, and the exchanges of K and
V between them, as Transformer Engine runs them
(`transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`, used by
Megatron-Core's `--context-parallel-size` / `--cp-comm-type`).

The sequence is cut into 2 cp chunks and rank r holds chunks r and 2cp-1-r (causal load
balancing, `get_seq_chunk_ids_for_reordering_*`): every rank then computes the same number of
(query, key) pairs, S^2 / (2 cp) of the causal S^2 / 2.

- `p2p` (`AttnFuncWithCPAndKVP2P`): a ring of cp steps (TE's loop runs cp + 1 iterations: the
  last only corrects the output). Step 0 is causal attention of the local 2c tokens; each later
  step attends to K/V received from another rank, half of a 2c x 2c block (all local queries to
  the first half of the keys, or the second half of the queries to all keys). K/V for step i+1
  travel while step i computes (`flash_attn_p2p_communicate`): an exchange costs only what
  outlasts its step. Each step's partial output is merged (`flash_attn_fwd_out_correction`).
  The backward passes K/V and their gradients around the ring (twice the bytes) and returns
  the last dK/dV to its owner.
- `a2a` (Ulysses, `AttnFuncWithCPAndQKVOA2A`): all-to-all of Q, K and V from sequence to head
  sharding, causal attention of the whole sequence on heads / cp heads, all-to-all of the
  output back; backward the reverse. The all-to-alls block.
- `all_gather` (`AttnFuncWithCPAndKVAllGather`, Llama 3's recipe, Sec. 3.3.2 of the Llama 3
  paper): K and V all-gathered ("exposed"), each local chunk attends causally to the keys up to
  its end; backward gathers K/V again and reduce-scatters their gradients.
- `a2a+p2p`: a2a inside the inner group of `hierarchical_context_parallel_sizes[0]` ranks, then
  the p2p ring over the outer groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from simulator.graph.attention import AttentionCore
from simulator.graph.fused_attention import (
    HeadDims,
    causal_pairs,
    flash_pair,
    fused_core,
    lse_bytes,
    qkv_element_bytes,
    window_pairs,
)
from simulator.graph.ops import CommGroup, CommOp, Op, OpKind
from simulator.graph.primitives import ShapeContext, pointwise
from simulator.job.enums import CollectiveKind, CpCommType
from simulator.job.specs import Job

A2A, AG, RS, P2P = (CollectiveKind.ALL_TO_ALL, CollectiveKind.ALL_GATHER,
                    CollectiveKind.REDUCE_SCATTER, CollectiveKind.SEND_RECV)
NAME = "attn.cp"


@dataclass
class _Core:
    """An attention core being assembled (forward ops and comms in order)."""

    fwd: list[Op] = field(default_factory=list)
    bwd: list[Op] = field(default_factory=list)
    fwd_comm: list[CommOp] = field(default_factory=list)
    bwd_comm: list[CommOp] = field(default_factory=list)

    def add(self, pair: tuple[Op, Op]) -> None:
        self.fwd.append(pair[0])
        self.bwd.append(pair[1])

    def done(self, inputs: float, buffers: float) -> AttentionCore:
        return AttentionCore(self.fwd, self.bwd[::-1], inputs, tuple(self.fwd_comm),
                             tuple(self.bwd_comm), buffers)


def attention_core(job: Job, c: ShapeContext, dims: HeadDims, window: int | None) -> AttentionCore:
    """The fused attention core of one layer on one rank, transformed for context parallelism
    when cp > 1 (`c.s` is then the rank's share of the sequence)."""
    if c.cp == 1:
        return fused_core(job, c, dims, window)
    kind = job.parallel.cp_comm_type
    if kind is CpCommType.P2P:
        return ring_core(c, dims, c.cp, CommGroup.CP_RING)
    if kind is CpCommType.A2A:
        return ulysses_core(c, dims, c.cp, CommGroup.CP, window)
    if kind is CpCommType.ALL_GATHER:
        return all_gather_core(c, dims, window)
    hier = job.parallel.hierarchical_context_parallel_sizes
    assert hier is not None  # validated
    return hierarchical_core(c, dims, hier[0])


def _kv_exchange(name: str, nbytes: float, group: CommGroup, overlap: str = "") -> CommOp:
    return CommOp(name, P2P, nbytes, group, overlap)


def _ring_ops(core: _Core, c: ShapeContext, dims: HeadDims, ring: int, local: int,
              group: CommGroup) -> float:
    """Add the ring's steps and exchanges for `local` tokens per sequence on each of `ring`
    ranks with heads `dims`; returns the bytes of one 16-bit K/V exchange. With FP8 attention
    TE passes K/V around the ring in FP8 (their gradients stay 16-bit)."""
    half = local // 2
    kv = dims.kv_bytes(c.b * local, c.dt)
    kv_sent = dims.kv_bytes(c.b * local, qkv_element_bytes(c)) if c.fp8_attention else kv
    for i in range(ring):
        step = f"{NAME}.step{i}"
        if i == 0:
            core.add(flash_pair(step, c, dims, local, local, causal_pairs(local), 0.0))
            continue
        core.add(flash_pair(step, c, dims, local, half, local * half, 0.0, "cp_step"))
        core.fwd_comm.append(_kv_exchange(f"{NAME}.kv_exchange{i}", kv_sent, group,
                                          f"{NAME}.step{i - 1}"))
        core.bwd_comm.append(_kv_exchange(f"{NAME}.kv_dkv_exchange{i}",
                                          kv_sent + kv if c.fp8_attention else 2 * kv, group,
                                          f"{step}.bwd"))
        n = c.b * local * dims.heads * dims.dv  # merge the step's output into the running one
        core.fwd.append(pointwise(f"{NAME}.out_correction{i}", OpKind.ELEMENTWISE, n, c.dt, 2, 1,
                                  variant="cp_out_correction", flops_per_elem=4.0)[0])
    core.bwd_comm.append(_kv_exchange(f"{NAME}.dkv_return", kv, group))
    return kv


def ring_core(c: ShapeContext, dims: HeadDims, ring: int, group: CommGroup) -> AttentionCore:
    """`p2p`: the ring of `ring` steps over this rank's `c.s` tokens."""
    core = _Core()
    inputs = dims.qkv_bytes(c.tokens, qkv_element_bytes(c))
    kv = _ring_ops(core, c, dims, ring, c.s, group)
    _save_inputs(core, inputs + lse_bytes(c, dims, c.s))
    return core.done(inputs, 4 * kv)  # two receive buffers of K/V and dK/dV (backward)


def _save_inputs(core: _Core, saved: float) -> None:
    """The first kernel keeps the local Q, K, V and the log-sum-exp for the backward (the other
    ranks' K/V are exchanged again, not kept)."""
    core.fwd[0] = replace(core.fwd[0], saved_bytes=saved)


def _a2a_ops(core: _Core, c: ShapeContext, dims: HeadDims, group: CommGroup) -> None:
    """Ulysses' all-to-alls around the core: Q, K, V before it and the output after it;
    backward: the output's gradient before and dQ, dK, dV after (each the rank's tensor)."""
    T, dt = c.tokens, c.dt
    q, k, v = (dt * T * dims.heads * dims.dqk, dt * T * dims.kv_heads * dims.dqk,
               dt * T * dims.kv_heads * dims.dv)
    out = dims.out_bytes(T, dt)
    core.fwd_comm += [CommOp(f"{NAME}.a2a_{x}", A2A, n, group) for x, n in
                      (("q", q), ("k", k), ("v", v))]
    core.bwd_comm += [CommOp(f"{NAME}.a2a_dout", A2A, out, group)]
    core.bwd_comm += [CommOp(f"{NAME}.a2a_d{x}", A2A, n, group) for x, n in
                      (("q", q), ("k", k), ("v", v))]
    core.fwd_comm.append(CommOp(f"{NAME}.a2a_out", A2A, out, group))


def ulysses_core(c: ShapeContext, dims: HeadDims, n: int, group: CommGroup,
                 window: int | None) -> AttentionCore:
    """`a2a`: attention of the whole sequence on heads / n heads between two all-to-alls. It
    keeps the received Q, K, V, the log-sum-exp and its own output in the head-split layout: the
    all-to-all back writes a new tensor for the projection, which keeps that one too, so the
    layer holds the attention's output twice (TE 2.11 `context_parallel.py::
    AttnFuncWithCPAndQKVOA2A.forward`: `out_part = out_` before `flash_attn_a2a_communicate(out_,
    ..., before_attn=False)`, whose result is a fresh `torch.empty_like` + `.contiguous()`, and
    `f16_tensors = (q_part, k_part, v_part, out_part)` saved; lines 3485-3582 at c188b533)."""
    core = _Core()
    S = c.s * n
    local = dims.split(n)
    pairs, skv = (causal_pairs(S), S) if window is None else (window_pairs(S, window),
                                                              min(S, window + 1))
    inputs = dims.qkv_bytes(c.tokens, c.dt)
    core.add(flash_pair(f"{NAME}.attention", c, local, S, skv, pairs,
                        inputs + lse_bytes(c, local, S) + dims.out_bytes(c.tokens, c.dt)))
    _a2a_ops(core, c, dims, group)
    return core.done(inputs, inputs)  # the received Q, K, V of the whole sequence


def all_gather_core(c: ShapeContext, dims: HeadDims, window: int | None) -> AttentionCore:
    """`all_gather`: K/V of the whole sequence gathered, the two local chunks computed apart
    (on a rank in the middle of the sequence each attends to half of it on average)."""
    core = _Core()
    cp, S, half = c.cp, c.s * c.cp, c.s // 2
    total = causal_pairs(S) if window is None else window_pairs(S, window)
    per_chunk = total / (2 * cp)
    skv = S // 2 + half // 2 if window is None else min(S, window + half)
    inputs = dims.qkv_bytes(c.tokens, c.dt)
    for j in range(2):
        core.add(flash_pair(f"{NAME}.chunk{j}", c, dims, half, skv, per_chunk, 0.0, "cp_chunk"))
    _save_inputs(core, inputs + lse_bytes(c, dims, c.s))
    gathered = cp * dims.kv_bytes(c.tokens, c.dt)
    core.fwd_comm.append(CommOp(f"{NAME}.kv_all_gather", AG, gathered, CommGroup.CP))
    core.bwd_comm += [CommOp(f"{NAME}.kv_all_gather_bwd", AG, gathered, CommGroup.CP),
                      CommOp(f"{NAME}.dkv_reduce_scatter", RS, gathered, CommGroup.CP)]
    return core.done(inputs, 2 * gathered)  # gathered K/V and their gradients


def hierarchical_core(c: ShapeContext, dims: HeadDims, inner: int) -> AttentionCore:
    """`a2a+p2p`: all-to-all inside the inner group, then the ring over the cp / inner outer
    ranks on heads / inner heads and inner times the tokens."""
    ring = c.cp // inner
    core = _Core()
    local = dims.split(inner)
    tokens = c.s * inner
    inputs = dims.qkv_bytes(c.tokens, c.dt)
    kv = _ring_ops(core, c, local, ring, tokens, CommGroup.CP_RING)
    _save_inputs(core, inputs + lse_bytes(c, local, tokens))
    _a2a_ops(core, c, dims, CommGroup.CP_INNER)
    return core.done(inputs, max(inputs, 4 * kv))
