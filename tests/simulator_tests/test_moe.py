"""Mixture of experts with expert parallelism, checked against formulas written out here, not read
from the simulator: all-to-all bytes per layer, the presets' parameter counts against their
published totals, the memory of an expert-parallel layout term by term, and the layouts Megatron
refuses."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from simulator import job_from_dict, simulate
from simulator.errors import ConfigError
from simulator.graph.blocks import build_graph
from simulator.graph.moe.dispatch import distinct_ranks
from simulator.graph.ops import HOST_SYNC, CommGroup
from simulator.graph.params import active_params, layers_params, total_params
from simulator.job.catalog import load_model
from simulator.job.enums import CollectiveKind
from simulator.job.layer_pattern import chunk_kind_counts
from simulator.job.specs import GiB
from simulator.network.groups import strided_placement
from simulator.simulate import default_network

MIXTRAL = {"name": "mini-mixtral", "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
           "num_query_groups": 4, "ffn_hidden_size": 2048, "vocab_size": 32000,
           "seq_length": 2048, "norm": "rmsnorm", "use_bias": False, "gated_mlp": True,
           "position_embedding": "rope", "tied_embeddings": False, "hidden_dropout": 0.0,
           "attention_dropout": 0.0, "num_experts": 8, "moe_router_topk": 2}


def moe_job(model: dict[str, Any] | None = None, training: dict[str, Any] | None = None,
            parallel: dict[str, Any] | None = None, gpus: int = 8, gpu: str = "h100-sxm-80gb"
            ) -> Any:
    return job_from_dict({
        "model": {**MIXTRAL, **(model or {})},
        "training": {"global_batch_size": 16, "micro_batch_size": 1, "precision": "bf16",
                     "flash_attention": True, **(training or {})},
        "parallel": {"tp": 1, "pp": 1, "ep": 8, "distributed_optimizer": True, **(parallel or {})},
        "cluster": {"gpu": gpu, "num_gpus": gpus}})


def _comm(job: Any, direction: str = "forward_comm") -> list[Any]:
    return list(getattr(build_graph(job).layer, direction))


def test_alltoall_moves_each_token_topk_times_per_direction_twice_per_layer() -> None:
    """Dropless, balanced: a rank sends (s b / tp) tokens x k copies x h x 2 bytes in each of
    the dispatch and the combine all-to-all, forward and backward (token_dispatcher.py)."""
    job = moe_job()
    tokens, k, h = 2048 * 1, 2, 1024
    expected = tokens * k * h * 2
    for direction in ("forward_comm", "backward_comm"):
        a2a = [c for c in _comm(job, direction) if c.kind is CollectiveKind.ALL_TO_ALL
               and c.bytes > 4 * tokens * k]
        assert [c.bytes for c in a2a] == [expected, expected]
        assert all(c.group is CommGroup.EP for c in a2a)


def test_alltoall_bytes_scale_with_sequence_parallel_tokens_and_imbalance() -> None:
    big = {"hidden_size": 4096, "ffn_hidden_size": 8192, "seq_length": 4096}  # GPU-bound
    base = moe_job(model=big, parallel={"tp": 2, "sequence_parallel": True, "ep": 4})
    skewed = moe_job(model=big, parallel={"tp": 2, "sequence_parallel": True, "ep": 4},
                     training={"moe_load_imbalance": 1.5})
    tokens = 4096 // 2  # the MoE input is the rank's sequence-parallel share
    first = next(c for c in _comm(base) if c.name == "moe.dispatch_a2a")
    assert first.bytes == tokens * 2 * 4096 * 2
    assert next(c for c in _comm(skewed) if c.name == "moe.dispatch_a2a").bytes == 1.5 * first.bytes
    assert simulate(skewed).iteration_time_s > simulate(base).iteration_time_s


def test_capacity_with_padding_sends_capacity_times_experts() -> None:
    """capacity = ceil(tokens x k / experts x factor) per expert (moe_utils.get_capacity)."""
    job = moe_job(training={"moe_expert_capacity_factor": 1.25,
                            "moe_pad_expert_input_to_capacity": True})
    capacity = math.ceil(2048 * 2 / 8 * 1.25)
    a2a = next(c for c in _comm(job) if c.name == "moe.dispatch_a2a")
    assert a2a.bytes == capacity * 8 * 1024 * 2
    variants = [op.variant for op in build_graph(job).layer.forward]
    assert HOST_SYNC not in variants  # fixed sizes: no host synchronization
    assert HOST_SYNC in [op.variant for op in build_graph(moe_job()).layer.forward]


def test_deepep_expected_distinct_ranks_matches_sampling() -> None:
    """Flex (DeepEP) sends a token once per rank holding one of its k experts; the closed form
    equals the mean over uniformly sampled routings."""
    rng = random.Random(0)
    for experts, k, ranks in ((256, 8, 8), (128, 8, 32), (8, 2, 8), (64, 6, 4)):
        per = experts // ranks
        draws = [len({e // per for e in rng.sample(range(experts), k)}) for _ in range(20000)]
        assert distinct_ranks(experts, k, ranks) == pytest.approx(np.mean(draws), rel=0.01)


def test_alltoall_time_follows_the_nvlink_share_of_the_bytes() -> None:
    """Inside one node the off-rank (n-1)/n of the bytes crosses NVLink at the bus efficiency."""
    job = moe_job()
    result = simulate(job)
    eff = job.hardware.efficiency
    bw = job.hardware.nvlink_bandwidth_GBps * 1e9 * eff.intra_bus_efficiency

    def a2a(nbytes: float) -> float:
        return 7 / 8 * nbytes / bw + eff.intra_latency_s

    # tokens per expert (int64) of the 8 ranks, all-gathered: costed as NCCL would run it
    # (simulator.network.algorithms, checked against its own formulas in
    # test_collective_algorithms.py); this test is about the all-to-alls
    counts = 8 * 8 * 8
    gather = default_network(job).time(CollectiveKind.ALL_GATHER, counts, strided_placement(job, 8, 1))
    tokens = 2048 * 2  # copies: one per chosen expert
    expected = a2a(tokens * 1024 * 2) * 2 + a2a(tokens * 4) + gather  # dispatch, combine, probs
    assert result.costs.layer.forward_ep_comm == pytest.approx(expected, rel=1e-9)



def test_a_measured_all_to_all_efficiency_prices_the_all_to_alls_only() -> None:
    """A hardware file's `all_to_all_bus_efficiency` (NCCL's all-to-all measured apart, as on
    the B200) prices the dispatch and combine; the tokens-per-expert all-gather keeps the bus
    efficiency of the other collectives."""
    job = moe_job()
    eff = job.hardware.efficiency.model_copy(update={"all_to_all_bus_efficiency": 0.5})
    job = job.model_copy(update={"hardware": job.hardware.model_copy(update={"efficiency": eff})})
    bw = job.hardware.nvlink_bandwidth_GBps * 1e9 * 0.5

    def a2a(nbytes: float) -> float:
        return 7 / 8 * nbytes / bw + eff.intra_latency_s

    gather = default_network(job).time(CollectiveKind.ALL_GATHER, 8 * 8 * 8, strided_placement(job, 8, 1))
    tokens = 2048 * 2
    expected = a2a(tokens * 1024 * 2) * 2 + a2a(tokens * 4) + gather
    assert simulate(job).costs.layer.forward_ep_comm == pytest.approx(expected, rel=1e-9)
    assert gather == default_network(moe_job()).time(CollectiveKind.ALL_GATHER, 8 * 8 * 8,
                                                     strided_placement(job, 8, 1))

PUBLISHED_ACTIVE_WITHOUT_INPUT_EMBEDDING = {"gpt-oss-120b", "gpt-oss-20b"}  # the model card's count


@pytest.mark.parametrize("preset", ["deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "qwen3-235b-a22b",
                                    "gpt-oss-120b", "gpt-oss-20b", "mixtral-8x7b", "mixtral-8x22b"])
def test_moe_preset_parameters_match_published_total_and_active(preset: str) -> None:
    """Total (MTP modules aside: DeepSeek-V3's 671B excludes its 14B) and active parameters per
    token against each model's paper or model card (sources in the preset files)."""
    m = load_model(preset)
    assert m.published_params and m.published_active_params
    total = total_params(m) - layers_params(m).mtp
    assert total == pytest.approx(m.published_params, rel=0.015)
    active = active_params(m)
    if preset in PUBLISHED_ACTIVE_WITHOUT_INPUT_EMBEDDING:
        active -= m.vocab_size * m.hidden_size
    assert active == pytest.approx(m.published_active_params, rel=0.03)


def test_expert_parameters_by_hand_for_mixtral() -> None:
    """Mixtral 8x7B: 8 experts of 3 x 4096 x 14336 per layer, 32 layers."""
    m = load_model("mixtral-8x7b")
    assert layers_params(m).experts == 32 * 8 * 3 * 4096 * 14336
    assert layers_params(m).active_experts == 32 * 2 * 3 * 4096 * 14336


def test_memory_of_an_expert_parallel_layout_term_by_term() -> None:
    """ep 8 on 8 GPUs (expert_dp 1) and dp 8 for the rest, bf16 with the distributed optimizer:
    one GPU holds 1 of 8 experts per layer; experts' weights 2, fp32 gradients 4 and optimizer
    states 12 bytes per parameter unsharded; the dense rest sharded over dp = 8."""
    job = moe_job()
    mem = simulate(job).stages[0].memory
    h, f, layers, vocab = 1024, 2048, 4, 32000
    expert = 3 * h * f
    assert mem.expert_weights_bytes == 2 * layers * expert
    assert mem.expert_gradients_bytes == 4 * layers * expert
    assert mem.expert_optimizer_states_bytes == 12 * layers * expert
    attention = h * (h + 2 * 4 * 64) + h * h + 2 * h  # qkv, proj, two norms
    router = 8 * h
    dense = layers * (attention + router) + 2 * vocab * h + h
    assert mem.weights_bytes == pytest.approx(2 * dense)
    assert mem.optimizer_states_bytes == pytest.approx(12 * dense / 8)
    assert mem.moe_activations_bytes > 0
    # one stage: the loss's moment, when no layer's all-to-all buffers are alive, is the larger
    # (tests/simulator_tests/test_memory_sources.py)
    assert mem.moe_dispatch_buffers_bytes == 0 and mem.loss_temporaries_bytes > 0


def test_full_recompute_keeps_no_moe_activations_and_no_term_is_negative() -> None:
    """Full recompute keeps only each layer's input (a dense tensor): the MoE's share of the saved
    activations is zero and the dense share is that input, b s h x 2 bytes per layer (until
    2026-11-28 the MoE share stayed the unrecomputed layer's, and the dense share was printed
    negative by as much)."""
    mem = simulate(moe_job(training={"recompute": "full"})).stages[0].memory
    assert mem.moe_activations_bytes == 0
    layers, tokens, h = 4, 2048, 1024
    assert mem.activations_bytes >= layers * tokens * h * 2
    assert all(v >= 0 for v in mem.to_dict().values() if isinstance(v, float))


def test_more_expert_parallelism_holds_fewer_experts_and_shards_their_states() -> None:
    small = simulate(moe_job(parallel={"ep": 2})).stages[0].memory
    large = simulate(moe_job(parallel={"ep": 8})).stages[0].memory
    assert small.expert_weights_bytes == 4 * large.expert_weights_bytes
    # ep 2 leaves expert_dp 4 that shards the experts' optimizer states
    assert small.expert_optimizer_states_bytes == large.expert_optimizer_states_bytes


def test_dense_first_layers_give_two_layer_kinds_in_megatron_order() -> None:
    job = moe_job(model={"num_layers": 8, "moe_layer_freq": [0, 0, 0, 1, 1, 1, 1, 1]},
                  parallel={"pp": 2, "virtual_stages": 2, "schedule": "interleaved_1f1b",
                            "ep": 4}, gpus=8)
    kinds, counts = chunk_kind_counts(job)
    assert [k.moe for k in kinds] == [False, True]
    # chunks in order (c0: s0, s1; c1: s0, s1), 2 layers each: dense 0-2, MoE 3-7
    np.testing.assert_array_equal(counts[0], [[2, 0], [1, 0]])
    np.testing.assert_array_equal(counts[1], [[0, 2], [1, 2]])
    assert len(build_graph(job).layer_blocks) == 2


def test_overlapping_the_all_to_all_with_the_other_micro_batch_never_costs_time() -> None:
    plain = simulate(moe_job())
    overlapped = simulate(moe_job(training={"moe_overlap_ep_comm": True}))
    assert overlapped.breakdown["ep_comm"] < plain.breakdown["ep_comm"]
    assert overlapped.iteration_time_s <= plain.iteration_time_s


def test_grouped_gemm_efficiency_falls_as_tokens_per_expert_shrink() -> None:
    """Same FLOPs in more, smaller experts: the grouped GEMMs take longer."""
    times = []
    for experts, ffn in ((8, 4096), (32, 1024), (128, 256)):
        job = moe_job(model={"num_experts": experts, "moe_router_topk": experts // 4,
                             "moe_ffn_hidden_size": ffn})
        res = simulate(job)
        fc = [op for op in res.graph.layer.forward if op.name.startswith("moe.fc")]
        times.append(sum(op.flops for op in fc) / res.costs.layer.forward)
    assert times[0] > times[1] > times[2]


@pytest.mark.parametrize(("change", "words"), [
    ({"parallel": {"ep": 3}}, "does not divide num_experts=8"),
    ({"parallel": {"ep": 8, "tp": 2}}, "sequence_parallel"),
    ({"training": {"moe_pad_expert_input_to_capacity": True}}, "moe_expert_capacity_factor"),
    ({"training": {"moe_overlap_ep_comm": True}, "parallel": {"ep": 1}}, "parallel.ep > 1"),
    ({"model": {"moe_router_topk": 9}}, "exceeds num_experts"),
    ({"model": {"moe_layer_freq": [1, 0]}}, "one 0 (dense) or 1 (MoE) per layer"),
    ({"parallel": {"ep": 8, "expert_tp": 2}}, "expert_tp*ep"),
    ({"training": {"framework": "pytorch"}}, "framework megatron-lm"),
])
def test_impossible_moe_layouts_are_refused_naming_the_fields(change: dict[str, Any],
                                                               words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("*", r"\*").replace("(", r"\(")
                       .replace(")", r"\)")):
        moe_job(model=change.get("model"), training=change.get("training"),
                parallel=change.get("parallel"))


def test_moe_fields_on_a_dense_model_are_refused() -> None:
    with pytest.raises(ConfigError, match="apply to a mixture-of-experts model"):
        job_from_dict({"model": {**{k: v for k, v in MIXTRAL.items()
                                    if k not in ("num_experts", "moe_router_topk")}},
                       "training": {"global_batch_size": 8, "moe_load_imbalance": 1.2},
                       "parallel": {"tp": 1}, "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8}})


def test_deepseek_v3_simulates_with_mla_mtp_and_dense_first_layers() -> None:
    job = job_from_dict({"model": {"preset": "deepseek-v3", "num_layers": 8,
                                   "moe_layer_freq": [0, 0, 0, 1, 1, 1, 1, 1]},
                         "training": {"global_batch_size": 64, "flash_attention": True,
                                      "moe_token_dispatcher": "flex"},
                         "parallel": {"pp": 2, "ep": 8, "distributed_optimizer": True},
                         "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16}})
    res = simulate(job)
    assert res.graph.labels == ("dense", "moe", "mtp")
    assert res.breakdown["ep_comm"] > 0 and res.peak_memory_bytes / GiB > 10
    assert res.job["ep"] == 8 and res.job["expert_dp"] == 1


def test_trace_and_batch_csv_show_the_dispatch(tmp_path: Any) -> None:
    import yaml

    from simulator.report.trace import chrome_trace
    from vtrain_ml import batch
    from vtrain_ml.jobs import Overrides

    job = moe_job()
    events = chrome_trace(simulate(job), job)["traceEvents"]
    dispatch = [e for e in events if e.get("cat") == "ep_comm"]
    assert dispatch and all("all-to-all" in e["name"] and e["args"]["bytes_per_gpu"] > 0
                            for e in dispatch)
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump({"model": MIXTRAL, "training": {
        "global_batch_size": 16, "flash_attention": True}, "parallel": {"ep": 8},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8}}))
    rows = batch.run_batch(batch.tasks([path], [Overrides()]), simulate)
    header, row = batch.to_csv(rows).splitlines()
    values = dict(zip(header.split(","), row.split(","), strict=True))
    assert values["status"] == "ok" and values["ep"] == "8" and float(values["ep_comm_s"]) > 0


def test_moe_and_cp_simulations_are_the_same_warm_and_cold() -> None:
    from simulator.simulate import clear_caches

    for job in (moe_job(model={"moe_layer_freq": [0, 1, 1, 1]}, parallel={"pp": 2, "ep": 4}),
                job_from_dict({"model": {**MIXTRAL, "seq_length": 8192}, "training": {
                    "global_batch_size": 4, "flash_attention": True}, "parallel": {
                    "cp": 2, "ep": 8}, "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8}})):
        clear_caches()
        cold = simulate(job).to_dict()
        assert simulate(job).to_dict() == cold
        other_dp = job.model_copy(update={"parallel": job.parallel.model_copy(
            update={"distributed_optimizer": False})})
        assert build_graph(other_dp).layer is build_graph(job).layer
