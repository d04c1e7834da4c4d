"""Transformer Engine caches one 16-bit placeholder weight gradient per distinct linear-weight
shape (simulator.memory.te_dummy): the bytes follow from the layer's shapes written out here,
not from the simulator's parameter counts, and do not grow with the depth. Megatron-Core's output
layer takes its placeholder from the same cache when TE is installed (`tensor_parallel/layers.py`,
`get_dummy_wgrad(list(weight.main_grad.shape), input.dtype)`): one (padded vocabulary / tp,
hidden) tensor on the last stage."""

from __future__ import annotations

import math

import pytest

from simulator import job_from_dict, simulate
from simulator.memory.te_dummy import dummy_wgrad_bytes

LLAMA_8B = {"name": "l", "num_layers": 8, "hidden_size": 4096, "num_attention_heads": 32,
            "num_query_groups": 8, "ffn_hidden_size": 14336, "vocab_size": 128256,
            "seq_length": 4096, "norm": "rmsnorm", "gated_mlp": True, "use_bias": False,
            "position_embedding": "rope", "tied_embeddings": False}


def _job(model: dict, tp: int = 1, pp: int = 1, ep: int = 1, **training: object) -> object:
    """A bf16 job on H100s; with experts, dp = ep (the experts' ranks are data-parallel ones)."""
    return job_from_dict({
        "model": model,
        "training": {"global_batch_size": 8, "micro_batch_size": 1, "precision": "bf16", **training},
        "parallel": {"tp": tp, "pp": pp, "dp": ep, "ep": ep},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": tp * pp * ep},
    })


def _llama_shapes_bytes(tp: int) -> float:
    h, q, kv, ffn = 4096, 4096, 2 * 8 * 128, 14336
    qkv, proj = (q + kv) // tp * h, h * q // tp
    fc1, fc2 = 2 * ffn // tp * h, h * ffn // tp
    return 2.0 * (qkv + proj + fc1 + fc2)


def _output_layer_bytes(vocab: int, h: int, tp: int) -> float:
    """Megatron pads the vocabulary to a multiple of 128 x tp (`--make-vocab-size-divisible-by`)."""
    padded = math.ceil(vocab / (128 * tp)) * 128 * tp
    return 2.0 * padded // tp * h


def _llama_last_stage_bytes(tp: int) -> float:
    return _llama_shapes_bytes(tp) + _output_layer_bytes(128256, 4096, tp)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_one_placeholder_per_shape_split_over_tp(tp):
    assert dummy_wgrad_bytes(_job(LLAMA_8B, tp=tp)).tolist() == [_llama_last_stage_bytes(tp)]


def test_depth_does_not_add_placeholders():
    deeper = {**LLAMA_8B, "num_layers": 32}
    assert dummy_wgrad_bytes(_job(deeper))[0] == dummy_wgrad_bytes(_job(LLAMA_8B))[0]


def test_every_pipeline_stage_holds_its_own_and_the_last_the_output_layers():
    assert dummy_wgrad_bytes(_job(LLAMA_8B, pp=2)).tolist() == [_llama_shapes_bytes(1),
                                                                 _llama_last_stage_bytes(1)]


def test_the_output_layer_placeholder_at_tp_8_has_the_padded_vocabulary():
    """128256 is no multiple of 128 x 8: the table has 129024 rows, 16128 a rank."""
    assert _output_layer_bytes(128256, 4096, 8) == 2.0 * 16128 * 4096


def test_experts_add_their_per_expert_shapes_over_expert_tp():
    moe = {**LLAMA_8B, "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 1536}
    h = 4096
    attention = 2.0 * ((4096 + 2048) * h + h * 4096)
    experts = 2.0 * (2 * 1536 * h + h * 1536)
    output = _output_layer_bytes(128256, h, 1)
    assert dummy_wgrad_bytes(_job(moe, ep=8))[0] == pytest.approx(attention + experts + output)


@pytest.mark.parametrize("framework", ["megatron-deepspeed", "pytorch"])
def test_stacks_without_transformer_engine_hold_none(framework):
    job = _job(LLAMA_8B, framework=framework)
    assert dummy_wgrad_bytes(job).tolist() == [0.0]


def test_without_fused_accumulation_there_is_no_placeholder():
    job = _job(LLAMA_8B, gradient_accumulation_fusion=False)
    assert dummy_wgrad_bytes(job).tolist() == [0.0]


def test_the_peak_carries_them():
    with_them = simulate(_job(LLAMA_8B)).stages[0].memory
    assert with_them.te_dummy_wgrads_bytes == _llama_last_stage_bytes(1)
    assert with_them.allocated_bytes == pytest.approx(
        sum(v for k, v in with_them.to_dict().items()
            if k.endswith("_bytes") and k not in ("allocated_bytes", "allocator_reserved_bytes",
                                                   "total_bytes", "parameters_bytes",
                                                   "context_bytes")))


def test_equal_shapes_share_one_placeholder():
    """A 4h MLP at tp 4: fc1 is (4h/4, h) and fc2 (h, 4h/4), both h x h, so TE caches one."""
    gpt = {"name": "g", "num_layers": 4, "hidden_size": 2048, "num_attention_heads": 16,
           "ffn_hidden_size": 8192, "vocab_size": 50257, "seq_length": 2048}
    h, tp = 2048, 4
    qkv, proj, mlp = 3 * h // tp * h, h * h // tp, h * h
    output = 50688 // tp * h  # 50257 padded to a multiple of 512
    assert dummy_wgrad_bytes(_job(gpt, tp=tp)).tolist() == [2.0 * (qkv + proj + mlp + output)]
