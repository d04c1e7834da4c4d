"""The router (Megatron-Core `moe/router.py::TopKRouter`): a linear layer from the hidden state to
one logit per expert (its weight replicated on the tensor-parallel ranks), the score function
(softmax or sigmoid, in fp32), top-k selection, the routing map and the load-balancing terms.
With sequence parallelism it runs on the rank's share of the tokens."""

from __future__ import annotations

from simulator.graph.layer_parts import LayerParts
from simulator.graph.ops import HOST_SYNC, Op, OpKind, Phase
from simulator.graph.primitives import FP32, ShapeContext, gemm, pointwise, small_kernels
from simulator.job.specs import Job

# top-k, its scatter into the routing map, the probabilities' normalization and the
# load-balancing statistics (aux loss or the expert-bias counts): small kernels per forward ...
ROUTER_FWD_KERNELS = 10
# ... and their backward (the probabilities' gradient through top-k and the score function)
ROUTER_BWD_KERNELS = 6


def router(job: Job, c: ShapeContext, parts: LayerParts, tokens: int, acc: int) -> float:
    """Append the router's ops for `tokens` tokens; returns the bytes they save."""
    m = job.model
    assert m.num_experts is not None
    e, dt = m.num_experts, c.dt
    logits = gemm("moe.router", tokens, e, m.hidden_size, dt, dt * tokens * m.hidden_size,
                  accumulate_bytes=acc)
    parts.add(logits)
    n = tokens * e
    score = pointwise("moe.router.score", OpKind.ELEMENTWISE, n, FP32, 1, 1, FP32 * n,
                      m.moe_router_score_function.value, bwd_traffic=3.0, flops_per_elem=5.0)
    parts.add(score)
    parts.add((small_kernels("moe.router.topk", Phase.FORWARD, ROUTER_FWD_KERNELS, n, 2 * n * FP32),
               small_kernels("moe.router.topk.bwd", Phase.BACKWARD, ROUTER_BWD_KERNELS, n,
                             2 * n * FP32)))
    parts.linears["moe.router"] = (m.hidden_size, e)
    parts.linear_tokens["moe.router"] = tokens
    return logits[0].saved_bytes + score[0].saved_bytes


def host_sync(name: str, nbytes: float) -> tuple[Op, list[Op]]:
    """The device-to-host copy of the tokens-per-expert counts that the host waits for before it
    can size the all-to-all (dropless routing: `MoEAlltoAllTokenDispatcher.preprocess` sets
    `cuda_sync_point`; `MoEAllGatherTokenDispatcher` calls `.cpu()`; DeepEP's dispatch waits for
    the received counts). The host loses its lead over the GPU (simulator.costs.blocks)."""
    op = Op(name, OpKind.ELEMENTWISE, Phase.FORWARD, (int(nbytes),), 8, 0.0, nbytes, 0.0,
            HOST_SYNC, 1)
    return op, []
