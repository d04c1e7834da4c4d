"""The MoE MLP of one layer (Megatron-Core `moe/moe_layer.py::MoELayer.forward`): router ->
dispatch (permute, host synchronization of the token counts when dropless, collectives) ->
experts -> combine (collectives, unpermute) -> plus the shared experts, a dense MLP on every
token (`moe/shared_experts.py`, split over tp like the attention)."""

from __future__ import annotations

from simulator.graph.layer_parts import LayerParts
from simulator.graph.mlp import dense_mlp
from simulator.graph.moe.dispatch import dispatch_comm, routed_tokens
from simulator.graph.moe.experts import experts, permute
from simulator.graph.moe.router import host_sync, router
from simulator.graph.primitives import ShapeContext
from simulator.job.enums import TokenDispatcher
from simulator.job.specs import Job


def moe_mlp(job: Job, c: ShapeContext, parts: LayerParts, acc: int) -> None:
    """Append one MoE layer's MLP half to `parts`."""
    m = job.model
    assert m.num_experts is not None
    r = routed_tokens(job, c)
    comm = dispatch_comm(job, c, r)
    saved_before = sum(op.saved_bytes for op in parts.fwd)
    router(job, c, parts, r.tokens, acc)
    if r.sync:
        parts.add(host_sync("moe.tokens_per_expert_to_host", 8.0 * m.num_experts))
    flex = job.training.moe_token_dispatcher is TokenDispatcher.FLEX
    sent = r.sent * r.recv_scale
    if not flex:  # DeepEP fuses the permutation into its dispatch kernel
        parts.add(permute(c, "moe.permute", r.tokens, sent))
    if r.local_experts > 1 or flex:  # sort by local expert (flex: expand to per-expert copies)
        parts.add(permute(c, "moe.sort_chunks", r.computed, r.computed))
    experts(job, c, parts, r, acc)
    if r.local_experts > 1 and not flex:
        parts.add(permute(c, "moe.unsort_chunks", r.computed, r.computed))
    unpermute_in = r.computed if flex else sent
    # The unpermute only sums each token's copies (its backward gathers them back by index): the
    # routing probabilities are applied in the experts' activation since Megatron-LM 2659630721
    # ("Memory efficient token permutation", Apr 2025): `token_dispatcher.py::combine_postprocess`
    # calls `unpermute` without probs and `experts.py::TEGroupedMLP.forward` weights the SwiGLU
    # (`weighted_bias_swiglu_impl`), which keeps its input as the unweighted one did (core_r0.14.0).
    parts.add(permute(c, "moe.unpermute", unpermute_in, r.tokens))
    parts.mlp_fwd_comm += [*comm.dispatch, *comm.combine]
    parts.mlp_bwd_comm += [*comm.combine_bwd, *comm.dispatch_bwd]
    if m.moe_shared_expert_intermediate_size:
        dense_mlp(job, c, parts, acc, m.moe_shared_expert_intermediate_size, "shared_expert")
    parts.moe_saved_bytes = sum(op.saved_bytes for op in parts.fwd) - saved_before
    # the all-to-all's send and receive buffers of the layer's token copies
    parts.dispatch_buffer_bytes = 2 * max(sent, r.computed) * c.h * c.dt
