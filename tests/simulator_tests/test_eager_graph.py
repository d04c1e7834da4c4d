"""The eager PyTorch / autocast graph launches what the real H100 traces show.

Expected counts are measurements: launches (kernels, memsets, memcpys) of one traced iteration
of each job in `../shared/data/traces/h100` (printed by `bench/kernel_census.py`), and one
layer's forward kernels read off the traces in order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import load_job, simulate
from simulator.costs.analytic import AnalyticKernelModel
from simulator.graph.blocks import build_graph
from simulator.graph.ops import Op, OpKind, Phase
from simulator.memory.states import stage_param_counts
from simulator.timeline.tail import optimizer_op
from tests.conftest import make_job

JOBS = Path(__file__).resolve().parents[2] / "data" / "measured" / "h100" / "jobs"

TRACE_LAUNCHES = {  # bench/kernel_census.py on the shared traces (2026-11-23)
    "gpt2_h1024_l24_s1024_mb16_ga1_none_flash": 2512,
    "gpt2_h1024_l24_s1024_mb4_ga1_none_flash": 2389,
    "llama_h2048_l16_s2048_mb1_ga2_none_flash": 5413,
    "llama_h2048_l16_s2048_mb2_ga2_none_flash": 5473,
    "llama_h2048_l16_s2048_mb4_ga2_full_flash": 7227,
    "llama_h4096_l8_s2048_mb2_ga2_none_flash": 3096,
    "llama_h4096_l8_s4096_mb1_ga2_none_flash": 3094,
    "mgpt_h1024_l24_s1024_mb1_ga4_full_unfused": 12445,
    "mgpt_h1024_l24_s1024_mb8_ga4_full_unfused": 13713,
    "mgpt_h2048_l24_s2048_mb1_ga4_none_flash": 8075,
    "mgpt_h2048_l24_s2048_mb2_ga4_full_flash": 10591,
    "mgpt_h2048_l24_s2048_mb2_ga4_none_flash": 8191,
    "mgpt_h2048_l24_s2048_mb2_ga4_none_unfused": 10399,
    "mgpt_h4096_l16_s2048_mb1_ga2_none_flash": 2795,
    "mgpt_h4096_l16_s2048_mb2_ga2_full_flash": 3875,
    "mgpt_h4096_l16_s2048_mb2_ga2_none_flash": 3011,
    "mgpt_h6144_l8_s2048_mb1_ga2_none_flash": 1616,
}


def _launches(job) -> float:
    graph = build_graph(job)

    def per(block) -> float:
        return sum(op.kernels for op in block.forward + block.backward + block.recompute)

    micro = job.model.num_layers * per(graph.layer) + per(graph.embedding) + per(graph.head)
    return job.num_microbatches * micro + optimizer_op(stage_param_counts(job)[0], job).kernels


# Host-bound jobs take time in proportion to their launches: 8% is the H100 time target.
LAUNCH_TOLERANCE = 0.08
SPLIT_K_MEMSETS = pytest.mark.xfail(strict=True, reason=(
    "-11.4%: the trace has 364 memsets (~22 per layer and micro-batch, twice the h2048 Llama jobs' "
    "~11; cuBLAS's split-K GEMM kernels appear only at hidden 4096) and the eager graph counts the "
    "h2048 number: cuBLAS's per-shape workspace memsets are not modelled"))


@pytest.mark.parametrize(("name", "measured"), [
    pytest.param(name, measured, marks=SPLIT_K_MEMSETS if name.startswith("llama_h4096") else ())
    for name, measured in TRACE_LAUNCHES.items()])
def test_launches_per_iteration_match_the_trace(name, measured):
    assert _launches(load_job(JOBS / f"{name}.yaml")) == pytest.approx(measured, rel=LAUNCH_TOLERANCE)


@pytest.mark.parametrize(("name", "forward"), [
    # LN, 3 casts + memset + QKV GEMM, philox + memset + SDPA, 2 casts + proj GEMM, dropout,
    # add, LN, 3 casts + memset + fc1, GeLU, 2 casts + fc2, dropout, add
    ("mgpt_h2048_l24_s2048_mb2_ga4_none_flash", 26),
    # as mgpt, plus the KV-cache concatenation (2) and eager gelu_new (9 kernels instead of 1),
    # whose fp32 output the down projection casts (1)
    ("gpt2_h1024_l24_s1024_mb4_ga1_none_flash", 37),
    # RMSNorm 6, q/k/v: weight and input casts + GEMM each, RoPE 10, cache 2, SDPA casts 3,
    # memset + SDPA, o cast + GEMM, add, RMSNorm 6, gate/up 4 each, silu, mul, down 2, add
    ("llama_h2048_l16_s2048_mb1_ga2_none_flash", 54),
])
def test_one_layer_forward_launches_what_the_trace_shows(name, forward):
    layer = build_graph(load_job(JOBS / f"{name}.yaml")).layer
    assert sum(op.kernels for op in layer.forward) == forward


def test_autocast_casts_every_weight_every_forward_and_recompute():
    job = load_job(JOBS / "mgpt_h2048_l24_s2048_mb2_ga4_full_flash.yaml")
    layer = build_graph(job).layer
    casts = [op for op in layer.recompute if op.variant == "autocast_weight"]
    assert len(casts) == 8  # 4 weights and 4 biases, cast again by the recomputed forward


def test_a_gemm_with_an_unaligned_dimension_runs_at_the_fallback_efficiency():
    """Hopper's tensor-core GEMMs need 16-byte aligned dimensions; an odd vocabulary forces
    cuBLAS's align-1 kernels: time = FLOPs / (peak x unaligned efficiency) + launch gap."""
    job = make_job(cluster={"gpu": "h100-sxm-80gb"})
    model = AnalyticKernelModel(job.hardware, job.training.precision)
    eff = job.hardware.efficiency
    m, n, k = 4096, 50257, 2048
    op = Op("logits", OpKind.GEMM, Phase.FORWARD, (1, m, n, k), 2, 2.0 * m * n * k,
            (m * k + k * n + m * n) * 2)
    expected = 2.0 * m * n * k / (989.4e12 * eff.unaligned_gemm_efficiency) + eff.kernel_launch_s
    assert model.seconds(op) == pytest.approx(expected, rel=1e-12)
    aligned = Op("logits", OpKind.GEMM, Phase.FORWARD, (1, m, 50304, k), 2, 2.0 * m * 50304 * k,
                 (m * k + k * 50304 + m * 50304) * 2)
    assert model.seconds(aligned) < model.seconds(op) / 4


def test_pytorch_framework_keeps_the_vocabulary_unpadded():
    job = load_job(JOBS / "gpt2_h1024_l24_s1024_mb4_ga1_none_flash.yaml")
    logits = next(op for op in build_graph(job).head.forward if op.name == "logits")
    assert logits.shape[2] == 50257


def test_eager_jobs_simulate_without_collectives():
    result = simulate(load_job(JOBS / "llama_h2048_l16_s2048_mb1_ga2_none_flash.yaml"))
    assert result.breakdown["tp_comm"] == 0
    assert result.iteration_time_s > 0


@pytest.mark.parametrize(("parallel", "training", "fragment"), [
    ({"tp": 2, "pp": 1, "dp": 4}, {}, "data parallelism only"),
    ({"tp": 1, "pp": 2, "dp": 4}, {}, "data parallelism only"),
    ({"tp": 1, "pp": 1, "dp": 8}, {"recompute": "selective"}, "recompute=selective"),
])
def test_pytorch_framework_rejects_what_it_does_not_model(parallel, training, fragment):
    from simulator.errors import ConfigError

    with pytest.raises(ConfigError, match=fragment):
        make_job(parallel=parallel, training={"framework": "pytorch", **training})
