"""Memory terms read from Megatron-Core (23e00ed, core_r0.14.0) and Transformer Engine (2.11,
c188b533), each checked against a hand formula from the source (docs/memory.md):

- TE's fused cross-entropy (`training.cross_entropy_fusion: te`) keeps the 16-bit logits, which
  hold the gradient in place, and an fp32 loss per token; no fp32 softmax, no fp32 copy.
- The MoE unpermute keeps nothing: the probabilities are applied in the experts' activation.
- Ulysses (`a2a`) context parallelism keeps the attention's output in the head-split layout beside
  the projection's input.
- A layer's transient buffers and the output block's tensors are never held at the same moment.
- The output layer gathers its sequence-parallel input into Megatron's global buffer, kept.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator import job_from_dict, simulate
from simulator.errors import ConfigError
from simulator.graph.blocks import build_graph
from tests.conftest import make_job

MINI_MOE = {"name": "mini-moe", "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
            "num_query_groups": 4, "ffn_hidden_size": 2048, "vocab_size": 32000,
            "seq_length": 2048, "norm": "rmsnorm", "use_bias": False, "gated_mlp": True,
            "position_embedding": "rope", "tied_embeddings": False, "hidden_dropout": 0.0,
            "attention_dropout": 0.0, "num_experts": 8, "moe_router_topk": 2}
LLAMA = {**{k: v for k, v in MINI_MOE.items() if k not in ("num_experts", "moe_router_topk")},
         "name": "mini-llama", "seq_length": 4096}


def _job(model: dict[str, Any], parallel: dict[str, Any], gpus: int, **training: Any) -> Any:
    return job_from_dict({
        "model": model,
        "training": {"global_batch_size": 16, "micro_batch_size": 1, "precision": "bf16",
                     "flash_attention": True, **training},
        "parallel": {"distributed_optimizer": True, **parallel},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": gpus}})


def test_te_cross_entropy_keeps_16_bit_logits_and_a_loss_per_token() -> None:
    """tp 2 with sequence parallelism, t = 1024 tokens, V / tp = 50432 / 2 (Megatron's padding):
    the unfused loss saves the fp32 softmax (4 t V / tp) and makes it from the 16-bit logits
    (2 t V / tp, transient); TE's saves the 16-bit logits (2 t V / tp) and the fp32 loss (4 t);
    m/d/X_y are 3 fp32 a token, and their all-gather tp times that; the output layer's backward
    makes the input gradient of the whole sequence and its reduce-scattered half (2 t h (1 + 1/2))."""
    parallel = {"tp": 2, "pp": 2, "dp": 2, "sequence_parallel": True}
    plain = build_graph(make_job(parallel=parallel)).head
    fused = build_graph(make_job(parallel=parallel,
                                 training={"cross_entropy_fusion": "te"})).head
    t, v, h = 1024, 50432 // 2, 1024
    assert plain.saved_bytes - fused.saved_bytes == pytest.approx(4 * t * v - (2 * t * v + 4 * t))
    assert plain.forward_transient_bytes == pytest.approx(2 * t * v)
    assert fused.forward_transient_bytes == pytest.approx(3 * 4 * t * (1 + 2))
    assert fused.working_bytes == pytest.approx(2 * t * h * 1.5)


def test_te_cross_entropy_changes_memory_not_time() -> None:
    """The fused kernels' time is not modelled (simulator.graph.head): the step time stays."""
    plain = simulate(_job(LLAMA, {}, 1))
    fused = simulate(_job(LLAMA, {}, 1, cross_entropy_fusion="te"))
    assert fused.iteration_time_s == plain.iteration_time_s
    assert fused.peak_allocated_bytes < plain.peak_allocated_bytes


@pytest.mark.parametrize("framework", ["pytorch", "megatron-deepspeed"])
def test_te_cross_entropy_is_refused_outside_megatron_core(framework: str) -> None:
    with pytest.raises(ConfigError, match="cross_entropy_fusion"):
        make_job(training={"cross_entropy_fusion": "te", "framework": framework})


def test_moe_layer_saves_router_and_experts_but_not_the_unpermuted_copies() -> None:
    """ep 8, dropless and balanced: 2048 tokens x top-2 over 8 experts leave 4096 copies on each
    rank's one expert. Saved (bytes): the router's input 2 t h and fp32 scores 4 t E, fc1's input
    2 n h, the SwiGLU's input 2 n 2f, fc2's input 2 n f; the unpermute (a gather by index since
    the probabilities moved into the activation) saves nothing."""
    layer = build_graph(_job(MINI_MOE, {"ep": 8}, 8)).layer
    t, n, h, f, e = 2048, 4096, 1024, 2048, 8
    assert layer.moe_saved_bytes == pytest.approx(
        2 * t * h + 4 * t * e + 2 * n * h + 2 * n * 2 * f + 2 * n * f)
    unpermute = [op for op in layer.forward if op.name == "moe.unpermute"]
    assert len(unpermute) == 1 and unpermute[0].saved_bytes == 0


def test_a2a_context_parallel_attention_keeps_its_output_in_the_head_split_layout() -> None:
    """cp 2 over 4096 tokens, 16 heads of 64 (4 K/V groups), tp 1: the rank's 2048 tokens' Q, K,
    V (2 t (16 + 2 x 4) 64) and output (2 t 16 x 64), and the fp32 log-sum-exp of 8 heads over the
    whole 4096 tokens."""
    job = _job(LLAMA, {"cp": 2, "cp_comm_type": "a2a"}, 2)
    core = [op for op in build_graph(job).layer.forward if op.name.endswith(".attention")]
    t, d = 2048, 64
    assert len(core) == 1
    assert core[0].saved_bytes == pytest.approx(
        2 * t * (16 + 2 * 4) * d + 2 * t * 16 * d + 4 * 8 * 4096)


def test_layer_buffers_are_not_held_with_the_output_blocks_tensors() -> None:
    """One stage, whose loss outweighs a layer's all-to-all buffers: the peak is the loss's, with
    no buffer; the first of two stages has no output block and peaks with one layer's buffers."""
    one = simulate(_job(MINI_MOE, {"ep": 8}, 8)).stages[0].memory
    assert one.moe_dispatch_buffers_bytes == 0 and one.loss_temporaries_bytes > 0
    first = simulate(_job(MINI_MOE, {"ep": 4, "pp": 2}, 8)).stages[0].memory
    assert first.moe_dispatch_buffers_bytes > 0


def test_sequence_parallel_output_layer_keeps_its_gather_buffer_on_the_last_stage() -> None:
    """Megatron's "mpu" global buffer: the output layer's sequence-parallel input gathered over
    tp, [s / cp, b, h] 16-bit (`GlobalMemoryBuffer.get_tensor`), kept for the process; the other
    stages and a job without sequence parallelism hold none."""
    from simulator.memory.global_buffer import global_buffer_bytes

    sp = _job(LLAMA, {"tp": 2, "pp": 2, "sequence_parallel": True}, 4)
    assert global_buffer_bytes(sp).tolist() == [0.0, 2 * 4096 * 1024]
    cp = _job(LLAMA, {"tp": 2, "cp": 2, "sequence_parallel": True}, 4)
    assert global_buffer_bytes(cp).tolist() == [2 * 2048 * 1024]
    assert global_buffer_bytes(_job(LLAMA, {"tp": 2, "pp": 2}, 4)).tolist() == [0.0, 0.0]
    last = simulate(sp).stages[1].memory
    assert last.global_buffer_bytes == 2 * 4096 * 1024
    assert "global_buffer_bytes" not in simulate(sp).stages[0].memory.to_dict()


def test_stacks_other_than_megatron_core_keep_no_gather_buffer() -> None:
    from simulator.memory.global_buffer import global_buffer_bytes

    job = make_job(parallel={"tp": 2, "pp": 2, "dp": 2, "sequence_parallel": True},
                   training={"framework": "megatron-deepspeed"})
    assert global_buffer_bytes(job).tolist() == [0.0, 0.0]
