"""Peak memory as the allocator sees it: each named term against an independent formula, and the
peak taken at the moment it happens.

The eager-PyTorch formulas below enumerate what autograd keeps under `torch.autocast(bf16)` with
fp32 parameters (t = tokens of a micro-batch = b s; all bytes):
- GPT layer (fused QKV, native LayerNorm, SDPA): two LayerNorm inputs fp32 4th each, the QKV
  and fc1 inputs' bf16 casts 2th each, the QKV output (SDPA keeps q, k, v views) 6th, the SDPA
  output (the projection's input) 2th, two dropout masks 1th each, GeLU's input and output
  2tf each: 38 th with f = 4h, plus SDPA's fp32 log-sum-exp (4 b n s).
- unfused attention instead of SDPA: q, k, v contiguous copies 6th and the context copy 2th,
  and per score: the fp32 softmax output 4, the dropout mask 1, the bf16 cast for the second
  bmm 2: 7 a s^2 b.
- Llama layer (HF: RMSNorm, q/k/v and gate/up projections, RoPE, SDPA, SwiGLU): two RMSNorms
  keep x and x * rstd in fp32 (16 th); five projections cast the same fp32 inputs separately
  (10 th); SDPA keeps bf16 q (2th), k and v (2 t g d each) and its output (2th); SwiGLU keeps
  gate's and up's outputs, silu's output and the product (8 t f).
- Loss: bf16 logits and their fp32 copy live at the end of the forward ((2 + 4) t V), log_softmax
  keeps its fp32 output (4 t V), its backward makes two fp32 gradients (8 t V).
"""

from __future__ import annotations

import pytest

from simulator import job_from_dict, simulate
from simulator.graph.blocks import build_graph
from simulator.graph.params import total_params
from simulator.job.specs import GiB
from simulator.memory.stages import ALLOCATOR_OVERHEAD, WORKSPACE_BYTES
from tests.conftest import make_job

S, B, H, A = 512, 2, 1024, 8


def eager_gpt(ga: int = 1, flash: bool = True, recompute: str = "none", gelu: str = "gelu",
              layers: int = 2, vocab: int = 50257):
    return job_from_dict({
        "model": {"name": "eager-gpt", "num_layers": layers, "hidden_size": H,
                  "num_attention_heads": A, "vocab_size": vocab, "seq_length": S,
                  "activation_function": gelu},
        "training": {"global_batch_size": B * ga, "micro_batch_size": B, "precision": "bf16",
                     "recompute": recompute, "flash_attention": flash, "framework": "pytorch",
                     "fused_softmax": False},
        "parallel": {"tp": 1, "pp": 1, "dp": 1},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 1}})


def eager_llama(ga: int = 1):
    return job_from_dict({
        "model": {"name": "eager-llama", "num_layers": 2, "hidden_size": H,
                  "num_attention_heads": A, "num_query_groups": 2, "ffn_hidden_size": 2816,
                  "gated_mlp": True, "vocab_size": 32000, "seq_length": S, "norm": "rmsnorm",
                  "use_bias": False, "tied_embeddings": False, "position_embedding": "rope",
                  "hidden_dropout": 0.0, "attention_dropout": 0.0},
        "training": {"global_batch_size": B * ga, "micro_batch_size": B, "precision": "bf16",
                     "flash_attention": True, "framework": "pytorch", "fused_softmax": False},
        "parallel": {"tp": 1, "pp": 1, "dp": 1},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 1}})


T = B * S
LSE = 4 * B * A * S  # SDPA's fp32 log-sum-exp per layer


def test_eager_gpt_layer_keeps_38_th_with_sdpa():
    assert build_graph(eager_gpt()).layer.saved_bytes == pytest.approx(38 * T * H + LSE, rel=1e-12)


def test_eager_unfused_attention_keeps_fp32_probabilities():
    scores = A * S * S * B
    expected = 38 * T * H + 7 * scores  # context copy replaces the SDPA output
    assert build_graph(eager_gpt(flash=False)).layer.saved_bytes == pytest.approx(expected)


def test_hugging_face_gelu_new_keeps_fp32_intermediates():
    """0.5x (bf16), the fp32 cast of x, tanh's output, 1 + tanh (fp32), and the fp32 output
    cast back to bf16 for the down projection: (2 + 12 + 2) t f instead of GeLU's 4 t f; HF's
    KV-cache concatenation adds K and V copies SDPA keeps (4 t h)."""
    f = 4 * H
    expected = 38 * T * H - 4 * T * f + 16 * T * f + 4 * T * H + LSE
    assert build_graph(eager_gpt(gelu="gelu_new")).layer.saved_bytes == pytest.approx(expected)


def test_eager_llama_layer():
    g, d, f = 2, H // A, 2816
    expected = 16 * T * H + 10 * T * H + 2 * T * H + 4 * T * g * d + 2 * T * H + 8 * T * f + LSE
    assert build_graph(eager_llama()).layer.saved_bytes == pytest.approx(expected, rel=1e-12)


def test_full_recompute_keeps_each_layer_s_fp32_input():
    graph = build_graph(eager_gpt(recompute="full"))
    assert graph.layer.saved_bytes == 4 * T * H
    assert graph.layer.working_bytes == pytest.approx(38 * T * H + LSE)


def _gpt_params(L: int = 2, V: int = 50257) -> tuple[float, float]:
    """(all parameters, those autocast casts: linears' weights and biases and the tied table)."""
    layer_linears = 12 * H * H + 9 * H  # qkv 3h^2+3h, proj h^2+h, fc1 4h^2+4h, fc2 4h^2+h
    return total_params(eager_gpt(layers=L, vocab=V).model), L * layer_linears + V * H


def test_one_micro_batch_peaks_in_the_loss_backward_without_gradients():
    """ga = 1: `.grad` does not exist yet; weights (4) and Adam moments (8) per parameter,
    the layers' and head's saved activations, the bf16 weight copies, and the loss backward's
    two fp32 logits-sized gradients."""
    job = eager_gpt(ga=1)
    n, cast = _gpt_params()
    V = 50257
    act = 2 * 38 * T * H + 1 * T * H + (4 + 2) * T * H + 4 * T * V  # layers, emb mask, head
    expected = 12 * n + act + 2 * LSE + 2 * cast + 8 * T * V + WORKSPACE_BYTES
    result = simulate(job)
    memory = result.stages[0].memory
    assert memory.moment == "backward"
    assert memory.gradients_bytes == 0
    assert result.peak_allocated_bytes == pytest.approx(expected, rel=1e-9)


def test_later_micro_batches_hold_the_gradients():
    one, two = simulate(eager_gpt(ga=1)), simulate(eager_gpt(ga=2))
    n, _ = _gpt_params()
    assert two.stages[0].memory.gradients_bytes == pytest.approx(4 * n)
    assert two.peak_allocated_bytes - one.peak_allocated_bytes == pytest.approx(4 * n)


def test_full_recompute_peaks_in_the_forward_with_the_weight_cache():
    """Checkpointed layers drop their weight copies after the forward, but autocast's cache holds
    them until the forward ends: the loss forward (bf16 + fp32 logits) is the peak."""
    job = eager_gpt(ga=2, recompute="full", layers=8)
    memory = simulate(job).stages[0].memory
    _, cast = _gpt_params(L=8)
    assert memory.moment == "forward"
    assert memory.amp_weight_copies_bytes == pytest.approx(2 * cast)
    assert memory.loss_temporaries_bytes == pytest.approx((2 + 4) * T * 50257)


def test_reserved_adds_allocator_overhead_and_allocated_plus_context_decides_the_fit():
    result = simulate(eager_gpt())
    memory = result.stages[0].memory
    assert memory.allocator_reserved_bytes == pytest.approx(
        memory.allocated_bytes * (1 + ALLOCATOR_OVERHEAD))
    assert result.peak_memory_bytes == pytest.approx(memory.allocated_bytes + 2 * GiB)
    assert result.fits_in_memory is (result.peak_memory_bytes <= 80 * GiB)


def test_megatron_lm_fp16_optimizer_step_holds_fp32_main_gradients():
    """Megatron-LM fp16: 16-bit weights and gradient buffer, fp32 master weights and Adam moments
    (16 bytes/param) at all times; the step adds fp32 copies of the main gradients (20 total).
    With hardly any activations that moment is the peak. (Besides: TE's placeholder weight
    gradients, tests/simulator_tests/test_te_dummy_wgrads.py.)"""
    job = make_job(model={"seq_length": 64, "num_layers": 8},
                   training={"global_batch_size": 16, "precision": "fp16"},
                   parallel={"tp": 1, "pp": 1, "dp": 8}, cluster={"num_gpus": 8})
    memory = simulate(job).stages[0].memory
    from simulator.memory.states import stage_param_counts

    n = float(stage_param_counts(job)[0])
    assert memory.moment == "optimizer"
    assert memory.activations_bytes == 0
    assert memory.allocated_bytes == pytest.approx(20 * n + WORKSPACE_BYTES
                                                   + memory.te_dummy_wgrads_bytes)


def test_megatron_last_stage_holds_the_16_bit_logits_in_the_loss():
    """Megatron's vocab-parallel cross-entropy keeps the fp32 softmax (4 t V / tp, saved) and,
    while making it, the 16-bit logits (2 t V / tp)."""
    job = make_job(parallel={"tp": 2, "pp": 2, "dp": 2})
    graph = build_graph(job)
    vocab = 50432 // 2
    tokens = job.training.micro_batch_size * job.model.seq_length
    assert graph.head.forward_transient_bytes == pytest.approx(2 * tokens * vocab)
    assert graph.head.working_bytes == pytest.approx(2 * tokens * vocab)


def test_memory_terms_are_named_in_the_result():
    data = simulate(eager_gpt()).to_dict()
    terms = data["memory"][0]
    for key in ("weights_bytes", "gradients_bytes", "main_gradients_bytes",
                "optimizer_states_bytes", "activations_bytes", "amp_weight_copies_bytes",
                "loss_temporaries_bytes", "working_bytes", "embedding_gradient_bytes",
                "workspace_bytes", "context_bytes", "moment", "allocated_bytes",
                "allocator_reserved_bytes", "total_bytes"):
        assert key in terms
    assert data["peak_allocated_bytes"] == pytest.approx(terms["allocated_bytes"])
