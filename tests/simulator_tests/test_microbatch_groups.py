"""Megatron-Core's micro-batch groups of the interleaved schedule
(`--microbatch-group-size-per-virtual-pipeline-stage`, `parallel.microbatch_group_size_per_vp_stage`):
each model chunk runs a group of micro-batches before the next chunk does, the warm-up is
2 (p - s - 1) + (v - 1) group forwards, and m need not be a multiple of p."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import simulate
from simulator.errors import ConfigError
from simulator.job.enums import Schedule
from simulator.timeline.schedule import OpIndex, interleaved_table, stage_orders
from surrogate.features import job_to_record
from tests.conftest import make_job


def _names(p: int, m: int, v: int, group: int | None, stage: int = 0) -> list[str]:
    backward, chunk, _, mb = OpIndex(p, v, m).decode()
    order = stage_orders(Schedule.INTERLEAVED_1F1B, p, m, v, group=group)[stage]
    return [f"{'B' if backward[o] else 'F'}{chunk[o]}.{mb[o]}" for o in order]


def _job(m: int, group: int | None = None, pp: int = 4, v: int = 2, **training):
    parallel = {"tp": 1, "pp": pp, "dp": 2, "schedule": "interleaved_1f1b", "virtual_stages": v,
                "microbatch_group_size_per_vp_stage": group}
    return make_job(parallel=parallel,
                    training={"global_batch_size": 2 * m, "micro_batch_size": 1, **training})


def test_the_table_is_megatrons_for_pp2_group3_m5():
    """The table in Megatron-Core's own comment (`schedules.py`, "PP2 N3M5 with VP2")."""
    mb, chunk, _ = interleaved_table(5, 2, 3)
    assert mb.tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert chunk.tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


@pytest.mark.parametrize(("p", "m", "v"), [(2, 4, 2), (4, 8, 2), (4, 16, 4), (8, 8, 3)])
def test_groups_of_p_are_narayanans_schedule(p, m, v):
    """The default: micro-batch (k // (p v)) p + k % p on chunk (k // p) % v."""
    k = np.arange(m * v)
    mb, chunk, _ = interleaved_table(m, v, p)
    np.testing.assert_array_equal(mb, (k // (p * v)) * p + k % p)
    np.testing.assert_array_equal(chunk, (k // p) % v)
    np.testing.assert_array_equal(stage_orders(Schedule.INTERLEAVED_1F1B, p, m, v, group=p),
                                  stage_orders(Schedule.INTERLEAVED_1F1B, p, m, v))


def test_a_larger_group_warms_up_longer_and_then_alternates():
    """p = 2, v = 2, m = 5, group 3: 2 (p - 1) + (v - 1) 3 = 5 warm-up forwards on stage 0, one
    forward and one backward (the backward's chunk reversed) in turn, then the rest."""
    assert _names(2, 5, 2, 3) == [
        "F0.0", "F0.1", "F0.2", "F1.0", "F1.1",
        "F1.2", "B1.0", "F0.3", "B1.1", "F0.4", "B1.2", "F1.3", "B0.0", "F1.4", "B0.1",
        "B0.2", "B1.3", "B1.4", "B0.3", "B0.4"]
    assert _names(2, 5, 2, 3, stage=1)[:3] == ["F0.0", "F0.1", "F0.2"]  # 3 = 2 (p - 2) + 3


def test_a_group_lets_m_be_other_than_a_multiple_of_pp():
    with pytest.raises(ConfigError, match=r"multiple of pipeline_parallel_size=4.*microbatch_group_size"):
        _job(10)
    result = simulate(_job(10, group=6))  # groups of 6 and 4: the last at least pp
    assert result.iteration_time_s > 0 and result.num_microbatches == 10


def test_the_group_is_reported_where_a_job_sets_it():
    """The summary (--json), the text table and the batch CSV name the group; a default job's
    summary has no such key."""
    from simulator.report.render import table
    from vtrain_ml.batch import result_columns

    result = simulate(_job(10, group=6))
    assert result.job["microbatch_group_size_per_vp_stage"] == 6
    assert "interleaved_1f1b (groups of 6 micro-batches)" in table(result)
    assert result_columns(result)["microbatch_group_size_per_vp_stage"] == 6
    default = simulate(_job(8))
    assert "microbatch_group_size_per_vp_stage" not in default.job
    assert result_columns(default)["microbatch_group_size_per_vp_stage"] == ""


def test_more_micro_batches_in_flight_hold_more_activations():
    """Stage 0 runs 2 (p - 1) + (v - 1) group forwards before its first backward: 10 with groups
    of 4, 14 with groups of 8, so its activations peak higher."""
    default, larger = simulate(_job(16)), simulate(_job(16, group=8))
    assert larger.peak_allocated_bytes > default.peak_allocated_bytes


def test_a_group_of_pp_is_the_default():
    assert _job(8, group=4).parallel.microbatch_group_size_per_vp_stage is None
    assert simulate(_job(8, group=4)).iteration_time_s == simulate(_job(8)).iteration_time_s


@pytest.mark.parametrize(("m", "group", "fragment"), [
    (8, 3, r"microbatch_group_size_per_vp_stage=3 must lie in \[pipeline_parallel_size=4, "
           r"number of micro-batches=8\]"),
    (8, 12, r"=12 must lie in \[pipeline_parallel_size=4"),
    (10, 8, r"10 % microbatch_group_size_per_vp_stage=8 = 2, is fewer than pipeline_parallel_size=4"),
])
def test_groups_megatron_refuses_are_refused(m, group, fragment):
    with pytest.raises(ConfigError, match=fragment):
        _job(m, group=group)


def test_a_group_needs_the_interleaved_schedule_and_megatron_core():
    with pytest.raises(ConfigError, match="needs schedule=interleaved_1f1b"):
        make_job(parallel={"tp": 1, "pp": 4, "dp": 2, "microbatch_group_size_per_vp_stage": 8})
    with pytest.raises(ConfigError, match=r"training\.framework=megatron-deepspeed schedules groups of pp"):
        _job(16, group=8, framework="megatron-deepspeed")
    with pytest.raises(ConfigError, match="multiple of pipeline_parallel_size=4") as refused:
        _job(10, framework="megatron-deepspeed")
    assert "microbatch_group_size" not in str(refused.value)  # no option it would refuse


def test_the_surrogate_refuses_a_group_it_does_not_model():
    with pytest.raises(ConfigError, match=r"parallel\.microbatch_group_size_per_vp_stage=8 cannot be held"):
        job_to_record(_job(16, group=8))
    assert job_to_record(_job(16, group=4))["pp"] == 4  # the default's group is held
