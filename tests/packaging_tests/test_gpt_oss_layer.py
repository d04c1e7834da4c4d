"""The simulator prices a GPT-OSS-120B layer's kernels as one H100 measured them
(data/kernels/h100-gpt-oss-layer, bench/gpu_gpt_oss_layer.py; bench/compare_gpt_oss_layer.py).
Only the groups whose kernels are the ones Megatron runs are checked: attention, the experts'
grouped GEMMs, the other GEMMs and the output layer with Megatron's cross-entropy. Nothing was
fitted to these measurements."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench")]

import compare_gpt_oss_layer as cmp  # noqa: E402

from simulator import job_from_dict  # noqa: E402
from simulator.graph.blocks import build_graph  # noqa: E402
from simulator.simulate import default_kernels  # noqa: E402


@pytest.fixture(scope="module")
def sides() -> tuple[pd.DataFrame, object, object]:
    kernels = pd.read_csv(cmp.MEASURED / "kernels.csv")
    job = job_from_dict(cmp.h100_row_job())
    return kernels, build_graph(job), default_kernels(job)


@pytest.mark.parametrize("variant", sorted(cmp.LAYERS))
def test_a_layers_matmuls_and_attention_cost_what_the_h100_measured(variant: str, sides) -> None:
    kernels, graph, model = sides
    block = dict(zip(graph.labels, graph.layer_blocks, strict=True))[cmp.LAYERS[variant]]
    measured = cmp.measured_groups(kernels, variant, "fwd+bwd")
    simulated = cmp.simulated_groups(block, model, backward=True)
    for group, (low, high) in {"grouped_gemm": (0.9, 1.15), "gemm": (0.9, 1.15),
                               "attention": (0.7, 1.15)}.items():
        assert low < simulated[group] / measured[group] < high, (group, simulated[group], measured[group])


def test_the_output_layer_and_megatrons_cross_entropy_cost_what_the_h100_measured(sides) -> None:
    kernels, graph, model = sides
    measured = cmp.measured_groups(kernels, cmp.HEAD, "fwd+bwd")
    simulated = cmp.simulated_groups(graph.head, model, backward=True)
    assert sum(simulated.values()) == pytest.approx(sum(measured.values()), rel=0.05)
    assert simulated["gemm"] == pytest.approx(measured["gemm"], rel=0.08)


def test_kernels_are_grouped_by_what_they_compute() -> None:
    assert cmp.kernel_group("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma") == "attention"
    assert cmp.kernel_group("triton_tem_fused_flex_attention_backward_1") == "attention"
    assert cmp.kernel_group("_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9x"
                            "INS_4gemm6kernel13GemmUniversalINS5_17GroupProblemShape") == "grouped_gemm"
    assert cmp.kernel_group("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT") == "gemm"
    assert cmp.kernel_group("triton_poi_fused__to_copy_add_clamp_mul_sigmoid_slice_0") == "activation"
    assert cmp.kernel_group("void at::native::vectorized_gather_kernel<16, long>") == "other"
