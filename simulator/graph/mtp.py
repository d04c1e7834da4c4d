"""Multi-token prediction (DeepSeek-V3 Sec. 2.2; Megatron-Core
`core/transformer/multi_token_prediction.py::MultiTokenPredictionLayer`), one block per depth on
the last pipeline stage: the embedding of the input shifted by one more token (the model's own
table), the norms of that embedding and of the previous depth's hidden state, their
concatenation projected from 2h to h (`eh_proj`, column-parallel), one transformer layer (of the
kind of the model's last layer), and the shared output layer with its cross-entropy loss. Under
fp8 the projection and the layer run in the recipe (Megatron-Core enters the global fp8 context
for them, whatever `first_last_layers_bf16` says), under fp4 in bf16
(simulator.job.layer_pattern.mtp_kind)."""

from __future__ import annotations

from simulator.graph.ops import Block
from simulator.graph.primitives import layer_context, norm_op
from simulator.graph.quantize import LinearSpec, linear, linear_comm
from simulator.job.layer_pattern import mtp_kind
from simulator.job.specs import Job


def build_mtp(job: Job, embedding: Block, layer: Block, head: Block) -> Block:
    """One MTP depth for one micro-batch, composed from the model's embedding, layer (of
    `mtp_kind`) and head blocks (the same kernels on the same shapes) and its own norms and
    projection."""
    m, c = job.model, layer_context(job, mtp_kind(job).high_precision)
    acc = c.grad_bytes if c.fused_accumulation else 0
    shard = 1 / c.t if c.sp else 1.0
    e_f, e_b = norm_op(c, "mtp.enorm", m.norm)
    h_f, h_b = norm_op(c, "mtp.hnorm", m.norm)
    spec = LinearSpec("mtp.eh_proj", c.tokens, m.hidden_size // c.t, 2 * m.hidden_size, True,
                      False, False, acc)
    proj_f, proj_b = linear(c, spec, 2 * c.tokens * 2 * m.hidden_size * shard)
    proj_c = linear_comm(c, spec)
    own_fwd = (e_f, h_f, *proj_f)
    own_bwd = (*proj_b, h_b, e_b)
    return Block(
        forward=(*embedding.forward, *own_fwd, *layer.forward, *head.forward),
        backward=(*head.backward, *layer.backward, *own_bwd, *embedding.backward),
        recompute=layer.recompute,
        forward_comm=(*embedding.forward_comm, *proj_c.forward, *layer.forward_comm,
                      *head.forward_comm),
        backward_comm=(*head.backward_comm, *layer.backward_comm, *proj_c.backward,
                       *embedding.backward_comm),
        recompute_comm=layer.recompute_comm,
        saved_bytes=(embedding.saved_bytes + sum(op.saved_bytes for op in own_fwd)
                     + layer.saved_bytes + head.saved_bytes),
        working_bytes=max(layer.working_bytes, head.working_bytes),
        forward_transient_bytes=head.forward_transient_bytes,
        host_cost=layer.host_cost,
        dispatch_buffer_bytes=layer.dispatch_buffer_bytes,
        kv_buffer_bytes=layer.kv_buffer_bytes,
        moe_saved_bytes=layer.moe_saved_bytes)
