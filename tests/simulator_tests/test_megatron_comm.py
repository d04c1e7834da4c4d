"""Every collective of Megatron-LM's iteration against its own equations, written here.

Sources of the expected values (not the simulator's code): Megatron-Core
`core/tensor_parallel/layers.py` (ColumnParallelLinear / RowParallelLinear and
`LinearWithGradAccumulationAndAsyncCommunication`), `mappings.py`, `VocabParallelEmbedding`,
`pipeline_parallel/schedules.py::get_tensor_shapes`, `distributed/finalize_model_grads.py` and
`optimizer/clip_grads.py`; bytes per parameter from `docs/user-guide/features/dist_optimizer.md`.
Buffers are per GPU, all-gather / reduce-scatter sized by the gathered tensor.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest

from simulator import simulate
from simulator.costs.analytic import CostSource, OpCost
from simulator.costs.blocks import cost_block
from simulator.graph.blocks import build_graph
from simulator.graph.dense import build_layer
from simulator.graph.embedding import build_embedding
from simulator.graph.head import build_head
from simulator.graph.ops import CommGroup, CommOp, Op
from simulator.job.enums import CollectiveKind
from simulator.job.specs import Job
from simulator.network.collectives import NetworkModel
from simulator.network.topology import Placement
from simulator.simulate import default_network
from tests.conftest import make_job

AR, AG, RS = "all_reduce", "all_gather", "reduce_scatter"
S, B, H = 1024, 2, 1024

GQA_SWIGLU = {"num_attention_heads": 16, "num_query_groups": 8, "ffn_hidden_size": 2816,
              "gated_mlp": True, "norm": "rmsnorm", "use_bias": False, "tied_embeddings": False,
              "position_embedding": "rope"}
MODELS = {"gpt": {}, "gqa_swiglu": GQA_SWIGLU}


def _job(tp: int, sp: bool, recompute: str = "none", model: str = "gpt", pp: int = 1,
         precision: str = "bf16", **parallel: object) -> Job:
    return make_job(
        model={"seq_length": S, "hidden_size": H, "num_attention_heads": 16, **MODELS[model]},
        training={"micro_batch_size": B, "global_batch_size": 8 * B, "recompute": recompute,
                  "precision": precision},
        parallel={"tp": tp, "pp": pp, "dp": 8 // (tp * pp), "sequence_parallel": sp, **parallel},
        cluster={"num_gpus": 8})


def _sig(ops: tuple[CommOp, ...]) -> Counter[tuple[str, float, str, bool]]:
    """(kind, bytes, group, blocking) of each collective, as a multiset."""
    return Counter((op.kind.value, op.bytes, op.group.value, not op.overlap) for op in ops)


def megatron_layer_collectives(t: int, sp: bool) -> tuple[Counter, Counter]:
    """Forward and backward collectives of one layer: two column-parallel linears (QKV, MLP up)
    and two row-parallel ones (projection, MLP down), each moving the full s*b*h activation."""
    if t == 1:
        return Counter(), Counter()
    act = S * B * H * 2
    if not sp:
        # row-parallel outputs all-reduced (blocking); column-parallel input gradients
        # all-reduced asynchronously behind the weight-gradient GEMM
        return Counter({(AR, act, "tp", True): 2}), Counter({(AR, act, "tp", False): 2})
    forward = Counter({(AG, act, "tp", True): 2, (RS, act, "tp", True): 2})
    # row-parallel: output gradient all-gathered (blocking); column-parallel: input re-gathered
    # for the weight gradient and input gradient reduce-scattered, both asynchronous
    backward = Counter({(AG, act, "tp", True): 2, (AG, act, "tp", False): 2,
                        (RS, act, "tp", False): 2})
    return forward, backward


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize(("t", "sp"), [(1, False), (2, False), (8, False), (2, True), (8, True)])
def test_layer_collectives_match_megatron(t, sp, recompute, model):
    layer = build_layer(_job(t, sp, recompute, model))
    forward, backward = megatron_layer_collectives(t, sp)
    assert _sig(layer.forward_comm) == forward
    assert _sig(layer.backward_comm) == backward
    # full recompute re-runs the forward, its collectives included; selective only attention
    assert _sig(layer.recompute_comm) == (forward if recompute == "full" else Counter())


@pytest.mark.parametrize(("t", "sp"), [(2, False), (8, False), (2, True), (8, True)])
def test_megatron_blocks_on_0_backward_collectives_without_sp_and_2_with(t, sp):
    blocking = [op for op in build_layer(_job(t, sp)).backward_comm if not op.overlap]
    assert len(blocking) == (2 if sp else 0)


@pytest.mark.parametrize(("t", "sp"), [(2, False), (8, False), (2, True), (8, True)])
def test_asynchronous_collectives_hide_behind_the_gemm_megatron_waits_after(t, sp):
    """The dgrad all-reduce (or reduce-scatter) overlaps the same linear's weight-gradient GEMM;
    the SP input all-gather overlaps its data-gradient GEMM."""
    names = {op.name for op in build_layer(_job(t, sp)).backward}
    for op in build_layer(_job(t, sp)).backward_comm:
        if op.overlap:
            assert op.overlap in names
            linear = op.overlap.rsplit(".", 1)[0]
            assert linear in ("qkv", "mlp.up")
            expected = f"{linear}.dgrad" if op.kind is CollectiveKind.ALL_GATHER else f"{linear}.wgrad"
            assert op.overlap == expected


@pytest.mark.parametrize(("t", "sp"), [(1, False), (2, False), (8, False), (2, True), (8, True)])
def test_head_collectives_match_megatron(t, sp):
    """Logits: a column-parallel linear; vocab-parallel cross-entropy: all-reduces of the max,
    the target logit and the sum of exponentials, one fp32 value per token each."""
    head = build_head(_job(t, sp))
    if t == 1:
        assert head.forward_comm == head.backward_comm == ()
        return
    act, ce = S * B * H * 2, S * B * 4
    forward = Counter({(AR, ce, "tp", True): 3})
    if sp:
        forward[(AG, act, "tp", True)] += 1
        backward = Counter({(AG, act, "tp", False): 1, (RS, act, "tp", False): 1})
    else:  # parallel_lm_logits: the input gradient's all-reduce
        backward = Counter({(AR, act, "tp", False): 1})
    assert _sig(head.forward_comm) == forward
    assert _sig(head.backward_comm) == backward


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("t", "sp"), [(1, False), (2, False), (8, False), (2, True), (8, True)])
def test_embedding_collectives_match_megatron(t, sp, model):
    """Partial lookups summed over tp: all-reduce; with SP a reduce-scatter when there are no
    learned positions (else all-reduce, add positions, split); SP backward all-gathers."""
    emb = build_embedding(_job(t, sp, model=model))
    if t == 1:
        assert emb.forward_comm == emb.backward_comm == ()
        return
    act = S * B * H * 2
    learned = model == "gpt"
    kind = RS if sp and not learned else AR
    assert _sig(emb.forward_comm) == Counter({(kind, act, "tp", True): 1})
    assert _sig(emb.backward_comm) == (Counter({(AG, act, "tp", True): 1}) if sp else Counter())


@pytest.mark.parametrize(("t", "sp"), [(1, False), (2, False), (8, False), (2, True), (8, True)])
def test_pipeline_message_is_the_full_activation_unless_sequence_parallel(t, sp):
    """Megatron-Core sends [s, b, h], split by tp only under SP (scatter-gather was removed)."""
    graph = build_graph(_job(t, sp, pp=2 if t < 8 else 1))
    assert graph.p2p_bytes == S * B * H * 2 / (t if sp else 1)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_megatron_deepspeed_scatters_the_pipeline_message_over_tp(t):
    """Megatron-DeepSpeed's `--scatter-gather-tensors-in-pipeline` (on by default): each tp rank
    sends 1/t of [s, b, h]."""
    job = make_job(model={"seq_length": S, "hidden_size": H},
                   training={"micro_batch_size": B, "global_batch_size": 8 * B,
                             "framework": "megatron-deepspeed"},
                   parallel={"tp": t, "pp": 1, "dp": 8 // t})
    assert build_graph(job).p2p_bytes == S * B * H * 2 / t


@dataclass(frozen=True)
class RecordingNetwork(NetworkModel):
    """The default network model that records every (kind, bytes, group size) it times."""

    calls: list[tuple[str, float, int]] = field(default_factory=list)

    def time(self, kind: CollectiveKind, nbytes: float, where: Placement) -> float:
        self.calls.append((kind.value, float(nbytes), where.size))
        return super().time(kind, nbytes, where)


def _recorded(job: Job) -> Counter[tuple[str, float, int]]:
    net = default_network(job)
    rec = RecordingNetwork(net.hardware, net.intra_bandwidth_Bps, net.inter_bandwidth_Bps, net.table)
    simulate(job, network=rec)
    return Counter(rec.calls)


def gpt_stage_params(L: int, h: int, s: int, vocab_padded: int, t: int, p: int) -> list[float]:
    """Narayanan et al. 2021 per layer: 12h^2 + 13h, of which the linears' weights and column
    biases (12h^2 + 7h) are split by tp; the row-parallel biases and LayerNorms (6h), the learned
    positions (s h) and the final LayerNorm (2h) are replicated; with p > 1 the last stage keeps
    a copy of the tied word embedding."""
    layer = (12 * h * h + 7 * h) / t + 6 * h
    per_stage = L // p * layer
    first = per_stage + vocab_padded * h / t + s * h
    last = per_stage + 2 * h + vocab_padded * h / t
    if p == 1:
        return [per_stage + vocab_padded * h / t + s * h + 2 * h]
    return [first] + [per_stage] * (p - 2) + [last]


def test_replicated_parameters_are_not_divided_by_tp():
    job = _job(2, False, pp=2, precision="fp16")
    from simulator.memory.states import stage_param_counts

    vocab = 50432  # 50,257 padded to a multiple of 128 * tp = 256
    expected = gpt_stage_params(8, H, S, vocab, 2, 2)
    np.testing.assert_allclose(stage_param_counts(job), expected, rtol=1e-12)


@pytest.mark.parametrize(("precision", "grad_bytes"), [("fp16", 2), ("bf16", 4)])
@pytest.mark.parametrize("zero1", [False, True])
def test_data_parallel_reduction_moves_each_stage_s_gradients(precision, grad_bytes, zero1):
    """Megatron's DDP all-reduces each stage's gradient buffer (fp16: 16-bit, bf16: fp32 main
    gradients); the distributed optimizer reduce-scatters it and all-gathers the 16-bit
    parameters after the step."""
    job = _job(2, False, pp=2, precision=precision, distributed_optimizer=zero1)
    calls = _recorded(job)
    dp = job.dp
    params = gpt_stage_params(8, H, S, 50432, 2, 2)
    for n in params:
        if zero1:
            assert calls[(RS, n * grad_bytes, dp)] >= 1
            assert calls[(AG, n * 2, dp)] >= 1
        else:
            assert calls[(AR, n * grad_bytes, dp)] >= 1


def test_tied_embedding_gradient_is_all_reduced_between_first_and_last_stage():
    job = _job(2, False, pp=2, precision="bf16")
    assert _recorded(job)[(AR, 50432 * H / 2 * 4, 2)] == 1


@pytest.mark.parametrize(("precision", "stats"), [("bf16", 1), ("fp16", 2)])
def test_optimizer_all_reduces_gradient_norm_and_fp16_overflow_over_model_ranks(precision, stats):
    """clip_grads: one fp32 norm over the model-parallel group (tp x pp); fp16 loss scaling adds
    the overflow flag."""
    job = _job(2, False, pp=2, precision=precision)
    assert _recorded(job)[(AR, 4.0, 2 * 2)] == stats


@pytest.mark.parametrize("model", MODELS)
def test_sequence_parallel_norm_gradients_are_all_reduced_over_tp(model):
    """finalize_model_grads: gradients of parameters marked `sequence_parallel` (norms and
    row-parallel biases, final norm) are summed over tp once per iteration, per stage."""
    job = _job(2, True, model=model, pp=2, precision="bf16")
    gpt = model == "gpt"
    norm = 2 * H if gpt else H  # LayerNorm weight + bias, RMSNorm weight
    per_layer = 2 * norm + (2 * H if gpt else 0)
    first, last = 4 * per_layer, 4 * per_layer + norm
    calls = _recorded(job)
    assert calls[(AR, first * 4.0, 2)] == 1
    assert calls[(AR, last * 4.0, 2)] == 1
    assert not any(k == AR and n in (first * 4.0, last * 4.0)
                   for k, n, _ in _recorded(_job(2, False, model=model, pp=2)))


@dataclass(frozen=True)
class Fixed:
    """Every kernel launch takes 1 ms."""

    def cost(self, op: Op) -> OpCost:
        return OpCost(1e-3 * op.kernels, CostSource.MEASURED)


@pytest.mark.parametrize("sp", [False, True])
def test_an_overlapped_collective_costs_only_what_outlasts_its_gemm(sp):
    """max(0, comm - overlapped GEMM): with 3 ms collectives behind 1 ms GEMMs, each async
    collective exposes 2 ms; blocking ones their full 3 ms."""
    job = _job(2, sp)
    layer = build_layer(job)
    eff = job.hardware.efficiency.model_copy(update={"host_overhead_s": 0.0,
                                                     "collective_overhead_s": 0.0})
    cost = cost_block(layer, Fixed(), lambda op: 3e-3, eff)
    blocking = sum(1 for op in layer.backward_comm if not op.overlap)
    overlapped = len(layer.backward_comm) - blocking
    assert cost.backward_comm == pytest.approx(3e-3 * blocking + 2e-3 * overlapped)
    assert cost.forward_comm == pytest.approx(3e-3 * len(layer.forward_comm))


def test_collectives_all_belong_to_the_tensor_parallel_group():
    job = _job(8, True)
    for block in (build_layer(job), build_head(job), build_embedding(job)):
        for op in block.forward_comm + block.backward_comm:
            assert op.group is CommGroup.TP
