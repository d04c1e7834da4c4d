"""Transformer Engine's cached dummy weight gradients.

With Megatron-Core's DDP a TE linear accumulates its weight gradient straight into the fp32 main
gradient (`fuse_wgrad_accumulation`), and hands autograd a placeholder instead:
`transformer_engine/pytorch/module/base.py::get_dummy_wgrad` returns a tensor of the weight's
shape and dtype, allocated once per distinct (rows, cols, dtype) and cached for the life of the
process (`_dummy_wgrads`). So every GPU holds, after its first backward, one 16-bit tensor per
distinct linear-weight shape of its stage: the attention's projections, the MLP's or the shared
experts' fc1 and fc2, the routed experts' per-expert fc1 and fc2 (TE's grouped linears do the
same), split over tp (expert_tp for the experts) as the weights are. Layers of one kind share
their shapes, so the term grows with the layer's width, not with the depth: on SimuMax's Llama 3
405B rows at tp 1 it is 5.9 GiB a GPU.

Megatron-Core's own output layer (a `ColumnParallelLinear`, not a TE module) takes its placeholder
from the same cache whenever TE is installed: `megatron/core/tensor_parallel/layers.py`
(`LinearWithGradAccumulationAndAsyncCommunication.backward`, lines 579-594 at Megatron-LM
23e00ed, core_r0.14.0: `if HAVE_TE: grad_weight = get_dummy_wgrad(list(weight.main_grad.shape),
input.dtype)`). So the last stage also holds one 16-bit (padded vocabulary / tp, hidden) tensor
-- 1.96 GiB for Llama 3 405B at tp 2 -- shared with the multi-token-prediction heads, which call
the same output layer.
"""

from __future__ import annotations

import numpy as np

from simulator.graph.embedding import vocab_shard
from simulator.graph.primitives import gradient_accumulation_fused
from simulator.job.framework import semantics
from simulator.job.layer_pattern import LayerKind, layer_kinds, stage_kind_counts
from simulator.job.specs import Job, ModelSpec

Shape = tuple[int, int]  # (rows, cols) of one weight on one GPU


def _attention_shapes(model: ModelSpec, tp: int) -> set[Shape]:
    h, heads = model.hidden_size, model.num_attention_heads
    if model.multi_latent_attention:
        qk, rope, v = model.qk_head_dim, model.qk_pos_emb_head_dim, model.v_head_dim
        q_lora, kv_lora = model.q_lora_rank, model.kv_lora_rank
        q = ({(q_lora, h), (heads * (qk + rope) // tp, q_lora)} if q_lora
             else {(heads * (qk + rope) // tp, h)})
        return q | {(kv_lora + rope, h), (heads * (qk + v) // tp, kv_lora), (h, heads * v // tp)}
    d = model.head_dim
    return {((heads + 2 * model.query_groups) * d // tp, h), (h, heads * d // tp)}


def _mlp_shapes(model: ModelSpec, ffn: int, split: int) -> set[Shape]:
    gate = 2 if model.gated_mlp else 1
    return {(gate * ffn // split, model.hidden_size), (model.hidden_size, ffn // split)}


def kind_shapes(model: ModelSpec, kind: LayerKind, tp: int, expert_tp: int) -> set[Shape]:
    """The TE linear weights' shapes of one layer of `kind` on one GPU."""
    shapes = _attention_shapes(model, tp)
    if not kind.moe:
        return shapes | _mlp_shapes(model, model.ffn, tp)
    shared = model.moe_shared_expert_intermediate_size
    if shared:
        shapes |= _mlp_shapes(model, shared, tp)
    return shapes | _mlp_shapes(model, model.moe_ffn, expert_tp)


def output_layer_shape(job: Job) -> Shape:
    """The output layer's weight on one GPU: (padded vocabulary / tp, hidden)."""
    return (vocab_shard(job), job.model.hidden_size)


def holds_dummy_wgrads(job: Job) -> bool:
    """Megatron-Core on TE with its gradient accumulation fused (not Megatron-FSDP's sharded
    gradient buffers, which are not modelled here)."""
    return (semantics(job.training.framework).te_dummy_wgrads and gradient_accumulation_fused(job)
            and not job.shards_gradients)


def dummy_wgrad_bytes(job: Job) -> np.ndarray:
    """(pp,) bytes of the cached dummy weight gradients on one GPU of each stage."""
    p = job.parallel.pp
    if not holds_dummy_wgrads(job):
        return np.zeros(p)
    m, tp = job.model, job.parallel.tp
    kinds, counts = stage_kind_counts(job)
    element = job.training.precision.base.bytes  # the 16-bit parameters' dtype
    out = np.zeros(p)
    for stage in range(p):
        shapes: set[Shape] = set()
        for kind, n in zip(kinds, counts[:, stage].tolist(), strict=True):
            if n > 0:
                shapes |= kind_shapes(m, kind, tp, job.expert_tp)
        if stage == p - 1:
            shapes.add(output_layer_shape(job))
            if m.mtp_num_layers:  # its layer, and the 2h -> h projection
                shapes |= kind_shapes(m, layer_kinds(m)[-1], tp, job.expert_tp)
                shapes.add((m.hidden_size // tp, 2 * m.hidden_size))
        out[stage] = element * sum(r * c for r, c in shapes)
    return out
