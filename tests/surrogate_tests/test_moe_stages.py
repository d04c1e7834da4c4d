"""The closed form's stages against the simulator (schema 26): the experts' grouped GEMMs,
a MoE model's leading dense layers and an uneven split's stage times and tails, the data-
parallel reduction of what is not a routed expert, and overlap_param_gather's waits. Each test
fails on schema 25's closed form."""

from __future__ import annotations

from typing import Any

import pytest

from simulator import job_from_dict, simulate
from simulator.costs.analytic import AnalyticKernelModel
from simulator.graph.ops import OpKind
from simulator.job.precision import FORMATS
from surrogate.hardware import catalog_hardware
from surrogate.moe_terms import _gemm_s
from surrogate.physics import HW_FIELDS, Hardware, hardware_vector
from tests.surrogate_tests.test_moe_baselines import _estimate


def _deepseek(layers: int, dense_first: int, parallel: dict[str, Any], gpus: int,
              global_batch: int) -> Any:
    """DeepSeek-V3's layer shapes, `layers` deep with `dense_first` dense layers first."""
    return job_from_dict({
        "model": {"preset": "deepseek-v3", "num_layers": layers, "seq_length": 4096,
                  "moe_layer_freq": [0] * dense_first + [1] * (layers - dense_first),
                  "mtp_num_layers": 0},
        "training": {"global_batch_size": global_batch, "micro_batch_size": 1, "precision": "bf16",
                     "flash_attention": True},
        "parallel": {"tp": 1, "expert_tp": 1, "data_parallel_sharding": "optim",
                     "overlap_grad_reduce": True, **parallel},
        "cluster": {"gpu": "b200", "num_gpus": gpus}})


@pytest.mark.parametrize("fp8", [False, True])
def test_the_experts_grouped_gemms_cost_what_the_simulator_charges_them(fp8: bool) -> None:
    """One grouped GEMM over the local experts (simulator.graph.moe.experts: one op of
    `local experts` problems, one kernel each): its tiles fill the SMs together, each pass at its
    own shape, reading the recipe's operand bytes. Qwen3-235B at tp 2 (expert_tp 2), ep 4 on
    H100: 32 local experts of 256 rows each, to the simulator's microsecond. Schema 25 priced
    each expert's tiles on the SMs alone, 16-bit operands, the forward's efficiency for all
    three passes."""
    training = {"global_batch_size": 64, "micro_batch_size": 1, "flash_attention": True,
                **({"precision": "fp8", "fp8_recipe": "tensorwise"} if fp8 else {"precision": "bf16"})}
    job = job_from_dict({
        "model": {"preset": "qwen3-235b-a22b", "seq_length": 1024, "num_layers": 8},
        "training": training,
        "parallel": {"tp": 2, "pp": 1, "ep": 4, "sequence_parallel": True,
                     "distributed_optimizer": True},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16}})
    spec = catalog_hardware("h100-sxm-80gb")
    model = AnalyticKernelModel(spec, job.training.precision)
    layer = simulate(job).graph.layer
    simulated = sum(model.seconds(op) for phase in (layer.forward, layer.backward) for op in phase
                    if op.name.startswith("moe.fc") and op.kind is OpKind.GEMM)
    hw = Hardware(*[float(hardware_vector(spec)[k]) for k in HW_FIELDS])
    if fp8:
        fmt = FORMATS[("tensorwise", spec.architecture)]
        peak = spec.peak_tflops["fp8"] * 1e12 * spec.efficiency.low_precision_gemm_efficiency[fmt.gemm_kernel]
        operand = fmt.bytes_per_element
    else:
        peak, operand = hw.peak_bf16, 2.0
    rows = 1024 / 2 * 8 * 2 * 4 / 128  # a rank's tokens x top-k x expert_tp x ep / experts
    local, ffn, h, accumulate = 128 / 4, 1536 / 2, 4096.0, 2 * 4.0 - 2  # fp32 gradient buffer
    closed = (_gemm_s(hw, peak, local, rows, 2 * ffn, h, accumulate, operand)
              + _gemm_s(hw, peak, local, rows, h, ffn, accumulate, operand))
    assert closed == pytest.approx(simulated, rel=1e-6)


def test_a_moe_models_leading_dense_layers_leave_its_busiest_stage_all_moe() -> None:
    """DeepSeek-V3's three dense layers sit on its first stage (moe_first_dense_layers): with
    every expert on each GPU (ep 1) a MoE layer is several times a dense one, and the other
    stages, all MoE, set the pipeline's pace. Charging every stage the mean layer made this
    16-layer model on 4 stages 0.92x the simulator."""
    job = _deepseek(16, 3, {"pp": 4, "ep": 1}, gpus=4, global_batch=64)
    assert _estimate(job) == pytest.approx(simulate(job).iteration_time_s, rel=0.03)


@pytest.mark.parametrize("dense_first", [1, 3])
def test_an_uneven_first_stage_reduces_its_own_experts_gradients(dense_first: int) -> None:
    """The iteration ends when the latest stage's tail does: a first stage of 7 of 16 layers
    holds 2-3x the mean stage's expert gradients and reduces them after the pipeline's last
    backward (2 micro-batches, ep 8, expert_dp 2). The mean stage's tail made the estimate
    0.87x / 0.76x the simulator."""
    job = _deepseek(16, dense_first, {"pp": 4, "ep": 8, "first_stage_layers": 7}, gpus=64,
                    global_batch=32)
    assert _estimate(job) == pytest.approx(simulate(job).iteration_time_s, rel=0.05)


def test_a_moe_rows_dense_gradients_are_the_parameters_outside_its_routed_experts() -> None:
    """The dense form reduces its dense-equivalent MLP (top-k routed experts and the shared one
    per layer) over dp, where the simulator reduces over dp x cp only the parameters outside the
    routed experts (theirs over expert_dp). One micro-batch on 512 B200s (dp 256 x cp 2, ep 32),
    where the reduction is most of the step: 1.06x the simulator before."""
    job = _deepseek(8, 3, {"pp": 1, "ep": 32, "cp": 2}, gpus=512, global_batch=256)
    assert _estimate(job) == pytest.approx(simulate(job).iteration_time_s, rel=0.03)


@pytest.mark.parametrize(("gpu", "gpus", "global_batch"), [("b200", 1024, 256), ("b200", 512, 64),
                                                          ("gb200", 1024, 256), ("gb200", 512, 64)])
def test_a_dense_rows_overlapped_parameter_gather_waits_along_the_pipeline(
        gpu: str, gpus: int, global_batch: int) -> None:
    """With overlap_param_gather every stage's first forward waits for its parameters and in the
    1F1B warm-up the waits add up (simulator.timeline.param_gather): a term of dense rows too,
    priced on the effective rows whose node is the NVLink domain. Left out of dense rows, a
    Llama 3 70B on 8 stages was 0.70-0.76x the simulator on B200; priced on a GB200's 4-GPU
    trays the gathers crossed the network the NVL72 domain keeps them off (0.89-0.92x without
    the term)."""
    job = job_from_dict({
        "model": {"preset": "llama-3-70b", "seq_length": 4096, "num_layers": 32},
        "training": {"global_batch_size": global_batch, "micro_batch_size": 1, "precision": "bf16",
                     "flash_attention": True},
        "parallel": {"tp": 4, "pp": 8, "data_parallel_sharding": "optim", "overlap_grad_reduce": True,
                     "overlap_param_gather": True},
        "cluster": {"gpu": gpu, "num_gpus": gpus}})
    assert _estimate(job, gpu) == pytest.approx(simulate(job).iteration_time_s, rel=0.07)
