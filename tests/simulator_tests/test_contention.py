"""Overlapped collectives slow the compute they run beside (simulator.timeline.contention).

An NCCL collective holds one SM per channel while it runs (24 CTAs of an all-gather beside a
132-block GEMM on an H100, NVIDIA developer forum 2025); the compute beside it runs on the rest:
k / (num_sms - k) extra seconds per second of overlap (22% on an H100, against the 18.9% mean
measured by Lee et al. 2025, arXiv 2507.03114). Expected values below are those formulas
written out, not read from the simulator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simulator import job_from_dict, simulate
from simulator.job.catalog import resolve_hardware
from simulator.simulate import default_network
from simulator.timeline.contention import compute_slowdown, overlapped_s
from simulator.timeline.param_gather import gather_buckets


def test_an_h100_loses_24_of_its_132_sms_to_an_overlapped_collective() -> None:
    assert compute_slowdown(resolve_hardware("h100-sxm-80gb")) == pytest.approx(24 / (132 - 24))
    assert compute_slowdown(resolve_hardware("a100-80gb")) == pytest.approx(24 / (108 - 24))


def test_only_the_part_of_a_collective_before_the_stage_ends_is_beside_compute() -> None:
    start = np.array([[0.0, 2.0, 5.0], [1.0, 1.5, 9.0]])
    end = np.array([[1.0, 4.0, 6.0], [1.5, 3.0, 10.0]])
    until = np.array([3.0, 2.0])
    assert overlapped_s(start, end, until).tolist() == pytest.approx([1.0 + 1.0, 0.5 + 0.5])


def _job(parallel: dict[str, Any], sms: float | None = None, num_gpus: int = 16) -> Any:
    job = job_from_dict({
        "model": {"name": "gpt-16l", "num_layers": 16, "hidden_size": 4096,
                  "num_attention_heads": 32, "vocab_size": 50257, "seq_length": 2048},
        "training": {"global_batch_size": 16, "micro_batch_size": 1, "precision": "bf16"},
        "parallel": {"tp": 8, "distributed_optimizer": True, "overlap_grad_reduce": True,
                     **parallel},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": num_gpus}})
    if sms is None:
        return job
    eff = job.hardware.efficiency.model_copy(update={"overlap_comm_sms": sms})
    return job.model_copy(update={"hardware": job.hardware.model_copy(update={"efficiency": eff})})


def test_the_hidden_reduction_costs_the_slowdown_of_what_it_hid_behind() -> None:
    """Without contention the reduction's tail is E0 and the rest (total - E0) ran beside the
    last backward; with it the stage ends max(slowdown x (total - E0), E0) after its compute."""
    # dp 2 inside one NVLink node: a short reduction, mostly hidden; an all-reduce (no gather)
    plain = {"distributed_optimizer": False, "tp": 2}
    free = simulate(_job(plain, sms=0.0, num_gpus=4))
    held = simulate(_job(plain, num_gpus=4))
    e0, total = float(free.tail.dp_exposed_s[0]), float(free.tail.dp_comm_s[0])
    s = compute_slowdown(_job(plain).hardware)
    assert 0 < e0 < s * (total - e0)
    assert held.tail.dp_exposed_s[0] == pytest.approx(max(s * (total - e0), e0), rel=1e-9)
    assert held.iteration_time_s > free.iteration_time_s


def test_a_prefetched_parameter_gather_slows_the_forward_it_hides_behind() -> None:
    """Without interleaving, bucket i's gather runs beside bucket i-1's share of the forward:
    min(g, F / n) each, n - 1 times."""
    free = simulate(_job({"overlap_param_gather": True}, sms=0.0))
    held = simulate(_job({"overlap_param_gather": True}))
    job = _job({"overlap_param_gather": True})
    buckets = gather_buckets(job, np.array([float(free.stages[0].memory.weights_bytes) / 2]),
                             default_network(job))
    n, g = int(buckets.count[0, 0]), float(buckets.seconds[0, 0])
    forward = float(free.costs.forward_s[0, 0])
    assert n > 1
    expected = compute_slowdown(job.hardware) * (n - 1) * min(g, forward / n)
    assert free.param_gather_wait_s is not None and held.param_gather_wait_s is not None
    assert held.param_gather_wait_s[0, 0] - free.param_gather_wait_s[0, 0] == pytest.approx(
        expected, rel=1e-9)
