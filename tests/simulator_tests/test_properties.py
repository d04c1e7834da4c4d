"""Invariants over many small jobs (Hypothesis): more bandwidth, a faster GPU or fewer layers is
never slower; more micro-batches in flight never lower activation memory under 1F1B; the
breakdown always sums to the iteration time."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import Job, job_from_dict, simulate
from tests.conftest import job_dict

PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LAYOUTS = [(tp, pp) for tp in (1, 2, 4, 8) for pp in (1, 2, 4, 8) if tp * pp <= 8]  # 8 GPUs
SLACK = 1 + 1e-12  # float noise when two paths compute the same time


@st.composite
def job_dicts(draw: st.DrawFn, schedule: str | None = None) -> dict[str, Any]:
    """A small valid GPT/Llama-like job on 8 GPUs (any layout, schedule, recompute, options)."""
    tp, pp = draw(st.sampled_from(LAYOUTS))
    dp = 8 // (tp * pp)
    schedule = schedule or draw(st.sampled_from(["gpipe", "1f1b", "interleaved_1f1b"]
                                                if pp > 1 else ["gpipe", "1f1b"]))
    v = draw(st.sampled_from([2, 3])) if schedule == "interleaved_1f1b" else 1
    mb = draw(st.sampled_from([1, 2]))
    m = pp * draw(st.integers(1, 3)) if v > 1 else draw(st.integers(1, 8))
    gated = draw(st.booleans())
    return job_dict(
        model={"num_layers": pp * v * draw(st.integers(1, 3)), "hidden_size": 512,
               "num_attention_heads": 8, "num_query_groups": draw(st.sampled_from([8, 8, 4]))
               if tp <= 4 else 8, "gated_mlp": gated, "vocab_size": 1000,
               "seq_length": draw(st.sampled_from([256, 512])),
               "tied_embeddings": not gated},
        training={"global_batch_size": dp * mb * m, "micro_batch_size": mb,
                  "recompute": draw(st.sampled_from(["none", "selective", "full"])),
                  "flash_attention": draw(st.booleans())},
        parallel={"tp": tp, "pp": pp, "dp": dp, "schedule": schedule, "virtual_stages": v,
                  "sequence_parallel": tp > 1 and draw(st.booleans()),
                  "distributed_optimizer": draw(st.booleans()),
                  "overlap_grad_reduce": draw(st.booleans()),
                  "bucket_size_mb": draw(st.sampled_from([1.0, 25.0]))},
        cluster={"gpus_per_node": draw(st.sampled_from([2, 4, 8])),
                 "intra_node_bandwidth_GBps": draw(st.floats(50, 600)),
                 "inter_node_bandwidth_Gbps": draw(st.floats(50, 3200))},
    )


def _time(job: Job) -> float:
    return simulate(job).iteration_time_s


def _with(job: Job, section: str, **fields: Any) -> Job:
    return job.model_copy(update={section: getattr(job, section).model_copy(update=fields)})


@PROPERTY
@given(job_dicts(), st.floats(1.0, 10.0), st.floats(1.0, 10.0))
def test_more_bandwidth_is_never_slower(data, intra_factor, inter_factor):
    job = job_from_dict(data)
    c = job.cluster
    faster = _with(job, "cluster",
                   intra_node_bandwidth_GBps=c.intra_node_bandwidth_GBps * intra_factor,
                   inter_node_bandwidth_Gbps=c.inter_node_bandwidth_Gbps * inter_factor)
    assert _time(faster) <= _time(job) * SLACK


@PROPERTY
@given(job_dicts(), st.floats(1.0, 4.0), st.floats(1.0, 4.0))
def test_faster_gpu_is_never_slower(data, flops_factor, hbm_factor):
    job = job_from_dict(data)
    hw = job.hardware
    faster = _with(job, "hardware",
                   peak_tflops={k: v * flops_factor for k, v in hw.peak_tflops.items()},
                   hbm_bandwidth_GBps=hw.hbm_bandwidth_GBps * hbm_factor)
    assert _time(faster) <= _time(job) * SLACK


@PROPERTY
@given(job_dicts(), st.integers(1, 3))
def test_fewer_layers_is_never_slower(data, extra):
    fewer = job_from_dict(data)
    step = fewer.parallel.pp * fewer.parallel.virtual_stages
    data["model"]["num_layers"] += extra * step
    more = job_from_dict(data)
    assert _time(fewer) <= _time(more) * SLACK


@PROPERTY
@given(job_dicts(schedule="1f1b"), st.integers(1, 8))
def test_more_microbatches_never_lower_activation_memory_under_1f1b(data, extra):
    job = job_from_dict(data)
    per_step = job.dp * job.training.micro_batch_size
    data["training"]["global_batch_size"] += extra * per_step
    more = job_from_dict(data)
    before = [s.memory.activations_bytes for s in simulate(job).stages]
    after = [s.memory.activations_bytes for s in simulate(more).stages]
    assert all(a >= b for a, b in zip(after, before, strict=True))


@PROPERTY
@given(st.sampled_from([2, 4]), st.integers(1, 2), st.integers(1, 16),
       st.sampled_from(["none", "selective", "full"]))
def test_deeper_pipeline_never_lowers_first_stage_activations_under_1f1b(pp, layers_per_stage, m,
                                                                         recompute):
    """With the same layers per stage, a deeper 1F1B pipeline keeps more micro-batches in flight
    on its first stage (min(p, m)). From two stages on, so that the head stays off stage 0."""
    def first_stage(p: int) -> float:
        job = job_from_dict(job_dict(
            model={"num_layers": p * layers_per_stage},
            training={"global_batch_size": m, "recompute": recompute},
            parallel={"tp": 1, "pp": p, "dp": 1}, cluster={"num_gpus": p}))
        return simulate(job).stages[0].memory.activations_bytes

    assert first_stage(2 * pp) >= first_stage(pp)


@PROPERTY
@given(job_dicts())
def test_breakdown_sums_to_iteration_time(data):
    result = simulate(job_from_dict(data))
    assert all(v >= -1e-12 for v in result.breakdown.values()), result.breakdown
    assert sum(result.breakdown.values()) == _approx(result.iteration_time_s)
    assert result.iteration_time_s > 0


@PROPERTY
@given(job_dicts())
def test_every_stage_is_busy_or_idle_for_the_whole_iteration(data):
    result = simulate(job_from_dict(data))
    for stage in result.stages:
        assert stage.busy_s + stage.idle_s == _approx(result.iteration_time_s)
        assert stage.busy_s > 0 and stage.idle_s >= -1e-12


def _approx(x: float) -> Any:
    import pytest

    return pytest.approx(x, rel=1e-9)
