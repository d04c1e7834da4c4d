"""FLOPs per iteration: the model's (for MFU) and what the hardware runs (for HFU).

Model FLOPs follow Narayanan et al. 2021 (Sec. 5.1, Appendix): matmul FLOPs only, forward plus
twice for backward, generalized to GQA and gated MLPs; for a GPT model they equal
72 B s l h^2 (1 + s/(6h) + V/(12 l h)). Hardware FLOPs add the recomputed forward (full: whole
layers; selective: the attention score and value matmuls -- flash attention included, since
Megatron checkpoints the core attention whatever its kernel and runs its forward again -- or the
matmuls of the chosen `training.recompute_modules`).
They are properties of the job's graph, not of a simulation's timing, so they live here and the
report divides them by its time (simulator.report.metrics).
"""

from __future__ import annotations

from simulator.job.enums import Recompute, RecomputeModule
from simulator.job.layer_pattern import LayerKind, layer_kinds
from simulator.job.specs import Job, ModelSpec


def layer_forward_flops_per_token(model: ModelSpec) -> float:
    h, d, f = model.hidden_size, model.head_dim, model.ffn
    qkv = h * (h + 2 * model.query_groups * d)
    up = h * f * (2 if model.gated_mlp else 1)
    attention = 2 * model.seq_length * h  # QK^T and attention x V
    return 2.0 * (qkv + h * h + up + f * h + attention)


def _plain(model: ModelSpec) -> bool:
    return not (model.is_moe or model.multi_latent_attention or model.window_size is not None
                or model.mtp_num_layers or model.kv_channels is not None)


def attention_core_flops_per_token(model: ModelSpec, window: bool) -> float:
    """Q K^T and the product with V for one token, over the whole sequence as Narayanan et al.
    count it (s keys per query), or over the window's W + 1 keys."""
    m = model
    keys = min(m.seq_length, m.window_size + 1) if window and m.window_size else m.seq_length
    if m.multi_latent_attention:
        dqk, dv = m.qk_head_dim + m.qk_pos_emb_head_dim, m.v_head_dim
    else:
        dqk = dv = m.head_dim
    return 2.0 * keys * m.num_attention_heads * (dqk + dv)


def attention_matmul_weights(model: ModelSpec) -> int:
    """Weights of the attention's projections (a token meets each once)."""
    m, h, heads = model, model.hidden_size, model.num_attention_heads
    if m.multi_latent_attention:
        rope, dqk = m.qk_pos_emb_head_dim, m.qk_head_dim + m.qk_pos_emb_head_dim
        q = (h * m.q_lora_rank + m.q_lora_rank * heads * dqk) if m.q_lora_rank else h * heads * dqk
        kv = h * (m.kv_lora_rank + rope) + m.kv_lora_rank * heads * (m.qk_head_dim + m.v_head_dim)
        return q + kv + heads * m.v_head_dim * h
    q = heads * m.head_dim
    return h * (q + 2 * m.query_groups * m.head_dim) + q * h


def mlp_matmul_weights(model: ModelSpec, ffn: int) -> int:
    return model.hidden_size * ffn * (3 if model.gated_mlp else 2)


def kind_forward_flops_per_token(model: ModelSpec, kind: LayerKind) -> float:
    """Matmul FLOPs of one layer of `kind` for one token: 2 per weight the token meets (the
    attention's projections; the dense MLP, or the router, its top-k routed experts and the
    shared experts) plus the attention core."""
    m = model
    if kind.moe:
        assert m.num_experts is not None
        shared = m.moe_shared_expert_intermediate_size or 0
        mlp = (m.num_experts * m.hidden_size + m.moe_router_topk * mlp_matmul_weights(m, m.moe_ffn)
               + (mlp_matmul_weights(m, shared) if shared else 0))
    else:
        mlp = mlp_matmul_weights(m, m.ffn)
    return 2.0 * (attention_matmul_weights(m) + mlp) + attention_core_flops_per_token(m, kind.window)


def _general_forward_per_token(model: ModelSpec) -> float:
    layers = sum(kind_forward_flops_per_token(model, k) for k in layer_kinds(model))
    logits = 2.0 * model.hidden_size * model.vocab_size
    mtp = model.mtp_num_layers * (kind_forward_flops_per_token(model, layer_kinds(model)[-1])
                                  + 2.0 * 2 * model.hidden_size ** 2 + logits)
    return layers + logits + mtp


def model_flops_per_iteration(job: Job) -> float:
    m = job.model
    tokens = job.training.global_batch_size * m.seq_length
    if not _plain(m):
        return 3.0 * tokens * _general_forward_per_token(m)
    forward = tokens * (m.num_layers * layer_forward_flops_per_token(m) + 2.0 * m.hidden_size * m.vocab_size)
    return 3.0 * forward


def hardware_flops_per_iteration(job: Job) -> float:
    m = job.model
    tokens = job.training.global_batch_size * m.seq_length
    modules = job.training.recompute_modules
    if job.training.recompute is Recompute.SELECTIVE and modules is not None \
            and tuple(modules) != (RecomputeModule.CORE_ATTN,):
        extra = sum(_modules_recompute_per_token(m, k, set(modules)) for k in layer_kinds(m))
        return model_flops_per_iteration(job) + tokens * extra
    if not _plain(m):
        return model_flops_per_iteration(job) + tokens * _general_recompute_per_token(job)
    extra = {
        Recompute.NONE: 0.0,
        Recompute.SELECTIVE: 4.0 * m.seq_length * m.hidden_size,
        Recompute.FULL: layer_forward_flops_per_token(m),
    }[job.training.recompute]
    return model_flops_per_iteration(job) + tokens * m.num_layers * extra


def _general_recompute_per_token(job: Job) -> float:
    """The forward FLOPs recompute runs again per token: whole layers, or the attention core."""
    m = job.model
    mode = job.training.recompute
    if mode is Recompute.NONE:
        return 0.0
    kinds = layer_kinds(m)
    if mode is Recompute.FULL:
        return sum(kind_forward_flops_per_token(m, k) for k in kinds)
    return sum(attention_core_flops_per_token(m, k.window) for k in kinds)


def _modules_recompute_per_token(m: ModelSpec, kind: LayerKind,
                                 modules: set[RecomputeModule]) -> float:
    """Matmul FLOPs per token that `training.recompute_modules` runs again in a layer of `kind`
    (simulator.graph.recompute): the attention core, MLA's up projections, the dense MLP, the
    MoE layer (router, top-k experts, shared experts) or its shared experts; norms and
    activations run no matmul."""
    M = RecomputeModule
    shared = m.moe_shared_expert_intermediate_size or 0
    flops = attention_core_flops_per_token(m, kind.window) if M.CORE_ATTN in modules else 0.0
    if M.MLA_UP_PROJ in modules and m.multi_latent_attention:
        dqk = m.qk_head_dim + m.qk_pos_emb_head_dim
        heads = m.num_attention_heads
        flops += 2.0 * ((m.q_lora_rank or m.hidden_size) * heads * dqk
                        + m.kv_lora_rank * heads * (m.qk_head_dim + m.v_head_dim))
    if kind.moe and M.MOE in modules:
        assert m.num_experts is not None
        flops += 2.0 * (m.num_experts * m.hidden_size
                        + m.moe_router_topk * mlp_matmul_weights(m, m.moe_ffn)
                        + (mlp_matmul_weights(m, shared) if shared else 0))
    elif kind.moe and M.SHARED_EXPERTS in modules and shared:
        flops += 2.0 * mlp_matmul_weights(m, shared)
    if not kind.moe and M.MLP in modules:
        flops += 2.0 * mlp_matmul_weights(m, m.ffn)
    return flops
