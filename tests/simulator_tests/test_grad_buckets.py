"""Data-parallel gradient buckets as the stack sizes and places them (simulator.job.buckets).

Expected values are written out from the sources, not read from the simulator:
- Megatron-Core `DistributedDataParallel.__init__`: `bucket_size = max(40000000, 1000000 *
  data_parallel_world_size)` parameters when `--ddp-bucket-size` is not given, in the gradient
  buffer's dtype; `bucket_size = None` (one bucket) on pipeline ranks > 0 and for model chunks
  after the first (`training.py::get_model`, `disable_bucketing=(model_chunk_idx > 0)`);
- PyTorch DDP: `bucket_cap_mb=25` on every module.
At thousands of data-parallel ranks a 25 MB bucket is latency-bound (a ring reduce-scatter
takes 2(n - 1) network steps per bucket): a 130B-parameter sample at dp 1024 x cp 2 spent
154 s in its reduction with 25 MB buckets, 0.8 s with Megatron's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from simulator import job_from_dict, simulate
from simulator.job.buckets import bucket_bytes, bucketed_chunks
from simulator.job.enums import CollectiveKind
from simulator.memory.states import stage_param_counts
from simulator.network.topology import dp_placement
from simulator.simulate import default_network


def _job(parallel: dict[str, Any], training: dict[str, Any] | None = None,
         num_gpus: int = 8) -> Any:
    return job_from_dict({
        "model": {"name": "mini-gpt", "num_layers": 8, "hidden_size": 2048,
                  "num_attention_heads": 16, "ffn_hidden_size": 8192, "vocab_size": 32000,
                  "seq_length": 1024},
        "training": {"global_batch_size": 8 * num_gpus, "micro_batch_size": 1,
                     "precision": "bf16", "flash_attention": True, **(training or {})},
        "parallel": {"tp": 1, "overlap_grad_reduce": True, **parallel},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": num_gpus}})


@pytest.mark.parametrize(("dp", "training", "expected"), [
    (8, {}, 40e6 * 4),  # bf16: fp32 gradient buffer
    (1024, {}, 1024e6 * 4),  # 1M parameters per dp rank past 40
    (1024, {"grad_reduce_in_fp32": False}, 1024e6 * 2),
    (8, {"framework": "pytorch"}, 25e6),
])
def test_the_default_bucket_is_the_stacks(dp: int, training: dict[str, Any], expected: float) -> None:
    job = _job({"dp": dp}, training, num_gpus=dp)
    assert bucket_bytes(job) == expected


def test_a_bucket_size_the_job_sets_wins() -> None:
    assert bucket_bytes(_job({"bucket_size_mb": 10.0})) == 10e6


def test_megatron_buckets_only_the_first_stage_first_chunk() -> None:
    job = _job({"pp": 4, "dp": 2, "virtual_stages": 2, "schedule": "interleaved_1f1b"})
    expected = np.zeros((4, 2), dtype=bool)
    expected[0, 0] = True
    np.testing.assert_array_equal(bucketed_chunks(job), expected)
    deepspeed = _job({"pp": 4, "dp": 2, "virtual_stages": 2, "schedule": "interleaved_1f1b"},
                     {"framework": "megatron-deepspeed"})
    assert bucketed_chunks(deepspeed).all()


@pytest.mark.parametrize("bucket_mb", [None, 1.0])
def test_each_stage_reduces_in_its_buckets(bucket_mb: float | None) -> None:
    """pp 2 on one node, all-reduce (no distributed optimizer): the first stage sends
    ceil(bytes / bucket) buckets of bytes / that each, the second its whole gradient once."""
    job = _job({"pp": 2, "dp": 4, "bucket_size_mb": bucket_mb})
    grad = stage_param_counts(job) * 4.0  # fp32 gradient buffer
    bucket = 1e6 if bucket_mb else 40e6 * 4
    network, where = default_network(job), dp_placement(job)
    n0 = math.ceil(grad[0] / bucket)
    expected = [n0 * network.time(CollectiveKind.ALL_REDUCE, grad[0] / n0, where),
                network.time(CollectiveKind.ALL_REDUCE, grad[1], where)]
    assert simulate(job).dp_comm_s == pytest.approx(expected, rel=1e-9)


def test_large_buckets_keep_a_large_data_parallel_reduction_off_the_latency_floor() -> None:
    """dp 512 over 64 nodes: 25 MB buckets pay the ring's per-step latency once per bucket,
    Megatron's 512M-parameter buckets a few times; the exposed reduction shrinks."""
    megatron = simulate(_job({"dp": 512, "distributed_optimizer": True}, num_gpus=512))
    small = simulate(_job({"dp": 512, "distributed_optimizer": True, "bucket_size_mb": 25.0},
                          num_gpus=512))
    assert megatron.dp_comm_s[0] < 0.5 * small.dp_comm_s[0]


def test_the_result_and_the_trace_say_which_buckets_ran() -> None:
    """The resolved bucket (the job file may leave it unset) is in the result's job summary
    (--json, the batch CSV) and on the trace's data-parallel spans."""
    from simulator.report.trace import chrome_trace

    job = _job({"pp": 2, "dp": 4})
    result = simulate(job)
    assert result.job["grad_bucket_mb"] == pytest.approx(40e6 * 4 / 1e6)
    assert result.job["bucketed_chunks"] == "the first stage's first chunk"
    spans = [e for e in chrome_trace(result, job)["traceEvents"] if e.get("cat") == "dp_comm"]
    assert spans and all(e["args"]["grad_bucket_mb"] == 160.0 for e in spans)
    assert "grad_bucket_mb" not in simulate(_job({"pp": 2, "dp": 4, "overlap_grad_reduce": False})).job


def test_the_batch_csv_has_the_bucket_and_the_exposed_reduction() -> None:
    from vtrain_ml.batch import result_columns, to_csv

    result = simulate(_job({"pp": 2, "dp": 4}))
    row = {"status": "ok", **result_columns(result)}
    header, line = to_csv([row]).splitlines()
    values = dict(zip(header.split(","), line.split(","), strict=True))
    assert float(values["grad_bucket_mb"]) == 160.0
    assert float(values["dp_comm_exposed_s"]) == result.breakdown["dp_comm_exposed"]
