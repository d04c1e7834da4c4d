"""Uneven pipeline stages: Megatron's --decoder-first/last-pipeline-num-layers, and Meta's
Llama 3 405B layout (Llama Team 2024, Sec. 3.3.2: 126 layers on 16 stages, interleaved, the
first chunk holding only the embedding and the last only the head)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import job_from_dict, simulate
from simulator.errors import ConfigError
from simulator.graph.params import layer_params
from simulator.job.partition import chunk_layers, stage_layers
from simulator.job.validation import validate_job
from simulator.memory.states import stage_param_counts
from tests.conftest import job_dict, make_job
from tests.simulator_tests.conftest import pipeline_only, without_framework_overheads


def _job(layers: int, pp: int, v: int = 1, first: int | None = None, last: int | None = None,
         micro: int = 8):
    par = {"tp": 1, "pp": pp, "dp": 1, "first_stage_layers": first, "last_stage_layers": last}
    if v > 1:
        par |= {"schedule": "interleaved_1f1b", "virtual_stages": v}
    return job_from_dict(job_dict(
        model={"num_layers": layers, "hidden_size": 4096, "num_attention_heads": 32,
               "vocab_size": 128, "seq_length": 2048},
        training={"global_batch_size": micro, "micro_batch_size": 1},
        parallel=par, cluster={"num_gpus": pp}))


@pytest.mark.parametrize(("layers", "pp", "first", "last", "expected"), [
    (10, 3, 2, None, [2, 4, 4]),  # the rest divided evenly over the other stages
    (10, 3, None, 2, [4, 4, 2]),
    (12, 4, 2, 2, [2, 4, 4, 2]),
    (7, 2, 3, 4, [3, 4]),  # two stages: first + last = layers
    (126, 16, 7, 7, [7] + [8] * 14 + [7]),
])
def test_first_and_last_stage_layers_rest_divided_evenly(layers, pp, first, last, expected):
    job = validate_job(_job(layers, pp, first=first, last=last, micro=pp))
    np.testing.assert_array_equal(stage_layers(job), expected)
    assert stage_layers(job).sum() == layers


def test_llama3_405b_layout_leaves_the_embedding_and_head_chunks_empty():
    """v = 8 chunks of one layer each on the middle stages; the first stage's first chunk and the
    last stage's last chunk hold none (embedding / head only)."""
    job = validate_job(_job(126, 16, v=8, first=7, last=7, micro=16))
    grid = chunk_layers(job)
    assert grid.shape == (16, 8)
    np.testing.assert_array_equal(grid[0], [0, 1, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(grid[-1], [1, 1, 1, 1, 1, 1, 1, 0])
    assert (grid[1:-1] == 1).all()
    assert grid.sum() == 126


@pytest.mark.parametrize(("layers", "pp", "v", "first", "last", "fragment"), [
    (10, 1, 1, 2, None, "pipeline_parallel_size >= 2"),
    (10, 4, 1, 3, None, "leave 7 layers for the 3 other pipeline stages"),
    (10, 3, 1, 5, 5, "leave 0 layers"),
    (7, 2, 1, 3, 3, "must add up to num_layers=7"),
    (20, 4, 2, 3, 3, "not a multiple of virtual_stages=2"),
    (28, 4, 4, 2, None, "fewer than virtual_stages - 1 = 3"),
    (10, 4, 1, None, None, "not divisible by pipeline_parallel_size=4"),
])
def test_impossible_splits_get_one_clear_error_naming_the_fields(layers, pp, v, first, last,
                                                                 fragment):
    with pytest.raises(ConfigError, match=fragment) as err:
        validate_job(_job(layers, pp, v=v, first=first, last=last, micro=pp * 2))
    assert "\n" not in str(err.value)


def test_stage_parameters_follow_the_uneven_split():
    job = validate_job(_job(10, 3, first=2, micro=6))
    per_layer = layer_params(job.model).per_rank(1)
    counts = stage_param_counts(job)
    assert counts[1] == pytest.approx(4 * per_layer)  # a middle stage: only its layers
    # first: word table (128 x 4096) and positions (2048 x 4096); last: final LayerNorm and the
    # tied table's copy
    assert counts[0] - 2 * per_layer == pytest.approx(128 * 4096 + 2048 * 4096)
    assert counts[2] - 4 * per_layer == pytest.approx(2 * 4096 + 128 * 4096)


def test_stage_work_is_proportional_to_its_layers():
    """Free communication, no framework overheads, a 128-token vocabulary: a stage's busy time is
    its layers' forward and backward, so stages holding 2, 4 and 4 layers work 1 : 2 : 2."""
    job = without_framework_overheads(validate_job(_job(10, 3, first=2, micro=6)))
    busy = [s.busy_s for s in simulate(job, **pipeline_only(job)).stages]
    assert busy[1] / busy[0] == pytest.approx(2.0, rel=0.02)
    assert busy[2] / busy[1] == pytest.approx(1.0, rel=0.02)


def _llama3_405b_on_16k_gpus():
    """Meta's published layout (Llama 3 paper, Table 4, row "16,384 GPUs, 8K sequence"): tp 8,
    cp 1, pp 16, dp 128 on 16,384 H100s, interleaved, 126 layers with 7 on the first and last
    stage, sequence 8192, 16M-token batches (2,048 sequences)."""
    return validate_job(job_from_dict({
        "model": "llama-3-405b",
        "training": {"global_batch_size": 2048, "micro_batch_size": 1, "precision": "bf16",
                     "recompute": "none", "flash_attention": True},
        "parallel": {"tp": 8, "pp": 16, "dp": 128, "schedule": "interleaved_1f1b",
                     "virtual_stages": 8, "sequence_parallel": True,
                     "distributed_optimizer": True, "first_stage_layers": 7,
                     "last_stage_layers": 7},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16384}}))


def test_llama3_405b_on_16k_gpus_simulates_with_meta_s_layout():
    job = _llama3_405b_on_16k_gpus()
    result = simulate(job)
    assert result.num_microbatches == 16 and len(result.stages) == 16
    # MFU is the model's FLOPs over the iteration at the GPUs' dense BF16 peak (989.4 TFLOP/s)
    peak = 16384 * 989.4e12
    assert result.mfu == pytest.approx(result.model_flops_per_iteration / result.iteration_time_s / peak)
    # the first and last stages hold one layer fewer than the middle ones
    params = stage_param_counts(job)
    per_layer = layer_params(job.model).per_rank(8)
    assert params[1] == pytest.approx(8 * per_layer)


@pytest.mark.xfail(strict=True, reason="the simulator gives 51.3% MFU for Meta's 41% (Table 4): what "
                                       "costs Meta the rest at 16K GPUs is not modelled (its 3-layer "
                                       "RoCE Clos fabric at datasheet bus efficiency, stragglers, the "
                                       "FSDP-style data parallelism's exposed communication)")
def test_llama3_405b_mfu_is_meta_s_41_percent_within_10_percent():
    assert simulate(_llama3_405b_on_16k_gpus()).mfu == pytest.approx(0.41, rel=0.10)


@pytest.mark.xfail(strict=True, reason="Meta trained this layout on 80 GB H100s; the simulator puts "
                                       "81.7 GiB allocated on the fullest stage (68 GB of activations: "
                                       "interleaving with 16 micro-batches on 16 stages keeps every "
                                       "micro-batch in flight). Not modelled: Meta's pipeline schedule "
                                       "with a tunable number of micro-batches in flight and its early "
                                       "freeing of stage inputs and outputs (Llama 3 paper, section "
                                       "3.3.2)")
def test_llama3_405b_layout_fits_in_80_gb():
    assert simulate(_llama3_405b_on_16k_gpus()).fits_in_memory


def test_even_split_still_needs_layers_divisible_by_stages():
    with pytest.raises(ConfigError, match="num_layers=8 is not divisible"):
        validate_job(make_job(parallel={"tp": 1, "pp": 3, "dp": 1}, cluster={"num_gpus": 3},
                              training={"global_batch_size": 6}))
