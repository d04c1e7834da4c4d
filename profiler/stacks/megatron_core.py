"""The Megatron-Core stack: `megatron.core.models.gpt.GPTModel` with its local layer spec (the
Transformer Engine spec when transformer_engine is importable), one rank in a one-process
model-parallel group.

Only available where megatron-core is installed (``pip install megatron-core``); it needs a
CUDA device (its fused kernels and parallel state assume one). Not exercised in this project's
CPU test environment: the error path is tested, the builder follows megatron/core's public API
(GPTModel, TransformerConfig, get_gpt_layer_local_spec / get_gpt_layer_with_transformer_engine_spec,
parallel_state.initialize_model_parallel) and has not been run here.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from profiler.stacks.shard import Shard
from simulator.enums import Norm, PositionEmbedding, Recompute
from simulator.errors import ConfigError


def available() -> bool:
    return importlib.util.find_spec("megatron") is not None and \
        importlib.util.find_spec("megatron.core") is not None


def build(shard: Shard) -> tuple[Any, Any]:  # pragma: no cover - needs megatron-core and CUDA
    if not available():
        raise ConfigError("--stack megatron-core needs the megatron-core package (pip install "
                          "megatron-core, on a CUDA machine); or use --stack reference")
    import torch
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    if not torch.cuda.is_available():
        raise ConfigError("--stack megatron-core runs on CUDA only; use --device cuda")
    if not torch.distributed.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29511")
        torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    tensor_parallel.model_parallel_cuda_manual_seed(0)
    c = shard
    config = TransformerConfig(
        num_layers=c.layers, hidden_size=c.hidden, num_attention_heads=c.heads,
        num_query_groups=c.groups, kv_channels=c.head_dim, ffn_hidden_size=c.ffn,
        gated_linear_unit=c.gated_mlp, add_bias_linear=c.use_bias,
        normalization="RMSNorm" if c.norm is Norm.RMSNORM else "LayerNorm",
        hidden_dropout=c.hidden_dropout, attention_dropout=c.attention_dropout, bf16=True,
        params_dtype=torch.bfloat16,
        recompute_granularity={Recompute.FULL: "full", Recompute.SELECTIVE: "selective"}.get(
            c.recompute),
        recompute_method="uniform" if c.recompute is Recompute.FULL else None,
        recompute_num_layers=1 if c.recompute is Recompute.FULL else None)
    spec = _layer_spec(get_gpt_layer_local_spec, c)
    model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=c.vocab,
                     max_sequence_length=c.seq, share_embeddings_and_output_weights=c.tied,
                     position_embedding_type="rope" if c.position is PositionEmbedding.ROPE
                     else "learned_absolute")

    def loss(m: Any, ids: Any) -> Any:
        position_ids = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        return m(ids, position_ids, None, labels=ids).float().mean()
    return model, loss


def _layer_spec(local: Any, shard: Shard) -> Any:  # pragma: no cover - needs megatron-core
    if importlib.util.find_spec("transformer_engine") is not None:
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
        return get_gpt_layer_with_transformer_engine_spec()
    return local()
