"""Parameter counts of a decoder-only transformer (per layer, embedding, head; per tp rank)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.job.enums import Norm, PositionEmbedding
from simulator.job.specs import ModelSpec


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


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one transformer layer: split by tp (`sharded`) and replicated on every rank."""

    sharded: int
    replicated: int

    def per_rank(self, tp: int) -> float:
        return self.sharded / tp + self.replicated


def layer_params(model: ModelSpec) -> LayerParams:
    h, f, d = model.hidden_size, model.ffn, model.head_dim
    qkv_out = h + 2 * model.query_groups * d
    up_out = f * (2 if model.gated_mlp else 1)
    weights = h * qkv_out + h * h + h * up_out + f * h
    sharded_bias = (qkv_out + up_out) if model.use_bias else 0
    replicated_bias = 2 * h if model.use_bias else 0  # output and down-projection biases
    return LayerParams(weights + sharded_bias, replicated_bias + 2 * _norm_params(model))


def linear_weight_params(model: ModelSpec) -> int:
    """Weights of one layer's four linear layers (QKV, projection, MLP up and down): the
    tensors a low-precision recipe quantizes (all split by tp)."""
    h, f, d = model.hidden_size, model.ffn, model.head_dim
    qkv_out = h + 2 * model.query_groups * d
    return h * qkv_out + h * h + h * f * (2 if model.gated_mlp else 1) + f * h


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
    """Parameters of the model as published (unpadded vocabulary)."""
    layer = layer_params(model)
    vocab = model.vocab_size * model.hidden_size
    pos = model.seq_length * model.hidden_size if model.position_embedding is PositionEmbedding.LEARNED else 0
    out = 0 if model.tied_embeddings else vocab
    return model.num_layers * (layer.sharded + layer.replicated) + vocab + pos + out + _norm_params(model)
