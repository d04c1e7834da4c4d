"""Low precision together with experts, MLA, MTP, context parallelism and FSDP (issues 22 and 23
merged): every Transformer Engine linear runs in the recipe, the bf16 first / last layers are a
layer kind of their own, and the combinations not modelled together are refused. Expected
numbers are written out here from the formats' definitions, not read from the simulator."""

from __future__ import annotations

import re
from typing import Any

import pytest

from simulator import job_from_dict, simulate
from simulator.errors import ConfigError
from simulator.graph.blocks import build_graph
from simulator.graph.ops import CP_GROUPS, Block, CommGroup, Op, OpKind
from simulator.job.enums import CollectiveKind, Precision
from simulator.job.layer_pattern import chunk_kind_counts
from simulator.network.algorithms import Algo, nvls
from simulator.network.topology import tp_placement
from simulator.simulate import clear_caches, default_network
from simulator.timeline.stragglers import _sync_loss

H, F, E, K, T = 1024, 512, 8, 2, 1024  # hidden, expert FFN, experts, top-k, tokens per micro-batch
KV = 4 * 64  # 4 query groups of 64
MXFP8_COPY = 1 + 1 / 32  # one MXFP8 copy per element: 1 byte and an E8M0 scale per 32
MOE = {"name": "mini-moe", "num_layers": 4, "hidden_size": H, "num_attention_heads": 16,
       "num_query_groups": 4, "ffn_hidden_size": 2048, "moe_ffn_hidden_size": F,
       "vocab_size": 32768, "seq_length": T, "norm": "rmsnorm", "use_bias": False,
       "gated_mlp": True, "position_embedding": "rope", "tied_embeddings": False,
       "hidden_dropout": 0.0, "attention_dropout": 0.0, "num_experts": E, "moe_router_topk": K}


def data(precision: str = "fp8", model: dict[str, Any] | None = None,
         training: dict[str, Any] | None = None, parallel: dict[str, Any] | None = None,
         gpus: int = 8) -> dict[str, Any]:
    recipe = {"fp8_recipe": "mxfp8"} if precision == "fp8" else {}
    return {"model": {**MOE, **(model or {})},
            "training": {"global_batch_size": 64, "micro_batch_size": 1, "precision": precision,
                         "flash_attention": True, **recipe, **(training or {})},
            "parallel": {"tp": 1, "pp": 1, "ep": 8, "distributed_optimizer": True,
                         **(parallel or {})},
            "cluster": {"gpu": "b200", "num_gpus": gpus}}


def ops(block: Block, prefix: str) -> list[Op]:
    return [op for op in (*block.forward, *block.backward) if op.name.startswith(prefix)]


def test_expert_grouped_gemms_run_low_and_the_router_stays_16_bit() -> None:
    layer = build_graph(job_from_dict(data())).layer
    gemms = [op for op in ops(layer, "moe.fc") if op.kind is OpKind.GEMM]
    assert len(gemms) == 6  # fc1 and fc2: fprop, dgrad, wgrad
    assert all(op.precision is Precision.FP8 and op.variant == "mxfp8" for op in gemms)
    router = [op for op in ops(layer, "moe.router") if op.kind is OpKind.GEMM]
    assert router and all(op.precision is None for op in router)
    attention = [op for op in ops(layer, "qkv") + ops(layer, "attn.proj") if op.kind is OpKind.GEMM]
    assert len(attention) == 6 and all(op.precision is Precision.FP8 for op in attention)
    # a grouped GEMM stays one host launch of one kernel per local expert
    assert all(op.kernels == 1 and op.host_launches == 1 for op in gemms)  # ep 8: 1 local expert


def test_expert_quantize_bytes_match_an_independent_count() -> None:
    """Balanced routing with ep = 1: each of the 8 local experts gets T k / E = 256 tokens. MXFP8
    (no amax pass, separate rowwise and columnwise copies) quantizes fc1's and fc2's inputs
    (read 2 bytes, write 2 copies) and their output gradients in every micro-batch, and each
    expert weight once per iteration (here 8 micro-batches: m = 64 / (8 x 1))."""
    layer = build_graph(job_from_dict(data(parallel={"ep": 1}))).layer
    rows = E * (T * K // E)
    per_elem = 2 + 2 * MXFP8_COPY
    inputs = rows * H + rows * F  # fc1 input, fc2 input
    grads = rows * 2 * F + rows * H  # fc1 output (gate and up), fc2 output
    weights = E * (H * 2 * F + F * H)
    expected = per_elem * (inputs + grads + weights / 8)
    quantize = sum(op.bytes for op in ops(layer, "moe.fc") if op.kind is OpKind.QUANTIZE)
    assert quantize == pytest.approx(expected, rel=1e-12)
    sixteen = build_graph(job_from_dict(data("bf16", parallel={"ep": 1}))).layer
    assert not [op for op in ops(sixteen, "moe.") if op.kind is OpKind.QUANTIZE]
    flops = [sum(op.flops for op in ops(b, "moe.fc") if op.kind is OpKind.GEMM)
             for b in (layer, sixteen)]
    assert flops[0] == flops[1]  # same arithmetic, in another format


def test_bf16_first_and_last_layers_are_a_kind_of_their_own_in_a_moe_job() -> None:
    """Tensorwise FP8 with the first and the last of 4 MoE layers in bf16: two kinds, their
    counts by global layer number, the bf16 kind's expert GEMMs 16-bit, and the cached FP8
    weight copies (1 byte each on Blackwell: one copy serves both usages) of the 2 FP8 layers
    only."""
    d = data(training={"fp8_recipe": "tensorwise", "first_last_layers_bf16": True},
             parallel={"pp": 2, "ep": 4}, gpus=8)
    job = job_from_dict(d)
    kinds, counts = chunk_kind_counts(job)
    assert [k.label for k in kinds] == ["moe", "moe+bf16"]
    assert counts[:, :, 0].tolist() == [[1, 1], [1, 1]]  # each stage: one of each
    graph = build_graph(job)
    assert graph.labels == ("moe", "moe+bf16")
    low, high = graph.layer_blocks
    assert {op.precision for op in ops(low, "moe.fc") if op.kind is OpKind.GEMM} == {Precision.FP8}
    assert {op.precision for op in ops(high, "moe.fc") if op.kind is OpKind.GEMM} == {None}
    assert not [op for op in (*high.forward, *high.backward) if op.kind is OpKind.QUANTIZE]
    memory = simulate(job).stages[0].memory
    attention = H * (H + 2 * KV) + H * H
    experts = E * (H * 2 * F + F * H) / 4  # over ep = 4
    assert memory.low_precision_weights_bytes == pytest.approx(1 * (attention + experts))


def test_the_mtp_depth_runs_fp8_even_after_a_bf16_last_layer_and_bf16_under_fp4() -> None:
    """Megatron-Core's MTP enters the global fp8 context (whatever first_last_layers_bf16
    says) and ignores fp4 (multi_token_prediction.py)."""
    mtp = {"mtp_num_layers": 1}
    fp8 = build_graph(job_from_dict(data(model=mtp, training={
        "fp8_recipe": "tensorwise", "first_last_layers_bf16": True}, parallel={"ep": 1})))
    depth = fp8.layer_blocks[fp8.labels.index("mtp")]
    assert {op.precision for op in ops(depth, "moe.fc") if op.kind is OpKind.GEMM} == {Precision.FP8}
    assert {op.precision for op in ops(depth, "mtp.eh_proj") if op.kind is OpKind.GEMM} == {
        Precision.FP8}
    fp4 = build_graph(job_from_dict(data("fp4", model=mtp, parallel={"ep": 1})))
    depth4 = fp4.layer_blocks[fp4.labels.index("mtp")]
    assert {op.precision for op in ops(depth4, "moe.fc") if op.kind is OpKind.GEMM} == {None}
    assert {op.precision for op in ops(fp4.layer, "moe.fc") if op.kind is OpKind.GEMM} == {
        Precision.FP4}


def test_mla_projections_run_low_and_te_gathers_the_normed_latents_quantized() -> None:
    """MLA with tp 2 and SP under MXFP8: the down, up and output projections run in FP8; the
    query and key/value latents are all-gathered as one MXFP8 copy each, the rotary key in 16
    bits."""
    mla = {"multi_latent_attention": True, "q_lora_rank": 384, "kv_lora_rank": 256,
           "qk_head_dim": 64, "qk_pos_emb_head_dim": 32, "v_head_dim": 64, "num_query_groups": 16}
    job = job_from_dict(data(model=mla, parallel={"tp": 2, "ep": 4, "sequence_parallel": True}))
    layer = build_graph(job).layer
    names = {op.name for op in layer.forward if op.kind is OpKind.GEMM and op.precision}
    assert {"mla.q_down", "mla.kv_down", "mla.q_up", "mla.kv_up", "attn.proj"} <= names
    gathers = {c.name: c.bytes for c in layer.forward_comm if c.group is CommGroup.TP}
    assert gathers["mla.q_up.all_gather"] == pytest.approx(T * 384 * MXFP8_COPY)
    assert gathers["mla.kv_up.all_gather"] == pytest.approx(T * 256 * MXFP8_COPY)
    assert gathers["mla.k_pos_emb_all_gather"] == T * 32 * 2


def test_shared_experts_quantize_their_tp_all_gather() -> None:
    """A shared expert is a dense MLP: under SP its up projection all-gathers MXFP8 tokens."""
    job = job_from_dict(data(model={"moe_shared_expert_intermediate_size": 1024},
                             parallel={"tp": 2, "ep": 4, "sequence_parallel": True}))
    comm = {c.name: c.bytes for c in build_graph(job).layer.forward_comm}
    assert comm["shared_expert.up.all_gather"] == pytest.approx(T * H * MXFP8_COPY)
    assert comm["qkv.all_gather"] == pytest.approx(T * H * MXFP8_COPY)


def dense(**parallel: Any) -> dict[str, Any]:
    """The same model without experts (a dense MLP of 2048)."""
    d = data(parallel={"ep": 1, **parallel})
    d["model"] = {k: v for k, v in d["model"].items()
                  if not k.startswith("moe_") and k != "num_experts"}
    return d


@pytest.mark.parametrize(("d", "message"), [
    (data(parallel={"data_parallel_sharding": "optim_grads_params"}),
     "data_parallel_sharding=optim_grads_params with model.num_experts is not modelled together"),
    (data(training={"fp8_dot_product_attention": True},
          parallel={"cp": 2, "ep": 4, "cp_comm_type": "a2a"}),
     "fp8_dot_product_attention with parallel.cp_comm_type=a2a is not modelled together"),
    (data(training={"fp8_dot_product_attention": True},
          model={"multi_latent_attention": True, "q_lora_rank": 384, "kv_lora_rank": 256}),
     "fp8_dot_product_attention with model.multi_latent_attention is not modelled together"),
    (data(training={"cuda_graphs": "per_layer"}),
     "training.cuda_graphs=per_layer with a dropless MoE model is not modelled"),
])
def test_combinations_not_modelled_together_are_refused(d: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        job_from_dict(d)


def test_fsdp_of_a_dense_job_without_cp_is_still_modelled() -> None:
    job = job_from_dict(dense(data_parallel_sharding="optim_grads_params"))
    assert any(c.group is CommGroup.DP for c in build_graph(job).layer.forward_comm)


def test_fp8_attention_with_p2p_context_parallelism_passes_fp8_keys_and_values() -> None:
    """TE's p2p ring with FP8 attention sends K and V in FP8 (1 byte) and the backward K/V
    with 16-bit gradients; the ring's steps run at the FP8 peak. Here cp 2: one exchange of
    the local T / 2 tokens' K and V (4 groups of 64) per direction."""
    on = job_from_dict(dense(cp=2) | {"training": {**dense()["training"],
                                                   "fp8_dot_product_attention": True}})
    layer = build_graph(on).layer
    kv = T // 2 * 2 * KV  # tokens x (K and V) x group width, per byte
    sends = {c.name: c.bytes for c in (*layer.forward_comm, *layer.backward_comm)
             if c.group in CP_GROUPS}
    assert sends["attn.cp.kv_exchange1"] == kv * 1
    assert sends["attn.cp.kv_dkv_exchange1"] == kv * 1 + kv * 2
    steps = [op for op in layer.forward if op.kind is OpKind.FLASH_ATTENTION]
    assert steps and all(op.precision is Precision.FP8 for op in steps)


def test_expert_parallel_all_to_alls_count_in_the_straggler_wait() -> None:
    """tp = 1: the kernel-time term waits at the all-to-alls for the slowest of the ep ranks
    (e(8) per collective), where a tensor-parallel-only reading would see no synchronization."""
    job = job_from_dict(data("bf16"))
    clear_caches()
    r = simulate(job)
    assert r.costs is not None
    block, s2 = build_graph(job).layer, r.costs.layer.kernel_square_s2
    assert _sync_loss(job, block, s2) > 0
    assert r.scale_loss is not None and r.scale_loss.transient_s > 0


def test_blackwell_nvls_runs_at_nccls_blackwell_efficiency() -> None:
    """NCCL's nvlsEfficiency is 0.74 on Blackwell (src/graph/tuning.cc), 0.85 on Hopper."""
    job = job_from_dict(data("bf16", model={"num_query_groups": 8},
                             parallel={"tp": 8, "ep": 1, "sequence_parallel": True}))
    links = default_network(job).links(tp_placement(job))
    assert links.nvls and links.blackwell and links.nvls_efficiency == 0.74
    result = nvls(CollectiveKind.ALL_GATHER, links, Algo.NVLS)
    assert result is not None
    _, bandwidth = result
    assert bandwidth == pytest.approx(links.intra_Bps * 0.74 * 7 / 8)
