"""The search space: fixed choice lists, constructive pruning with reasons, a sound memory bound."""

from __future__ import annotations

import pytest

from simulator import ConfigError, job_from_dict
from simulator.errors import InfeasibleConfigError
from simulator.simulate import simulate
from tests.search_tests.conftest import tiny_config, tiny_dict
from tests.search_tests.test_dimensions import moe_space
from vtrain_ml.planner.choices import parse_pipeline, pipeline_choices
from vtrain_ml.planner.config import config_from_dict
from vtrain_ml.planner.runner import check_feasible
from vtrain_ml.planner.space import SearchSpace, static_memory_bytes


def test_unknown_config_key_is_rejected_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match="did you mean 'max_gpus'"):
        config_from_dict({**tiny_dict(), "max_gpu": 8})


def test_model_and_architecture_are_exclusive() -> None:
    with pytest.raises(ConfigError, match="exactly one of 'model'"):
        config_from_dict(tiny_dict(architecture={"num_layers": [8], "hidden_size": [1024]}))


def test_largest_model_needs_a_time_budget() -> None:
    with pytest.raises(ConfigError, match="time_budget_days"):
        config_from_dict(tiny_dict(objective="largest_model", tokens_per_parameter=20))


def test_study_name_depends_on_the_space_not_on_the_run_length() -> None:
    assert tiny_config(trials=10).study_name() == tiny_config(trials=99).study_name()
    assert tiny_config().study_name() != tiny_config(global_batch=64).study_name()


def test_values_that_can_never_be_valid_are_pruned_with_their_reason() -> None:
    space = SearchSpace(tiny_config(space={**tiny_dict()["space"], "tp": [1, 2, 3]}))
    knobs = {k.name: k.choices for k in space.knobs}
    assert knobs["tp"] == (1, 2)
    assert "does not divide the 16 heads" in space.pruned_values["tp"]["3"]
    assert knobs["pp"] == (1, 2, 4, 8)  # divisors of the 8 layers
    assert knobs["dp"] == (1, 2, 4, 8, 16)  # divisors of the global batch 32, up to 16 GPUs


def test_a_plan_over_the_gpu_budget_is_infeasible_with_its_reason() -> None:
    space = SearchSpace(tiny_config())
    candidate = space.build({"tp": 8, "pp": 4, "dp": 2, "micro_batch_size": 1, "recompute": "none",
                             "distributed_optimizer": False})
    assert not candidate.feasible
    assert any("exceeds max_gpus=16" in r for r in candidate.reasons)


def test_simulator_rules_are_reasons_too() -> None:
    space = SearchSpace(tiny_config())
    candidate = space.build({"tp": 1, "pp": 1, "dp": 16, "micro_batch_size": 4, "recompute": "none",
                             "distributed_optimizer": False})
    assert any("not divisible by dp*micro_batch_size" in r for r in candidate.reasons)


def test_interleaved_schedule_and_virtual_stages_are_one_knob() -> None:
    from simulator.job.enums import Schedule

    choices = pipeline_choices((Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED_1F1B), (1, 2, 4))
    assert choices == ["1f1b", "interleaved_1f1b x2", "interleaved_1f1b x4"]
    assert parse_pipeline("interleaved_1f1b x4") == (Schedule.INTERLEAVED_1F1B, 4)
    assert parse_pipeline("1f1b") == (Schedule.ONE_F_ONE_B, 1)


def test_static_memory_is_a_lower_bound_of_the_simulated_peak() -> None:
    space = SearchSpace(tiny_config(max_gpus=16))
    candidates = space.sample(25, seed=3, feasible_only=False)
    assert len(candidates) == 25
    for c in candidates:
        assert c.job is not None
        assert static_memory_bytes(c.job) <= simulate(c.job).peak_memory_bytes * (1 + 1e-9)


@pytest.mark.parametrize(("cp", "dp"), [(2, 4), (4, 2), (8, 1)])
def test_the_memory_bound_shards_the_optimizer_over_dp_times_cp(cp: int, dp: int) -> None:
    """Megatron's distributed optimizer shards the dense states over dp x cp: a bound that divided
    by dp alone put a cp 8 plan of Llama 3 70B at 40 GiB against a simulated peak of 18.5 GiB,
    and so could prune plans that fit."""
    job = job_from_dict({"model": "llama-3-70b",
                         "training": {"global_batch_size": 16, "micro_batch_size": 1,
                                      "precision": "bf16", "recompute": "full", "flash_attention": True},
                         "parallel": {"tp": 8, "pp": 4, "dp": dp, "cp": cp, "sequence_parallel": True,
                                      "distributed_optimizer": True},
                         "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 32 * dp * cp}})
    assert static_memory_bytes(job) <= simulate(job).peak_memory_bytes


def test_the_memory_bound_holds_on_a_moe_and_cp_space() -> None:
    space = moe_space(cp=[1, 2, 4], ep=[1, 2, 4, 8], tp=[1, 2], num_gpus=[8])
    candidates = space.sample(30, seed=5, feasible_only=False)
    checked = [c for c in candidates if c.job is not None]
    assert any(c.job.parallel.cp > 1 for c in checked) and any(c.job.parallel.ep > 1 for c in checked)
    for c in checked:
        assert static_memory_bytes(c.job) <= simulate(c.job).peak_memory_bytes * (1 + 1e-9)


def test_a_plan_failing_the_memory_bound_does_not_fit_in_the_simulator() -> None:
    config = tiny_config(model="gpt3-175b", max_gpus=64, global_batch=64,
                         space={"tp": [8], "pp": [1], "dp": [1], "micro_batch_size": [1],
                                "recompute": ["full"], "schedule": ["1f1b"], "sequence_parallel": [False],
                                "distributed_optimizer": [False], "overlap_grad_reduce": [False]})
    candidate = SearchSpace(config).build({})
    assert candidate.valid and not candidate.feasible
    assert "alone need" in candidate.memory_problems[0]
    assert candidate.job is not None and not simulate(candidate.job).fits_in_memory


def test_no_feasible_layout_fails_early_with_reasons() -> None:
    config = tiny_config(model="mt-nlg-530b", max_gpus=8, global_batch=1920)
    with pytest.raises(InfeasibleConfigError, match="no feasible layout of mt-nlg-530b on 8"):
        check_feasible(SearchSpace(config))


def test_the_no_plan_diagnosis_says_how_many_gpus_a_huge_model_needs_on_one_gpu() -> None:
    # on 1 GPU the derived pp and dp lists hold 1 only; with more GPUs they grow, so more GPUs
    # do help: 530B needs tp=8 x pp=15 before its model states fit in 80 GiB
    config = tiny_config(model="mt-nlg-530b", max_gpus=1, global_batch=1920,
                         space={"tp": [1, 2, 4, 8], "distributed_optimizer": [False, True]})
    with pytest.raises(InfeasibleConfigError) as error:
        check_feasible(SearchSpace(config))
    assert "do not help" not in str(error.value)
    assert "uses 120 GPUs (tp=8, pp=15, dp=1): raise --max-gpus to at least that" in str(error.value)


def test_the_no_plan_diagnosis_says_when_more_gpus_truly_do_not_help() -> None:
    config = tiny_config(model="mt-nlg-530b", max_gpus=1, global_batch=1920,
                         space={"tp": [1], "pp": [1], "dp": [1], "distributed_optimizer": [False]})
    with pytest.raises(InfeasibleConfigError, match="More GPUs in the budget do not help"):
        check_feasible(SearchSpace(config))


def test_a_fixed_gpu_count_no_layout_divides_is_told_so_not_to_buy_memory() -> None:
    """DeepSeek-V3 on 100 GPUs: every plan breaks a layout rule (61 layers leave pp 1 and 61;
    neither tp x pp divides 100), none is held back by memory, so "use a GPU with more memory"
    would mislead; the message says what to change, with the uneven split's note."""
    config = config_from_dict({"model": "deepseek-v3", "hardware": "gb200", "global_batch": 4096,
                               "space": {"num_gpus": [100]}, "storage": "memory"})
    with pytest.raises(InfeasibleConfigError) as error:
        check_feasible(SearchSpace(config))
    text = str(error.value)
    assert "No plan is held back by memory: with the GPU count fixed (num_gpus=100)" in text
    assert "more memory" not in text and "--account-for-embedding-and-loss" in text


def test_every_trial_sees_the_same_choice_lists() -> None:
    a, b = SearchSpace(tiny_config()), SearchSpace(tiny_config(trials=5))
    assert a.knobs == b.knobs
    assert [k.name for k in a.searched] == ["tp", "pp", "dp", "micro_batch_size", "recompute",
                                             "distributed_optimizer"]
