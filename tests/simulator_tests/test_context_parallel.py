"""Context parallelism as Transformer Engine runs it, against formulas written out here: every
rank computes the same share of the causal attention, the ring's exchanges and what of them is
exposed, activations split by cp, gradients reduced over dp x cp, and the layouts TE refuses."""

from __future__ import annotations

from typing import Any

import pytest

from simulator import job_from_dict, simulate
from simulator.errors import ConfigError
from simulator.graph.blocks import build_graph
from simulator.graph.ops import CommGroup, OpKind
from simulator.job.enums import CollectiveKind
from simulator.network.groups import data_parallel_placement
from simulator.report.trace import chrome_trace

LLAMA = {"name": "mini-llama", "num_layers": 2, "hidden_size": 2048, "num_attention_heads": 16,
         "num_query_groups": 8, "ffn_hidden_size": 5632, "vocab_size": 32000, "seq_length": 16384,
         "norm": "rmsnorm", "use_bias": False, "gated_mlp": True, "position_embedding": "rope",
         "tied_embeddings": False, "hidden_dropout": 0.0, "attention_dropout": 0.0}


def cp_job(cp: int, kind: str = "p2p", model: dict[str, Any] | None = None,
           parallel: dict[str, Any] | None = None, gpus: int | None = None,
           cluster: dict[str, Any] | None = None) -> Any:
    return job_from_dict({
        "model": {**LLAMA, **(model or {})},
        "training": {"global_batch_size": 2, "micro_batch_size": 1, "precision": "bf16",
                     "flash_attention": True},
        "parallel": {"tp": 1, "pp": 1, "cp": cp, "cp_comm_type": kind, **(parallel or {})},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": gpus or cp, **(cluster or {})}})


def attention_flops(job: Any) -> float:
    return sum(op.flops for op in build_graph(job).layer.forward
               if op.kind is OpKind.FLASH_ATTENTION)


def full_causal_flops(s: int, heads: int, d: int) -> float:
    """softmax(Q K^T) V over s^2 / 2 (query, key) pairs: 2 d FLOPs each for Q K^T and for V."""
    return 2.0 * heads * (s * s / 2) * (d + d)


@pytest.mark.parametrize(("kind", "extra"), [("p2p", {}), ("a2a", {}), ("all_gather", {}),
                                             ("a2a+p2p", {"hierarchical_context_parallel_sizes": [2, 4]})])
def test_every_rank_computes_an_equal_share_of_the_causal_attention(kind: str,
                                                                    extra: dict[str, Any]) -> None:
    """Load balancing over 2 cp chunks: per-rank FLOPs x cp = the whole causal attention."""
    cp = 8
    job = cp_job(cp, kind, parallel=extra)
    assert attention_flops(job) * cp == pytest.approx(full_causal_flops(16384, 16, 128), rel=1e-12)
    assert attention_flops(cp_job(1)) == pytest.approx(full_causal_flops(16384, 16, 128))


def test_ring_runs_cp_steps_and_exchanges_kv_of_the_local_chunks() -> None:
    cp = 4
    block = build_graph(cp_job(cp)).layer
    steps = [op for op in block.forward if op.kind is OpKind.FLASH_ATTENTION]
    assert len(steps) == cp
    exchanges = [c for c in block.forward_comm if c.group is CommGroup.CP_RING]
    local = 16384 // cp
    kv = 2 * local * 8 * (128 + 128)  # bf16 K and V of the 8 key/value heads
    assert [c.bytes for c in exchanges] == [kv] * (cp - 1)
    assert [c.overlap for c in exchanges] == [f"attn.cp.step{i}" for i in range(cp - 1)]
    backward = [c for c in block.backward_comm if c.group is CommGroup.CP_RING]
    assert sorted(c.bytes for c in backward) == [kv] + [2 * kv] * (cp - 1)  # K/V with dK/dV


def test_kv_exchange_is_hidden_behind_compute_until_the_link_is_too_slow() -> None:
    fast = simulate(cp_job(4, gpus=4))
    slow = simulate(cp_job(4, gpus=4, cluster={"intra_node_bandwidth_GBps": 1.0}))
    assert fast.costs.layer.forward_cp_comm < 1e-4
    assert slow.costs.layer.forward_cp_comm > 10 * fast.costs.layer.forward_cp_comm
    assert slow.iteration_time_s > fast.iteration_time_s


def test_ulysses_all_to_alls_move_qkv_and_output_of_the_rank() -> None:
    block = build_graph(cp_job(4, "a2a")).layer
    a2a = [c for c in block.forward_comm if c.kind is CollectiveKind.ALL_TO_ALL]
    local = 16384 // 4
    assert [c.bytes for c in a2a] == [2 * local * 16 * 128, 2 * local * 8 * 128,
                                      2 * local * 8 * 128, 2 * local * 16 * 128]


def test_activations_split_by_cp() -> None:
    one = build_graph(cp_job(1)).layer.saved_bytes
    four = build_graph(cp_job(4)).layer.saved_bytes
    assert four == pytest.approx(one / 4, rel=0.02)


def test_gradients_are_reduced_over_dp_times_cp() -> None:
    job = cp_job(4, gpus=8)  # dp 2
    assert job.dp == 2
    assert data_parallel_placement(job).size == 8
    result = simulate(cp_job(4, gpus=4))  # dp 1: the cp ranks still reduce
    assert result.tail.dp_comm_s[0] > 0


def test_cp_group_is_tp_apart_and_crosses_nodes_when_tp_times_cp_exceeds_a_node() -> None:
    job = cp_job(8, parallel={"tp": 2, "sequence_parallel": True}, gpus=16)
    ring = simulate(job)
    assert ring.costs.layer.forward_comm > 0
    inside = cp_job(4, parallel={"tp": 2, "sequence_parallel": True}, gpus=8)
    assert build_graph(inside).layer.forward_comm  # the exchanges exist


@pytest.mark.parametrize(("cp", "kind", "model", "parallel", "words"), [
    (8, "a2a", {"num_query_groups": 4}, {}, "must both be divisible by 8"),
    (3, "p2p", {}, {}, "divisible by 2\\*cp"),
    (4, "a2a+p2p", {}, {}, "hierarchical_context_parallel_sizes"),
    (4, "p2p", {"window_size": 128}, {}, "all_gather"),
    (4, "p2p", {}, {"hierarchical_context_parallel_sizes": [2, 2]}, "for cp_comm_type=a2a\\+p2p"),
])
def test_impossible_cp_layouts_are_refused(cp: int, kind: str, model: dict[str, Any],
                                           parallel: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        cp_job(cp, kind, model=model, parallel=parallel, gpus=cp)


def test_cp_needs_fused_attention() -> None:
    with pytest.raises(ConfigError, match="flash_attention: true"):
        job_from_dict({"model": LLAMA, "training": {"global_batch_size": 2},
                       "parallel": {"cp": 2}, "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 2}})


def test_llama3_405b_long_context_stage_simulates() -> None:
    """Llama 3 paper, Table 4: 131,072 tokens, TP 8, CP 16, PP 16, DP 8 on 16,384 GPUs."""
    job = job_from_dict({
        "model": {"preset": "llama-3-405b", "seq_length": 131072},
        "training": {"global_batch_size": 16, "flash_attention": True},
        "parallel": {"tp": 8, "cp": 16, "pp": 16, "dp": 8, "cp_comm_type": "all_gather",
                     "sequence_parallel": True, "distributed_optimizer": True,
                     "first_stage_layers": 7, "last_stage_layers": 7},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16384}})
    result = simulate(job)
    assert result.iteration_time_s > 0 and result.breakdown["cp_comm"] > 0
    assert result.job["cp"] == 16


def test_trace_shows_the_exposed_kv_exchanges() -> None:
    job = cp_job(4, gpus=4, cluster={"intra_node_bandwidth_GBps": 1.0})
    events = chrome_trace(simulate(job), job)["traceEvents"]
    exchanges = [e for e in events if e.get("cat") == "cp_comm"]
    assert exchanges and all(e["args"]["bytes_per_gpu"] > 0 and e["dur"] > 0 for e in exchanges)
