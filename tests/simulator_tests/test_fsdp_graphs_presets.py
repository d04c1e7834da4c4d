"""FSDP / ZeRO-2/3 sharding (memory and per-layer collectives), CUDA graphs, TE's overlapped
tensor-parallel communication, the hardware presets, and the simulate CLI's new overrides."""

from __future__ import annotations

import json
from typing import Any

import pytest

from simulator import job_from_dict, simulate
from simulator.graph.blocks import build_graph
from simulator.graph.ops import OVERLAP_BLOCK, CommGroup
from simulator.graph.params import layer_params
from simulator.job.catalog import hardware_names, resolve_hardware
from simulator.job.enums import GpuArchitecture, Precision
from simulator.simulate import clear_caches
from vtrain_ml.cli import simulate as simulate_cli


def job(sharding: str | None = None, dp: int = 8, **extra: Any) -> dict[str, Any]:
    parallel: dict[str, Any] = {"tp": 1, "pp": 1, "dp": dp, **extra.pop("parallel", {})}
    if sharding:
        parallel["data_parallel_sharding"] = sharding
    return {"model": {"num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16,
                      "vocab_size": 32768, "seq_length": 2048, "norm": "rmsnorm",
                      "gated_mlp": True, "use_bias": False, "position_embedding": "rope",
                      "tied_embeddings": False, "hidden_dropout": 0.0, "attention_dropout": 0.0},
            "training": {"global_batch_size": 4 * dp, "micro_batch_size": 1, "precision": "bf16",
                         "flash_attention": True, **extra.pop("training", {})},
            "parallel": parallel, "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": dp * parallel["tp"]}}


def memory(data: dict[str, Any]) -> Any:
    clear_caches()
    return simulate(job_from_dict(data)).stages[0].memory


def test_each_sharding_level_shards_one_more_model_state_over_dp() -> None:
    plain, z1, z2, z3 = (memory(job(s)) for s in (None, "optim", "optim_grads", "optim_grads_params"))
    params = job_from_dict(job())
    units = 8 * layer_params(params.model).per_rank(1)
    assert z1.optimizer_states_bytes == pytest.approx(plain.optimizer_states_bytes / 8)
    assert z1.gradients_bytes == plain.gradients_bytes
    # ZeRO-2: the layers' (FSDP units') fp32 gradients sharded, two units' whole while in flight
    assert z2.gradients_bytes == pytest.approx(plain.gradients_bytes - 4 * units * 7 / 8)
    assert z2.fsdp_unsharded_bytes == pytest.approx(4 * units / 4)  # two of eight layers, fp32
    assert z2.weights_bytes == plain.weights_bytes
    # ZeRO-3: also the layers' bf16 weights, plus two units' weights gathered
    assert z3.weights_bytes == pytest.approx(plain.weights_bytes - 2 * units * 7 / 8)
    assert z3.fsdp_unsharded_bytes == pytest.approx((4 + 2) * units / 4)
    assert z3.allocated_bytes < z2.allocated_bytes < z1.allocated_bytes < plain.allocated_bytes


def test_zero3_gathers_each_layer_before_forward_and_backward_and_reduce_scatters_after() -> None:
    layer = build_graph(job_from_dict(job("optim_grads_params"))).layer
    fwd = [c for c in layer.forward_comm if c.group is CommGroup.DP]
    bwd = [c for c in layer.backward_comm if c.group is CommGroup.DP]
    params = layer_params(job_from_dict(job()).model).per_rank(1)
    assert [(c.kind.value, c.bytes) for c in fwd] == [("all_gather", 2 * params)]
    assert sorted((c.kind.value, c.bytes) for c in bwd) == [("all_gather", 2 * params),
                                                            ("reduce_scatter", 4 * params)]
    assert all(c.overlap == OVERLAP_BLOCK for c in fwd + bwd)
    zero2 = build_graph(job_from_dict(job("optim_grads"))).layer
    assert [c.kind.value for c in zero2.backward_comm if c.group is CommGroup.DP] == ["reduce_scatter"]
    assert not [c for c in build_graph(job_from_dict(job("optim_grads_params", dp=1))).layer.backward_comm
                if c.group is CommGroup.DP]


def test_fsdp_collectives_hidden_behind_compute_cost_only_what_outlasts_it() -> None:
    """A slow network exposes the per-layer gathers; a fast one hides them behind the layer,
    where they cost only the SMs they hold (simulator.timeline.contention)."""
    clear_caches()
    fast_job = job_from_dict(job("optim_grads_params"))
    eff = fast_job.hardware.efficiency.model_copy(update={"overlap_comm_sms": 0.0})
    free_sms = fast_job.model_copy(
        update={"hardware": fast_job.hardware.model_copy(update={"efficiency": eff})})
    assert simulate(free_sms).costs.layer.forward_comm == 0.0
    fast = simulate(fast_job).costs.layer
    assert 0.0 < fast.forward_comm < 0.25 * fast.forward
    slow = job("optim_grads_params")
    slow["cluster"]["intra_node_bandwidth_GBps"] = 1.0
    clear_caches()
    exposed = simulate(job_from_dict(slow)).costs.layer
    assert exposed.forward_comm > 0


def test_cuda_graphs_remove_the_host_dispatch_of_captured_blocks() -> None:
    small = job(dp=1, training={"global_batch_size": 8})
    small["model"].update(hidden_size=256, num_attention_heads=4, seq_length=256)
    times = {}
    for graphs in ("none", "per_layer", "full_iteration"):
        data = {**small, "training": {**small["training"], "cuda_graphs": graphs}}
        clear_caches()
        times[graphs] = simulate(job_from_dict(data)).iteration_time_s
    assert times["full_iteration"] <= times["per_layer"] < times["none"]


def test_tp_comm_overlap_hides_the_sequence_parallel_collectives_under_the_gemms() -> None:
    base = job(dp=1, parallel={"tp": 8, "sequence_parallel": True})
    clear_caches()
    plain = simulate(job_from_dict(base)).breakdown["tp_comm"]
    base["parallel"]["tp_comm_overlap"] = True
    clear_caches()
    overlapped = simulate(job_from_dict(base)).breakdown["tp_comm"]
    assert overlapped < plain


@pytest.mark.parametrize("name", ["b200", "b300", "gb200", "gb300", "h800", "h200-141gb", "h100-sxm-80gb"])
def test_presets_of_todays_gpus_state_their_sourced_numbers(name: str) -> None:
    hw = resolve_hardware(name)
    assert name in hardware_names()
    assert hw.source and hw.price_per_gpu_hour_usd > 0
    assert hw.architecture in (GpuArchitecture.HOPPER, GpuArchitecture.BLACKWELL)
    assert hw.peak_tflops[Precision.FP8] == pytest.approx(2 * hw.peak_tflops[Precision.BF16], rel=1e-3)
    blackwell = hw.architecture is GpuArchitecture.BLACKWELL
    assert (Precision.FP4 in hw.peak_tflops) == blackwell
    # an HGX node is its NVLink domain (None: the node, so a job that sets gpus_per_node keeps it)
    assert (hw.nvlink_domain or hw.gpus_per_node) == (72 if name.startswith("gb") else 8)
    assert hw.gpus_per_node == (4 if name.startswith("gb") else 8)
    assert hw.efficiency.quantize_memory_efficiency is not None
    assert set(hw.efficiency.low_precision_gemm_efficiency) >= (
        {"fp8_tensor", "mxfp8", "nvfp4"} if blackwell else {"fp8_tensor", "fp8_block"})


def test_h200_memory_is_what_nvidia_smi_reports() -> None:
    assert resolve_hardware("h200-141gb").memory_GiB == pytest.approx(143771 / 1024, abs=0.01)


def test_simulate_cli_overrides_precision_recipe_and_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["examples/mtnlg_530b.yaml", "--precision", "fp8", "--fp8-recipe", "mxfp8", "--hardware",
            "gb200", "--data-parallel-sharding", "optim", "--json"]
    assert simulate_cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["job"]["low_precision_recipe"] == "mxfp8" and out["job"]["gpu"] == "gb200"
    assert simulate_cli.main(["examples/mtnlg_530b.yaml", "--precision", "fp4", "--hardware",
                              "h100-sxm-80gb"]) == 2
    assert "precision=fp4 is not supported on h100-sxm-80gb" in capsys.readouterr().err


def test_fsdp_exposed_collectives_are_their_own_breakdown_entry() -> None:
    slow = job("optim_grads_params")
    slow["cluster"]["intra_node_bandwidth_GBps"] = 1.0
    clear_caches()
    result = simulate(job_from_dict(slow))
    assert result.breakdown["fsdp_comm"] > 0
    assert result.breakdown["tp_comm"] == pytest.approx(0.0, abs=1e-12)  # tp = 1
    assert sum(result.breakdown.values()) == pytest.approx(result.iteration_time_s)
