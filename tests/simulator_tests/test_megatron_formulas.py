"""Closed forms of the FLOP, memory and schedule model against independent formulas written here
(Narayanan et al. 2021, Korthikanti et al. 2022, Megatron's schedules and its distributed-optimizer
table). The collectives' are in test_collective_algorithms.py."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import simulate
from simulator.graph.blocks import build_graph
from simulator.graph.dense import build_layer
from simulator.graph.flops import hardware_flops_per_iteration, model_flops_per_iteration
from simulator.job.enums import Framework, Precision, Schedule
from simulator.job.framework import semantics
from simulator.memory.stages import in_flight_peak
from simulator.memory.states import static_bytes_per_param
from simulator.timeline.engine import round_plan
from tests.conftest import make_job

# ---------------------------------------------------------------------------------------- FLOPs

LLAMA_LIKE = {"num_layers": 4, "hidden_size": 4096, "num_attention_heads": 32,
              "num_query_groups": 8, "ffn_hidden_size": 14336, "gated_mlp": True,
              "vocab_size": 128256, "seq_length": 2048, "norm": "rmsnorm", "use_bias": False,
              "tied_embeddings": False, "position_embedding": "rope"}


def test_gqa_swiglu_model_flops_by_hand():
    """Per token and layer, forward: Q 2h^2, K and V 2 * 2h(g d), projection 2h^2, gate and up
    2 * 2hf, down 2fh, scores and values 2 * 2sh; logits 2hV; backward twice the forward."""
    h, g, d, f, s, V, L = 4096, 8, 128, 14336, 2048, 128256, 4
    per_layer = 2 * h * h + 2 * 2 * h * g * d + 2 * h * h + 2 * 2 * h * f + 2 * f * h + 2 * 2 * s * h
    tokens = 16 * s
    expected = 3 * tokens * (L * per_layer + 2 * h * V)
    job = make_job(model=LLAMA_LIKE, training={"global_batch_size": 16, "precision": "bf16"},
                   parallel={"tp": 8, "pp": 1, "dp": 1})
    assert model_flops_per_iteration(job) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("flash", [False, True])
def test_selective_recompute_adds_the_attention_matmuls_to_hardware_flops(flash):
    """Korthikanti et al. 2022, Sec. 5: selective recompute re-runs QK^T and AV, 4 s h FLOPs per
    token and layer (2 s h each) -- with flash attention too: Megatron checkpoints the core
    attention whatever its kernel."""
    job = make_job(model=LLAMA_LIKE, training={"global_batch_size": 16, "precision": "bf16",
                                               "recompute": "selective", "flash_attention": flash},
                   parallel={"tp": 8, "pp": 1, "dp": 1})
    extra = 16 * 2048 * 4 * (4 * 2048 * 4096)
    assert hardware_flops_per_iteration(job) - model_flops_per_iteration(job) == pytest.approx(extra)


def test_selective_recompute_with_flash_runs_the_flash_forward_again():
    job = make_job(model=LLAMA_LIKE, training={"global_batch_size": 16, "precision": "bf16",
                                               "recompute": "selective", "flash_attention": True},
                   parallel={"tp": 8, "pp": 1, "dp": 1})
    layer = build_layer(job)
    assert [op.name for op in layer.recompute] == ["flash_attention"]
    result = simulate(job)
    assert result.breakdown["recompute"] > 0
    assert result.hfu > result.mfu


# --------------------------------------------------------------------- activation memory, GQA

S, B, H, A = 1024, 2, 1024, 16


def korthikanti(t: int, hidden_dropout: bool, attention_dropout: bool) -> float:
    """Korthikanti et al. 2022, Sec. 4.1, without sequence parallelism: 10 s b h for the
    replicated tensors (two LayerNorm inputs 4, QKV and MLP inputs 4, two 1-byte dropout
    masks 2), 24 s b h / t for the split ones, and 5 a s^2 b / t for attention (softmax output 2,
    dropout mask 1, dropout output 2). Without dropout the masks go, and the second matmul
    reuses the softmax output: 2 a s^2 b / t."""
    sbh = S * B * H
    replicated = 10 - (0 if hidden_dropout else 2)
    attention = (5 if attention_dropout else 2) * A * S * S * B
    return sbh * (replicated + 24 / t) + attention / t


@pytest.mark.parametrize("t", [1, 2, 8])
@pytest.mark.parametrize(("hidden", "attention"), [(0.1, 0.1), (0.0, 0.1), (0.1, 0.0), (0.0, 0.0)])
def test_dropout_free_models_lose_masks_and_kernels(t, hidden, attention):
    job = make_job(model={"seq_length": S, "hidden_size": H, "num_attention_heads": A,
                          "hidden_dropout": hidden, "attention_dropout": attention},
                   training={"micro_batch_size": B, "global_batch_size": 8 * B},
                   parallel={"tp": t, "pp": 8 // t, "dp": 1})
    layer = build_layer(job)
    assert layer.saved_bytes == pytest.approx(korthikanti(t, hidden > 0, attention > 0), rel=1e-12)
    names = {op.name: op for op in layer.forward}
    assert ("attn.dropout" in names) is (attention > 0)
    assert (names["attn.dropout_add"].variant == "bias_dropout_add") is (hidden > 0)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_gqa_without_flash_expands_k_and_v_to_every_head(t):
    """Megatron's DotProductAttention repeat_interleaves K and V to all heads before the bmms:
    an expand kernel each, and the bmms save full-size K and V -- so the layer saves exactly
    what multi-head attention saves (Korthikanti's formula), and selective recompute keeps
    only the group-sized Q, K, V inputs: s b h (10 + (20 + 4 g / a) / t)."""
    g = 4
    model = {"seq_length": S, "hidden_size": H, "num_attention_heads": A, "num_query_groups": g}
    base = {"micro_batch_size": B, "global_batch_size": 8 * B}
    plan = {"tp": t, "pp": 8 // t, "dp": 1}
    job = make_job(model=model, training=base, parallel=plan)
    layer = build_layer(job)
    expand = next(op for op in layer.forward if op.name == "attn.kv_expand")
    assert expand.kernels == 2
    assert layer.saved_bytes == pytest.approx(korthikanti(t, True, True), rel=1e-12)
    selective = build_layer(make_job(model=model, training={**base, "recompute": "selective"},
                                     parallel=plan))
    sbh = S * B * H
    assert selective.saved_bytes == pytest.approx(sbh * (10 + (20 + 4 * g / A) / t), rel=1e-12)
    assert "attn.kv_expand" in {op.name for op in selective.recompute}


# ------------------------------------------------------------------------ framework and schedule

@pytest.mark.parametrize(("framework", "precision", "plain", "sharded"), [
    # Megatron-LM docs/user-guide/features/dist_optimizer.md: 20 | 4 + 16/d, 18 | 6 + 12/d
    ("megatron-lm", "fp16", 20, (4, 16)),
    ("megatron-lm", "bf16", 18, (6, 12)),
    # Megatron-DeepSpeed / ZeRO (Rajbhandari et al. 2020): 2 + 2 + 12, 2 + 4 + 12
    ("megatron-deepspeed", "fp16", 16, (4, 12)),
    ("megatron-deepspeed", "bf16", 18, (6, 12)),
    # AMP: fp32 weights and gradients, Adam moments ("fp32 parameters" row: 16 | 8 + 8/d)
    ("pytorch", "bf16", 16, (8, 8)),
])
def test_bytes_per_parameter_follow_each_framework(framework, precision, plain, sharded):
    pb = semantics(Framework(framework)).param_bytes(Precision(precision))
    assert pb.per_param() == plain
    for d in (2, 8, 64):
        assert pb.per_param(d) == pytest.approx(sharded[0] + sharded[1] / d)
    job = make_job(training={"framework": framework, "precision": precision},
                   parallel={"tp": 1, "pp": 1, "dp": 8, "distributed_optimizer": True})
    assert static_bytes_per_param(job) == pytest.approx(sharded[0] + sharded[1] / job.dp)


@pytest.mark.parametrize(("framework", "fused"), [("megatron-lm", True),
                                                  ("megatron-deepspeed", False)])
def test_gradient_accumulation_fusion_removes_the_weight_accumulation_kernels(framework, fused):
    """Megatron-LM accumulates GEMM weight gradients inside the wgrad GEMM by default; biases and
    norms are still added by the gradient hook. GPT layer: 4 weights, 4 biases, 2 LayerNorms
    (weight and bias each) = 12 tensors, 8 without the weights."""
    job = make_job(training={"framework": framework})
    accum = [op for op in build_layer(job).backward if op.variant == "grad_accum"]
    assert len(accum) == (8 if fused else 12)
    off = make_job(training={"framework": framework, "gradient_accumulation_fusion": False})
    assert len([op for op in build_layer(off).backward if op.variant == "grad_accum"]) == 12


def _peak(framework: str, p: int, v: int, m: int) -> np.ndarray:
    all_warmup = semantics(Framework(framework)).all_forwards_first_when_m_equals_p and m == p
    plan = round_plan(Schedule.INTERLEAVED_1F1B, p, m, v, all_warmup)
    return in_flight_peak(plan, np.ones((p, v)), m)


@pytest.mark.parametrize(("p", "v"), [(2, 2), (4, 2), (4, 3), (8, 2)])
def test_interleaved_with_m_equal_p(p, v):
    """Megatron-DeepSpeed (Megatron's schedule before Nov 2024): m == p runs every forward first,
    so every stage holds all m v chunk micro-batches. Megatron-LM today: stage s warms up with
    2 (p - s - 1) + (v - 1) p forwards (capped at m v) and holds one more at its first backward."""
    m = p
    np.testing.assert_array_equal(_peak("megatron-deepspeed", p, v, m), np.full(p, m * v))
    expected = [min(2 * (p - s - 1) + (v - 1) * p + 1, m * v) for s in range(p)]
    np.testing.assert_array_equal(_peak("megatron-lm", p, v, m), expected)


def test_megatron_deepspeed_m_equal_p_raises_later_stages_memory():
    job = {"model": {"num_layers": 16}, "training": {"global_batch_size": 4},
           "parallel": {"tp": 2, "pp": 4, "dp": 1, "schedule": "interleaved_1f1b",
                        "virtual_stages": 2}}
    lm = simulate(make_job(**job))
    ds = simulate(make_job(**{**job, "training": {"global_batch_size": 4,
                                                   "framework": "megatron-deepspeed"}}))
    assert lm.num_microbatches == 4
    acts = [(a.memory.activations_bytes, b.memory.activations_bytes)
            for a, b in zip(lm.stages, ds.stages, strict=True)]
    # p = 4, v = 2: Megatron-LM's warm-up 2 (3 - s) + 4 covers all 8 chunk micro-batches on
    # stages 0 and 1 only
    for s, (megatron, deepspeed) in enumerate(acts):
        if s < 2:
            assert deepspeed == pytest.approx(megatron, rel=1e-9)
        else:
            assert deepspeed > megatron


@pytest.mark.parametrize("micro_batches", [1, 2, 4])
def test_eager_autograd_accumulates_from_the_second_micro_batch(micro_batches):
    """PyTorch autograd assigns `.grad` on the first backward and adds from the second: (m-1)/m
    accumulation launches per parameter tensor and micro-batch (GPT layer: 12 tensors)."""
    job = make_job(training={"framework": "pytorch", "precision": "bf16",
                             "global_batch_size": 8 * micro_batches},
                   parallel={"tp": 1, "pp": 1, "dp": 8})
    launches = sum(op.kernels for op in build_graph(job).layer.backward if op.variant == "grad_accum")
    assert launches == pytest.approx(12 * (micro_batches - 1) / micro_batches)
