"""The Hugging Face stack: a `transformers` causal LM built from a config (no downloads).

The job's layer structure picks the model class the way the shared H100 runs did
(`../shared/data/traces/h100/what_ran.py`): gated MLP + RMSNorm + rotary -> `LlamaForCausalLM`
(GQA, untied or tied, bias optional), LayerNorm + learned positions + GeLU -> `GPT2LMHeadModel`.
A rank's shard sets heads, key-value heads, the MLP width and the vocabulary to their per-rank
values and keeps the global head dimension (Llama's ``head_dim``); GPT-2 derives its head
dimension from the hidden size, so it only runs unsharded. Attention is ``sdpa`` (flash) or
``eager`` (unfused); full recompute is ``gradient_checkpointing_enable`` (non-reentrant).
"""

from __future__ import annotations

from typing import Any

from profiler.stacks.shard import Shard
from simulator.errors import ConfigError
from simulator.job.enums import Norm, PositionEmbedding, Recompute


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise ConfigError("--stack huggingface needs the transformers package (pip install "
                          "transformers); or use --stack reference") from None
    return transformers


def build(shard: Shard) -> tuple[Any, Any]:
    tf = _transformers()
    attn = "sdpa" if shard.flash else "eager"
    c = shard
    if c.gated_mlp and c.norm is Norm.RMSNORM and c.position is PositionEmbedding.ROPE:
        cfg = tf.LlamaConfig(hidden_size=c.hidden, intermediate_size=c.ffn,
                             num_hidden_layers=c.layers, num_attention_heads=c.heads,
                             num_key_value_heads=c.groups, head_dim=c.head_dim,
                             vocab_size=c.vocab, max_position_embeddings=c.seq,
                             tie_word_embeddings=c.tied, attention_bias=c.use_bias,
                             mlp_bias=c.use_bias, attention_dropout=c.attention_dropout,
                             attn_implementation=attn)
        model = tf.LlamaForCausalLM(cfg)
    elif not c.gated_mlp and c.norm is Norm.LAYERNORM and c.position is PositionEmbedding.LEARNED:
        if c.tp > 1 or c.groups != c.heads:
            raise ConfigError("--stack huggingface: GPT-2 derives its head size from the hidden "
                              "size, so it cannot run a tensor-parallel shard or grouped-query "
                              "attention; use --tp 1 or --stack reference")
        cfg = tf.GPT2Config(n_embd=c.hidden, n_layer=c.layers, n_head=c.heads, n_inner=c.ffn,
                            vocab_size=c.vocab, n_positions=c.seq, resid_pdrop=c.hidden_dropout,
                            embd_pdrop=c.hidden_dropout, attn_pdrop=c.attention_dropout,
                            tie_word_embeddings=c.tied, attn_implementation=attn)
        model = tf.GPT2LMHeadModel(cfg)
    else:
        raise ConfigError(f"--stack huggingface has no model class for norm={c.norm.value}, "
                          f"gated_mlp={c.gated_mlp}, position_embedding={c.position.value} "
                          f"(Llama: rmsnorm + gated + rope; GPT-2: layernorm + learned); use "
                          f"--stack reference")
    if c.recompute is Recompute.FULL:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif c.recompute is Recompute.SELECTIVE:
        raise ConfigError("--stack huggingface has no selective recompute; use none or full")
    return model, lambda m, ids: m(input_ids=ids, labels=ids).loss
