"""The space file and constructive sampling."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.job.catalog import resolve_hardware
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


def test_every_sampled_record_is_a_valid_job() -> None:
    for record in draw(tiny_space(), A100, 100, seed=3).records:
        job = record_to_job(record, A100)
        assert job.parallel.tp * job.parallel.pp * job.dp == job.cluster.num_gpus


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
