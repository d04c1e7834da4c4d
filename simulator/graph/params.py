"""Parameter counts of a decoder-only transformer (per layer, embedding, head; per tp rank)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.job.enums import Norm, PositionEmbedding, SoftmaxType
from simulator.job.layer_pattern import DENSE, LayerKind, layer_kinds, mtp_kind, stage_kind_counts
from simulator.job.precision import low_precision
from simulator.job.specs import Job, ModelSpec


def padded_vocab(model: ModelSpec, tp: int, pad: bool = True) -> int:
    """Megatron pads the vocabulary to a multiple of 128 * tp so that each shard is aligned
    (`megatron/training/tokenizer`, `_vocab_size_with_padding`); plain PyTorch / Hugging Face
    models keep it as is (`pad=False`, see simulator.job.framework)."""
    if not pad:
        return model.vocab_size
    unit = 128 * tp
    return math.ceil(model.vocab_size / unit) * unit


def _norm_params(model: ModelSpec) -> int:
    return model.hidden_size * (2 if model.norm is Norm.LAYERNORM else 1)


def norm_params(model: ModelSpec) -> int:
    """One norm over the hidden size (weight, and bias for LayerNorm)."""
    return _norm_params(model)


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one transformer layer: split by tp (`sharded`) and replicated on every rank."""

    sharded: int
    replicated: int

    def per_rank(self, tp: int) -> float:
        return self.sharded / tp + self.replicated


def layer_params(model: ModelSpec) -> LayerParams:
    """A dense layer: its attention and MLP (simulator.graph.moe_params for every kind)."""
    attention, mlp = attention_params(model), mlp_params(model, model.ffn)
    return LayerParams(attention.sharded + mlp.sharded, attention.replicated + mlp.replicated)


def attention_params(model: ModelSpec) -> LayerParams:
    """The attention half: input norm, QKV (or the MLA projections), the output projection;
    with biases, query/key norms and attention sinks where the model has them."""
    h, d, heads = model.hidden_size, model.head_dim, model.num_attention_heads
    norm = _norm_params(model)
    sinks = heads if model.softmax_type is SoftmaxType.LEARNABLE else 0  # split over tp with heads
    if model.multi_latent_attention:
        return _mla_params(model, norm, sinks)
    q = heads * d
    qkv_out = q + 2 * model.query_groups * d
    qk_norm = 2 * d * (2 if model.norm is Norm.LAYERNORM else 1) if model.qk_layernorm else 0
    bias = model.use_bias
    return LayerParams(h * qkv_out + q * h + (qkv_out if bias else 0) + sinks,
                       (h if bias else 0) + norm + qk_norm)


def _mla_params(model: ModelSpec, norm: int, sinks: int) -> LayerParams:
    """Multi-latent attention (simulator.graph.mla): the down projections and latent norms are
    replicated on the tp ranks, the up and output projections split over them."""
    h, heads, rope = model.hidden_size, model.num_attention_heads, model.qk_pos_emb_head_dim
    dqk, dv, q_lora, kv_lora = model.qk_head_dim + rope, model.v_head_dim, model.q_lora_rank, \
        model.kv_lora_rank
    q_up = (q_lora or h) * heads * dqk
    replicated = h * (kv_lora + rope) + kv_lora + norm + ((h * q_lora + q_lora) if q_lora else 0)
    return LayerParams(q_up + kv_lora * heads * (model.qk_head_dim + dv) + heads * dv * h + sinks,
                       replicated)


def mlp_params(model: ModelSpec, ffn: int) -> LayerParams:
    """A dense MLP of `ffn` (split over tp) and the norm before it."""
    h = model.hidden_size
    up_out = ffn * (2 if model.gated_mlp else 1)
    bias = model.use_bias
    return LayerParams(h * up_out + ffn * h + (up_out if bias else 0),
                       (h if bias else 0) + _norm_params(model))


def position_params(model: ModelSpec) -> int:
    """Learned position embedding: replicated on every tp rank (Megatron's `Embedding` keeps
    `position_embeddings` as a plain `torch.nn.Embedding`)."""
    learned = model.position_embedding is PositionEmbedding.LEARNED
    return model.seq_length * model.hidden_size if learned else 0


def final_norm_params(model: ModelSpec) -> int:
    """The final norm: replicated on every tp rank."""
    return _norm_params(model)


def embedding_params(model: ModelSpec, tp: int = 1, pad: bool = True) -> int:
    """Word (padded vocabulary) and learned position embeddings."""
    return padded_vocab(model, tp, pad) * model.hidden_size + position_params(model)


def head_params(model: ModelSpec, tp: int = 1, pad: bool = True) -> int:
    """Final norm plus the output layer when it is not tied to the word embedding."""
    out = 0 if model.tied_embeddings else padded_vocab(model, tp, pad) * model.hidden_size
    return _norm_params(model) + out


def total_params(model: ModelSpec) -> int:
    """Parameters of the model as published (unpadded vocabulary); with mixture of experts every
    expert, with multi-token prediction its modules too (simulator.graph.moe.params)."""
    layer = layer_params(model)
    vocab = model.vocab_size * model.hidden_size
    pos = model.seq_length * model.hidden_size if model.position_embedding is PositionEmbedding.LEARNED else 0
    out = 0 if model.tied_embeddings else vocab
    if model.is_moe or model.mtp_num_layers:
        return layers_params(model).total + vocab + pos + out + _norm_params(model)
    return model.num_layers * (layer.sharded + layer.replicated) + vocab + pos + out + _norm_params(model)


@dataclass(frozen=True)
class KindParams:
    """Parameters of one layer of a kind: the part split over tp or replicated on its ranks
    (attention, shared experts, router, norms) and the routed experts (split over ep x
    expert_tp), of which a token uses `active_experts`."""

    dense: LayerParams
    experts: int = 0
    active_experts: int = 0


def expert_params(model: ModelSpec) -> int:
    """One routed expert: fc1 (gate and up with SwiGLU) and fc2, with biases if the model has
    them (GPT-OSS)."""
    h, f = model.hidden_size, model.moe_ffn
    up = f * (2 if model.gated_mlp else 1)
    return h * up + f * h + ((up + h) if model.use_bias else 0)


def kind_params(model: ModelSpec, kind: LayerKind) -> KindParams:
    """One layer of `kind` (the attention does not depend on the window; the MLP on MoE)."""
    attention = attention_params(model)
    if not kind.moe:
        mlp = mlp_params(model, model.ffn)
        return KindParams(LayerParams(attention.sharded + mlp.sharded,
                                      attention.replicated + mlp.replicated))
    assert model.num_experts is not None
    shared_ffn = model.moe_shared_expert_intermediate_size
    shared = mlp_params(model, shared_ffn) if shared_ffn else LayerParams(0, _norm_params(model))
    router = model.num_experts * model.hidden_size + (model.num_experts if model.use_bias else 0)
    one = expert_params(model)
    return KindParams(LayerParams(attention.sharded + shared.sharded,
                                  attention.replicated + shared.replicated + router),
                      model.num_experts * one, model.moe_router_topk * one)


def linear_weight_params(model: ModelSpec, kind: LayerKind = DENSE) -> KindParams:
    """The weights of one layer of `kind` that a low-precision recipe quantizes (the Transformer
    Engine linears of simulator.graph.quantize.LOW_PRECISION_LINEARS): the attention's (QKV and
    projection, or MLA's up and output projections split over tp and its down projections
    replicated on the tp ranks), the dense MLP's or the shared experts' (split over tp), and the
    routed experts' fc1 and fc2 (`experts`, over ep x expert_tp). Biases, norms, attention
    sinks and the router stay 16-bit."""
    h, d, heads = model.hidden_size, model.head_dim, model.num_attention_heads
    if model.multi_latent_attention:
        rope, q_lora, kv_lora = model.qk_pos_emb_head_dim, model.q_lora_rank, model.kv_lora_rank
        sharded = ((q_lora or h) * heads * (model.qk_head_dim + rope)
                   + kv_lora * heads * (model.qk_head_dim + model.v_head_dim)
                   + heads * model.v_head_dim * h)
        replicated = h * (kv_lora + rope) + (h * q_lora if q_lora else 0)
    else:
        q = heads * d
        sharded, replicated = h * (q + 2 * model.query_groups * d) + q * h, 0
    gate = 2 if model.gated_mlp else 1
    ffn = (model.moe_shared_expert_intermediate_size or 0) if kind.moe else model.ffn
    sharded += h * ffn * gate + ffn * h
    experts = 0
    if kind.moe:
        assert model.num_experts is not None
        experts = model.num_experts * (h * model.moe_ffn * gate + model.moe_ffn * h)
    return KindParams(LayerParams(sharded, replicated), experts)


def mtp_params(model: ModelSpec) -> int:
    """One multi-token-prediction depth (simulator.graph.mtp): its layer (the kind of the last
    layer), the 2h -> h projection, the two input norms and its final norm; the embedding and
    output layer are the model's own."""
    last = kind_params(model, layer_kinds(model)[-1])
    h = model.hidden_size
    return (last.dense.sharded + last.dense.replicated + last.experts + 2 * h * h
            + 3 * _norm_params(model))


@dataclass(frozen=True)
class ModelLayers:
    """Every transformer layer's parameters summed, and the MTP modules'."""

    dense: int  # attention, dense MLPs, shared experts, routers, norms
    experts: int  # all routed experts
    active_experts: int  # the routed experts one token uses
    mtp: int

    @property
    def total(self) -> int:
        return self.dense + self.experts + self.mtp


def layers_params(model: ModelSpec) -> ModelLayers:
    dense = experts = active = 0
    for kind in layer_kinds(model):
        p = kind_params(model, kind)
        dense += p.dense.sharded + p.dense.replicated
        experts += p.experts
        active += p.active_experts
    return ModelLayers(dense, experts, active, model.mtp_num_layers * mtp_params(model))


def active_params(model: ModelSpec) -> int:
    """Parameters one token's forward pass uses, as MoE models publish them: every dense
    parameter, the top-k routed experts, the embedding and output layer (MTP modules excluded,
    as DeepSeek-V3's 37B activated)."""
    layers = layers_params(model)
    vocab = model.vocab_size * model.hidden_size
    out = 0 if model.tied_embeddings else vocab
    return layers.dense + layers.active_experts + vocab + out + _norm_params(model)


def optimizer_shards(job: Job) -> tuple[int, int]:
    """Ranks the distributed optimizer shards the (dense, expert) states over: dp x cp (Megatron's
    data-parallel group with context parallelism) and expert_dp; 1 without it."""
    if not job.shards_optimizer:
        return 1, 1
    return job.dp * job.parallel.cp, job.expert_dp


def stage_expert_param_counts(job: Job) -> np.ndarray:
    """(pp,) routed-expert parameters per GPU of each stage: the stage's MoE layers' experts
    over ep x expert_tp (and the MTP depth's, on the last stage)."""
    m = job.model
    counts = np.zeros(job.parallel.pp)
    if not m.is_moe:
        return counts
    split = job.parallel.ep * job.expert_tp
    kinds, per_stage = stage_kind_counts(job)
    for kind, n in zip(kinds, per_stage, strict=True):
        counts = counts + n * kind_params(m, kind).experts / split
    if m.mtp_num_layers:
        counts[-1] += m.mtp_num_layers * kind_params(m, layer_kinds(m)[-1]).experts / split
    return counts


def stage_quantized_linear_counts(job: Job) -> tuple[np.ndarray, np.ndarray]:
    """(pp,) the linear weights per GPU of each stage that the job's recipe quantizes
    (`linear_weight_params` of its low-precision layers, and of the MTP depths when they run
    low, with their `eh_proj`): the non-expert ones and the routed experts'; zero for a 16-bit
    job."""
    m, p, tp = job.model, job.parallel, job.parallel.tp
    dense, experts = np.zeros(p.pp), np.zeros(p.pp)
    if low_precision(job) is None:
        return dense, experts
    split = p.ep * job.expert_tp
    kinds, per_stage = stage_kind_counts(job)
    for kind, n in zip(kinds, per_stage, strict=True):
        if not kind.high_precision:
            weights = linear_weight_params(m, kind)
            dense = dense + n * weights.dense.per_rank(tp)
            experts = experts + n * (weights.experts / split)
    if m.mtp_num_layers and not mtp_kind(job).high_precision:
        weights = linear_weight_params(m, mtp_kind(job))
        h = m.hidden_size
        dense[-1] += m.mtp_num_layers * (weights.dense.per_rank(tp) + 2 * h * h / tp)
        experts[-1] += m.mtp_num_layers * weights.experts / split
    return dense, experts
