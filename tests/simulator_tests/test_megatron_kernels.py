"""The graph launches the kernels Megatron launches: fused-softmax fallback, the fp32 loss, the
embedding tables' gradients -- and the host pays for every launch."""

from __future__ import annotations

import pytest

from simulator.costs.blocks import cost_block
from simulator.graph.attention import fused_softmax_available
from simulator.graph.dense import build_layer
from simulator.graph.embedding import build_embedding
from simulator.graph.head import build_head
from simulator.graph.ops import Op
from simulator.graph.params import padded_vocab
from simulator.simulate import default_kernels
from tests.conftest import make_job


def _job(tp: int, mb: int, pp: int = 1, **model: object):
    return make_job(model=dict(model), parallel={"tp": tp, "pp": pp, "dp": 8 // (tp * pp)},
                    training={"micro_batch_size": mb, "global_batch_size": 8 * mb,
                              "recompute": "full"})


def _op(ops: tuple[Op, ...], name: str) -> Op:
    return next(op for op in ops if op.name == name)


@pytest.mark.parametrize(("tp", "mb", "fused"), [(8, 1, False), (8, 2, True), (4, 1, True),
                                                 (2, 1, True), (1, 1, True)])
def test_fused_softmax_needs_microbatch_times_local_heads_divisible_by_4(tp, mb, fused):
    """Megatron's kernel processes 4 (batch x head) rows per block for sequences over 128: with
    16 heads on 8 ranks (2 local heads) at micro-batch 1 it falls back to PyTorch kernels."""
    job = _job(tp, mb)
    assert fused_softmax_available(job, 16 // tp) is fused
    softmax = _op(build_layer(job).forward, "attn.softmax")
    assert softmax.kernels == (1 if fused else 5)
    assert softmax.variant == ("scale_mask_softmax" if fused else "unfused_fp32")


def test_unfused_softmax_keeps_fp32_probabilities_and_moves_more_bytes():
    fused, unfused = (_op(build_layer(_job(8, mb)).forward, "attn.softmax") for mb in (2, 1))
    per_score = [op.bytes / op.shape[0] for op in (fused, unfused)]
    assert per_score[0] == pytest.approx(4.0)  # read and write 16-bit scores once
    assert per_score[1] > 8 * per_score[0]  # five passes, three of them in fp32
    assert unfused.saved_bytes / unfused.shape[0] == 4.0


def test_sequence_too_long_for_the_fused_kernel_falls_back():
    job = make_job(model={"seq_length": 8192}, training={"micro_batch_size": 4,
                                                          "global_batch_size": 32})
    assert not fused_softmax_available(job, 8)


def test_cross_entropy_reads_fp32_logits_several_times():
    """Megatron casts the logits to fp32, then max, subtract, exp, sum and divide passes."""
    job = _job(1, 1)
    head = build_head(job)
    ce = _op(head.forward, "cross_entropy")
    logits = job.training.micro_batch_size * job.model.seq_length * padded_vocab(job.model, 1)
    assert ce.shape[1] == padded_vocab(job.model, 1)
    assert ce.bytes == pytest.approx(38 * logits)
    assert ce.kernels == 18
    assert _op(head.backward, "cross_entropy.bwd").bytes == pytest.approx(14 * logits)


def test_vocab_parallel_cross_entropy_makes_three_tp_all_reduces():
    names = [c.name for c in build_head(_job(4, 1)).forward_comm]
    assert names == ["cross_entropy.max", "cross_entropy.target", "cross_entropy.sum_exp"]
    assert build_head(_job(1, 1)).forward_comm == ()


def _unfused(job):
    """The job without gradient-accumulation fusion (as Megatron-DeepSpeed runs)."""
    training = job.training.model_copy(update={"gradient_accumulation_fusion": False})
    return job.model_copy(update={"training": training})


def test_tied_table_gradient_is_summed_on_one_stage_and_accumulated_where_it_lives():
    one_stage, two_stages = _unfused(_job(1, 1)), _unfused(_job(1, 1, pp=2))
    emb1 = {op.name for op in build_embedding(one_stage).backward}
    head1 = {op.name for op in build_head(one_stage).backward}
    assert {"embedding.tied_grad_sum", "embedding.grad_accum"} <= emb1
    assert "logits.grad_accum" not in head1
    emb2 = {op.name for op in build_embedding(two_stages).backward}
    head2 = {op.name for op in build_head(two_stages).backward}
    assert "embedding.tied_grad_sum" not in emb2
    assert "logits.grad_accum" in head2  # the last stage's copy of the table


def test_embedding_gradient_writes_the_whole_table():
    job = _job(1, 1)
    grad = _op(build_embedding(job).backward, "embedding.bwd")
    table = padded_vocab(job.model, 1) * job.model.hidden_size * 2
    assert grad.bytes > table


def test_long_inputs_sort_before_the_embedding_gradient():
    short, long = (_op(build_embedding(_job(1, mb)).backward, "embedding.bwd") for mb in (1, 4))
    assert (short.kernels, long.kernels) == (2, 12)


def test_vocab_parallel_embedding_masks_out_of_shard_ids():
    masks = {"embedding.vocab_mask", "embedding.vocab_mask_rows"}
    assert masks <= {op.name for op in build_embedding(_job(2, 1)).forward}
    assert not masks & {op.name for op in build_embedding(_job(1, 1)).forward}


def test_host_dispatch_is_charged_per_kernel_launch_not_per_op():
    """Host-bound (huge per-launch cost): the head's window is its launches x the cost."""
    job = _job(8, 1)
    eff = job.hardware.efficiency.model_copy(update={"host_overhead_s": 1.0,
                                                     "collective_overhead_s": 0.0})
    head = build_head(job)
    cost = cost_block(head, default_kernels(job), lambda op: 0.0, eff)
    launches = sum(op.kernels for op in head.forward)
    assert launches > len(head.forward)
    assert cost.forward_total == pytest.approx(launches, rel=1e-6)


def test_fused_accumulation_writes_the_tied_table_gradient_in_place():
    """Megatron-LM's logits wgrad GEMM accumulates into the shared table's main gradient; only
    the embedding's own dense gradient is added by the gradient hook: no sum kernel, no
    accumulation kernel for the output layer."""
    emb = {op.name for op in build_embedding(_job(1, 1)).backward}
    head = {op.name for op in build_head(_job(1, 1, pp=2)).backward}
    assert "embedding.tied_grad_sum" not in emb and "embedding.grad_accum" in emb
    assert "logits.grad_accum" not in head


def test_a_stack_without_megatron_s_softmax_kernels_runs_the_fp32_fallback():
    """`training.fused_softmax: false` (e.g. Megatron-Core's local spec without apex or
    Transformer Engine): five PyTorch kernels and the fp32 probabilities kept, even where the
    fused kernel's shape rule holds."""
    fused = make_job(training={"micro_batch_size": 2, "global_batch_size": 16})
    plain = make_job(training={"micro_batch_size": 2, "global_batch_size": 16,
                               "fused_softmax": False})
    assert fused_softmax_available(fused, 8) and not fused_softmax_available(plain, 8)
    softmax = _op(build_layer(plain).forward, "attn.softmax")
    assert (softmax.kernels, softmax.variant) == (5, "unfused_fp32")
    assert softmax.saved_bytes == 4 * softmax.shape[0]
