"""Megatron-Core's DDP zeroes the whole local gradient buffer and takes its NaN-check norm every
iteration (simulator.job.framework, docs/at_scale.md): two memory-bound passes over every
parameter a GPU holds, in the buffer's dtype, charged to the optimizer term. The expected times
below come from the hardware file's bandwidth, not from the simulator's functions."""

from __future__ import annotations

import pytest

from simulator import job_from_dict, simulate
from simulator.costs.analytic import AnalyticKernelModel
from simulator.memory.states import stage_param_counts
from simulator.timeline.tail import grad_buffer_op, optimizer_op


def _job(**overrides: object):
    spec = {
        "model": {"name": "m", "num_layers": 8, "hidden_size": 4096, "num_attention_heads": 32,
                  "vocab_size": 32000, "seq_length": 2048},
        "training": {"global_batch_size": 8, "micro_batch_size": 1, "precision": "bf16"},
        "parallel": {"tp": 1, "pp": 1, "dp": 1},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 1},
    }
    for key, value in overrides.items():
        section, field = key.split(".")
        spec[section][field] = value
    return job_from_dict(spec)


def _passes_s(job, params: float, grad_bytes: int) -> float:
    """Two passes (a write and a read) of `grad_bytes` per parameter at the file's bandwidth,
    plus a launch each."""
    hw = job.hardware
    bandwidth = hw.hbm_bandwidth_GBps * 1e9 * hw.efficiency.memory_efficiency
    return 2 * params * grad_bytes / bandwidth + 2 * hw.efficiency.kernel_launch_s


def _optimizer_without_passes(job) -> float:
    kernels = AnalyticKernelModel(job.hardware, job.training.precision)
    return kernels.cost(optimizer_op(stage_param_counts(job)[0], job)).seconds


def test_megatron_core_charges_two_passes_over_the_fp32_gradient_buffer():
    job = _job()  # megatron-lm, bf16: an fp32 gradient buffer
    params = stage_param_counts(job)[0]
    charged = simulate(job).breakdown["optimizer"] - _optimizer_without_passes(job)
    assert charged == pytest.approx(_passes_s(job, params, 4), rel=1e-6)


def test_a_16_bit_gradient_buffer_halves_the_passes():
    job = _job(**{"training.grad_reduce_in_fp32": False})
    params = stage_param_counts(job)[0]
    charged = simulate(job).breakdown["optimizer"] - _optimizer_without_passes(job)
    assert charged == pytest.approx(_passes_s(job, params, 2), rel=1e-6)


@pytest.mark.parametrize("framework", ["megatron-deepspeed", "pytorch"])
def test_other_stacks_make_no_such_passes(framework):
    job = _job(**{"training.framework": framework})
    assert grad_buffer_op(stage_param_counts(job)[0], job) is None
    assert simulate(job).breakdown["optimizer"] == pytest.approx(_optimizer_without_passes(job),
                                                                 rel=1e-9)


def test_the_passes_cover_the_whole_buffer_whatever_the_optimizer_shards():
    """The distributed optimizer steps on 1/dp of the parameters; the buffer stays whole."""
    plain = _job(**{"parallel.dp": 8, "cluster.num_gpus": 8})
    sharded = _job(**{"parallel.dp": 8, "cluster.num_gpus": 8,
                      "parallel.distributed_optimizer": True})
    n = stage_param_counts(plain)[0]
    assert grad_buffer_op(n, plain).bytes == grad_buffer_op(n, sharded).bytes == 2 * 4 * n


def test_megatron_fsdp_sharded_buffers_are_not_charged_here():
    job = _job(**{"parallel.dp": 8, "cluster.num_gpus": 8,
                  "parallel.data_parallel_sharding": "optim_grads_params"})
    assert grad_buffer_op(stage_param_counts(job)[0], job) is None


def test_the_trace_shows_them_beside_the_optimizer_step():
    from simulator.report.trace import chrome_trace

    job = _job()
    step = next(e for e in chrome_trace(simulate(job), job)["traceEvents"]
                if e.get("cat") == "optimizer")
    assert step["args"]["grad_buffer_passes_hbm_bytes"] == 2 * 4 * stage_param_counts(job)[0]
