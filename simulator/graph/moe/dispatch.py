"""Token dispatch and combine (Megatron-Core `moe/token_dispatcher.py`).

`alltoall` (`MoEAlltoAllTokenDispatcher`): permute the rank's tokens into one copy per chosen
expert -> all-to-all over the ep ranks (tokens and their probabilities) -> all-gather over the
expert-tp ranks -> sort the chunks by local expert -> experts -> the reverse: sort back ->
reduce-scatter over expert tp -> all-to-all -> unpermute (the probability-weighted sum of a
token's k copies). Two all-to-alls forward and two backward per layer and micro-batch.
`allgather` (`MoEAllGatherTokenDispatcher`): every token (with the routing map and
probabilities) all-gathered over the expert_tp x ep ranks, the local experts' copies permuted
out, and the outputs reduce-scattered back. `flex` (DeepEP / HybridEP, `fused_a2a.py`): each
token sent once to every rank that holds one of its experts, the permutation fused into the
kernel (deepseek-ai/DeepEP README).

Token counts are per rank and micro-batch; the busiest rank (the one the pipeline waits for)
receives `moe_load_imbalance` times the mean. With `moe_expert_capacity_factor` an expert takes
at most capacity = ceil(tokens x k x factor / experts) tokens from each rank (`moe_utils.py::
get_capacity`); with `moe_pad_expert_input_to_capacity` every expert computes exactly that many.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.graph.ops import OTHER_DIRECTION, CommGroup, CommOp
from simulator.graph.primitives import FP32, ShapeContext
from simulator.job.enums import CollectiveKind, TokenDispatcher
from simulator.job.specs import Job

A2A, AG, RS = CollectiveKind.ALL_TO_ALL, CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
ALIGN = 8  # the per-expert token count is rounded up to whole 16-byte rows (see `routed_tokens`)


@dataclass(frozen=True)
class RoutedTokens:
    """What one rank's MoE layer moves and computes per micro-batch."""

    tokens: int  # tokens entering the layer on this rank
    sent: float  # token copies this rank dispatches (one per chosen expert; flex: per rank)
    recv_scale: float  # the busiest rank receives this many times the mean
    local_experts: int
    per_expert: int  # tokens each local expert computes on the busiest rank
    sync: bool  # the host waits for the tokens-per-expert counts

    @property
    def computed(self) -> int:
        """Token copies the local experts compute on the busiest rank."""
        return self.per_expert * self.local_experts


def distinct_ranks(experts: int, topk: int, ranks: int) -> float:
    """Expected number of distinct ranks among a token's k experts when the k are drawn
    uniformly without replacement from `experts` spread evenly over `ranks` (balanced routing):
    ranks x (1 - C(E - E/ranks, k) / C(E, k))."""
    if ranks == 1:
        return 1.0
    per = experts // ranks
    miss = math.comb(experts - per, topk) / math.comb(experts, topk)
    return ranks * (1.0 - miss)


def routed_tokens(job: Job, c: ShapeContext) -> RoutedTokens:
    """Token copies sent, received and computed on the busiest rank (see the module docstring).
    The per-expert count is rounded up to a multiple of 8: grouped GEMMs take any token count, and
    the token dimension is no leading dimension, so it must not send the analytic model down its
    unaligned-GEMM path."""
    m, t, p = job.model, job.training, job.parallel
    assert m.num_experts is not None
    e, k, ep, etp = m.num_experts, m.moe_router_topk, p.ep, job.expert_tp
    tokens = int(c.sp_tokens)
    local = e // ep
    imbalance = t.moe_load_imbalance
    mean = tokens * k * etp * ep / e  # tokens per local expert, balanced
    sync = True
    if t.moe_expert_capacity_factor is not None:
        capacity = math.ceil(tokens * k / e * t.moe_expert_capacity_factor)
        cap = capacity * ep * etp
        if t.moe_pad_expert_input_to_capacity:
            sync = False
            return RoutedTokens(tokens, capacity * e, 1.0, local, aligned_tokens(cap), sync)
        scale = min(imbalance, cap / mean)
    else:
        scale = imbalance
    if t.moe_token_dispatcher is TokenDispatcher.ALLGATHER:
        sync = True
    sent = tokens * (distinct_ranks(e, k, ep) if t.moe_token_dispatcher is TokenDispatcher.FLEX
                     else k)
    return RoutedTokens(tokens, sent, scale, local, aligned_tokens(mean * scale), sync)


def aligned_tokens(n: float) -> int:
    """A per-expert token count rounded up to whole 16-byte rows (see `routed_tokens`)."""
    return max(ALIGN, math.ceil(n / ALIGN) * ALIGN)


@dataclass(frozen=True)
class DispatchComm:
    """The collectives of one MoE layer: before the experts (dispatch) and after (combine), in
    each direction."""

    dispatch: tuple[CommOp, ...]
    combine: tuple[CommOp, ...]
    dispatch_bwd: tuple[CommOp, ...]
    combine_bwd: tuple[CommOp, ...]


def dispatch_comm(job: Job, c: ShapeContext, r: RoutedTokens) -> DispatchComm:
    """The dispatcher's collectives for `r` (none when ep = expert_tp = 1)."""
    p, etp, e = job.parallel, job.expert_tp, job.model.num_experts
    assert e is not None
    if p.ep * etp == 1:
        return DispatchComm((), (), (), ())
    h, dt = c.h, c.dt
    kind = job.training.moe_token_dispatcher
    if kind is TokenDispatcher.ALLGATHER:
        return _allgather_comm(job, c, r)
    overlap = OTHER_DIRECTION if job.training.moe_overlap_ep_comm else ""
    tokens = r.sent * r.recv_scale * h * dt
    probs = r.sent * r.recv_scale * FP32

    def a2a(name: str, nbytes: float) -> CommOp:
        return CommOp(name, kind_of, nbytes, CommGroup.EP, overlap)

    kind_of = CollectiveKind.DEEPEP_ALL_TO_ALL if kind is TokenDispatcher.FLEX else A2A

    counts = CommOp("moe.tokens_per_expert_all_gather", AG, 8.0 * e * p.ep * etp,
                    CommGroup.EXPERT_TP_EP)
    gathered = r.computed * h * dt
    ag = (CommOp("moe.etp_all_gather", AG, gathered, CommGroup.EXPERT_TP),) if etp > 1 else ()
    rs = (CommOp("moe.etp_reduce_scatter", RS, gathered, CommGroup.EXPERT_TP),) if etp > 1 else ()
    agb = (CommOp("moe.etp_all_gather.bwd", AG, gathered, CommGroup.EXPERT_TP),) if etp > 1 else ()
    rsb = (CommOp("moe.etp_reduce_scatter.bwd", RS, gathered, CommGroup.EXPERT_TP),) if etp > 1 else ()
    if kind is TokenDispatcher.FLEX:  # DeepEP: one fused dispatch / combine kernel each way
        return DispatchComm((a2a("moe.dispatch", tokens + probs),), (a2a("moe.combine", tokens),),
                            (a2a("moe.dispatch.bwd", tokens + probs),),
                            (a2a("moe.combine.bwd", tokens),))
    return DispatchComm(
        dispatch=(counts, a2a("moe.dispatch_a2a", tokens), a2a("moe.dispatch_a2a_probs", probs), *ag),
        combine=(*rs, a2a("moe.combine_a2a", tokens)),
        dispatch_bwd=(*rsb, a2a("moe.dispatch_a2a.bwd", tokens), a2a("moe.dispatch_a2a_probs.bwd", probs)),
        combine_bwd=(a2a("moe.combine_a2a.bwd", tokens), *agb))


def _allgather_comm(job: Job, c: ShapeContext, r: RoutedTokens) -> DispatchComm:
    """`allgather`: the tokens, routing map and probabilities of the expert_tp x ep ranks."""
    m, p = job.model, job.parallel
    assert m.num_experts is not None
    group = p.ep * job.expert_tp
    hidden = r.tokens * group * c.h * c.dt * r.recv_scale
    routing = r.tokens * group * m.num_experts * (1 + FP32)  # bool map and fp32 probabilities
    g = CommGroup.EXPERT_TP_EP
    return DispatchComm(
        (CommOp("moe.routing_all_gather", AG, routing, g), CommOp("moe.all_gather", AG, hidden, g)),
        (CommOp("moe.reduce_scatter", RS, hidden, g),),
        (CommOp("moe.all_gather.bwd", RS, hidden, g),),
        (CommOp("moe.reduce_scatter.bwd", AG, hidden, g),))
