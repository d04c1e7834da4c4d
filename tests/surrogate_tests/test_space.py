"""The space file and constructive sampling."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.job.catalog import resolve_hardware
from simulator.job.validation import validate_job
from surrogate.features import record_to_job
from surrogate.sampling import draw
from surrogate.space import load_space, space_from_dict
from tests.surrogate_tests.conftest import TINY_SPACE, tiny_space

A100 = {"a100-80gb": resolve_hardware("a100-80gb")}


def test_default_space_covers_8_to_16384_gpus_and_1b_to_1t_models() -> None:
    space = load_space("data/spaces/default.yaml")
    assert space.num_gpus.min == 8 and space.num_gpus.max == 16384
    assert space.models.parameters.min == 1e9 and space.models.parameters.max == 1e12


def test_constructive_sampling_rejects_few_and_says_why() -> None:
    result = draw(load_space("data/spaces/default.yaml"), A100, 600, seed=1)
    assert len(result.records) == 600
    assert result.drawn - 600 < 0.1 * result.drawn
    assert sum(result.rejections.values()) == result.drawn - 600
    assert all(isinstance(reason, str) and reason for reason in result.rejections)
    gpus = {r["num_gpus"] for r in result.records}
    assert min(gpus) == 8 and max(gpus) == 16384


def _assert_valid_jobs_of_the_tiny_space(records: list[dict]) -> None:
    """Each record builds a job that passes validation (record_to_job validates) and lies inside
    TINY_SPACE's ranges and choices: head_dim 64, or the megatron-gpt-1.7b preset's shape."""
    for record in records:
        job = validate_job(record_to_job(record, A100))
        p, t = job.parallel, job.training
        assert p.tp * p.pp * job.dp == job.cluster.num_gpus and 8 <= job.cluster.num_gpus <= 64
        assert p.tp in TINY_SPACE["tp"] and p.pp <= TINY_SPACE["pp_max"]
        assert p.schedule in TINY_SPACE["schedule"] and job.model.seq_length in TINY_SPACE["seq_length"]
        assert t.micro_batch_size in TINY_SPACE["micro_batch_size"]
        assert 1 <= job.num_microbatches <= 32
        assert t.global_batch_size % (t.micro_batch_size * job.dp) == 0
        shape = (job.model.num_layers, job.model.hidden_size, job.model.num_attention_heads)
        assert job.model.hidden_size == 64 * job.model.num_attention_heads or shape == (24, 2304, 24), shape


def test_every_sampled_record_is_a_valid_job() -> None:
    records = draw(tiny_space(), A100, 100, seed=3).records
    assert len(records) == 100
    _assert_valid_jobs_of_the_tiny_space(records)


def test_sampling_is_deterministic_and_prefix_stable() -> None:
    small = draw(tiny_space(), A100, 50, seed=7).records
    large = draw(tiny_space(), A100, 120, seed=7).records
    assert small == large[:50]
    assert draw(tiny_space(), A100, 50, seed=8).records != small


@pytest.mark.parametrize("method", ["lhs", "random"])
def test_other_designs_sample_valid_jobs(method: str) -> None:
    from surrogate.space import Method

    records = draw(tiny_space(), A100, 30, seed=0, method=Method(method)).records
    assert len(records) == 30
    _assert_valid_jobs_of_the_tiny_space(records)
    assert records != draw(tiny_space(), A100, 30, seed=0).records  # not the default (Sobol) design


def test_unknown_space_key_names_the_closest_one() -> None:
    with pytest.raises(ConfigError, match="did you mean 'num_gpus'"):
        space_from_dict({**TINY_SPACE, "num_gpu": {"min": 8, "max": 16}})


def test_inverted_range_is_rejected_with_the_field() -> None:
    with pytest.raises(ConfigError, match="num_gpus"):
        space_from_dict({**TINY_SPACE, "num_gpus": {"min": 64, "max": 8}})


def test_impossible_space_fails_with_reasons() -> None:
    bad = space_from_dict({**TINY_SPACE, "schedule": ["interleaved_1f1b"], "num_gpus": {"min": 8, "max": 8},
                           "tp": [8]})
    with pytest.raises(ConfigError, match="rejects almost every sample"):
        draw(bad, A100, 10, max_draws=200)
