"""Issue 25's dimensions of the search space: GPU type and count, ep, expert tp, cp, precision with
its recipe, sharding, CUDA graphs, tp comm overlap and the dispatcher -- knobs named as the job's
fields, pruned with reasons, priced per GPU type, shown in every output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulator.errors import ConfigError
from simulator.job.enums import Fp8Recipe, Precision, RecomputeModule
from tests.search_tests.conftest import tiny_dict
from vtrain_ml.cli.search import main
from vtrain_ml.planner.baseline import baseline_candidate
from vtrain_ml.planner.config import SearchConfig, config_from_dict, load_config
from vtrain_ml.planner.dimensions import parse_precision
from vtrain_ml.planner.evaluation import Evaluation, evaluate_exact
from vtrain_ml.planner.space import SearchSpace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# 4 layers, 8 experts of which 2 active: a MoE model that simulates in milliseconds
TINY_MOE = {"name": "tiny-moe", "num_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
            "num_query_groups": 4, "ffn_hidden_size": 1024, "vocab_size": 4096, "seq_length": 1024,
            "gated_mlp": True, "norm": "rmsnorm", "use_bias": False, "position_embedding": "rope",
            "tied_embeddings": False, "hidden_dropout": 0.0, "attention_dropout": 0.0,
            "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 512}


def moe_dict(**space: Any) -> dict[str, Any]:
    """A MoE + CP space on 8 B200s (every knob of issue 25 that a dense-free B200 plan can use)."""
    base = {"tp": [1, 2], "pp": [1, 2], "ep": [1, 2, 4], "cp": [1, 2], "micro_batch_size": [1],
            "recompute": ["none"], "schedule": ["1f1b"], "sequence_parallel": [False, True],
            "distributed_optimizer": [True], "overlap_grad_reduce": [False], "num_gpus": [8]}
    if "data_parallel_sharding" in space:
        del base["distributed_optimizer"]
    data = {k: v for k, v in tiny_dict().items() if k != "max_gpus"}
    return {**data, "model": TINY_MOE, "hardware": "b200", "global_batch": 16, "precision": "bf16",
            "space": {**base, **space}, "storage": "memory"}


def moe_space(**space: Any) -> SearchSpace:
    return SearchSpace(config_from_dict(moe_dict(**space)))


def _refused(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        SearchSpace(config_from_dict(data))
    text = str(info.value)
    assert "\n" not in text
    return text


def test_new_knobs_are_named_as_the_jobs_fields() -> None:
    space = moe_space(precision=["bf16", "fp8/mxfp8"], cp_comm_type=["p2p", "a2a"])
    names = [k.name for k in space.knobs]
    assert {"num_gpus", "ep", "cp", "precision", "cp_comm_type"} <= set(names)
    assert "dp" not in names  # derived from num_gpus
    job = space.build({"tp": 2, "pp": 1, "ep": 4, "cp": 2, "sequence_parallel": True,
                       "precision": "fp8/mxfp8", "cp_comm_type": "a2a"}).job
    assert job is not None
    p, t = job.parallel, job.training
    assert (p.tp, p.cp, p.ep, job.dp, job.cluster.num_gpus) == (2, 2, 4, 2, 8)
    assert (t.precision, t.fp8_recipe, p.cp_comm_type.value) == (Precision.FP8, Fp8Recipe.MXFP8, "a2a")


def test_plans_that_break_a_rule_of_the_new_dimensions_are_pruned_with_the_reason() -> None:
    space = moe_space()
    no_sp = space.build({"tp": 2, "pp": 1, "ep": 2, "cp": 1, "sequence_parallel": False})
    assert not no_sp.valid and any("sequence_parallel" in r for r in no_sp.reasons)
    # tp*cp*dp = 1*1*4 ranks per stage cannot fold ep=4 x expert tp 1? it can; pp=2 leaves 4:
    folded = space.build({"tp": 1, "pp": 2, "ep": 4, "cp": 2, "sequence_parallel": False})
    assert folded.valid, folded.reasons
    uneven = space.build({"tp": 2, "pp": 2, "ep": 4, "cp": 2, "sequence_parallel": True})
    # 8 GPUs / (2*2*2) = dp 1: a stage holds tp*cp*dp = 4 ranks, 4 = expert_tp 2 x ep 4? no: 8
    assert not uneven.valid and any("MoE parallel folding" in r for r in uneven.reasons)


def test_gpu_counts_that_tp_cp_pp_do_not_divide_are_pruned_and_dp_is_derived() -> None:
    data = {k: v for k, v in tiny_dict().items() if k != "max_gpus"}
    space = SearchSpace(config_from_dict({**data, "storage": "memory", "global_batch": 48,
                                          "space": {**data["space"], "num_gpus": [12], "pp": [1, 2]}}))
    assert space.config.max_gpus == 12  # the largest count is the budget
    ok = space.build({"tp": 2, "pp": 2, "micro_batch_size": 1, "recompute": "none",
                      "distributed_optimizer": False})
    assert ok.job is not None and ok.job.dp == 3 and ok.job.cluster.num_gpus == 12
    bad = space.build({"tp": 8, "pp": 1, "micro_batch_size": 1, "recompute": "none",
                       "distributed_optimizer": False})
    assert bad.job is None and "tp*pp = 8*1 = 8 does not divide num_gpus=12" in bad.reasons[0]


@pytest.mark.parametrize(("text", "precision", "recipe"), [
    ("bf16", Precision.BF16, None), ("fp8/mxfp8", Precision.FP8, "mxfp8"),
    ("FP8/Blockwise", Precision.FP8, "blockwise"), ("fp4/nvfp4", Precision.FP4, "nvfp4"),
    ("fp8", Precision.FP8, "tensorwise")])  # plain fp8: the top-level fp8_recipe
def test_precision_strings_are_parsed(text: str, precision: Precision, recipe: str | None) -> None:
    choice = parse_precision(text, fp8_default=Fp8Recipe.TENSORWISE)
    assert choice.precision is precision
    assert (choice.fp8_recipe or choice.fp4_recipe or None) == recipe


def test_one_value_where_a_list_is_expected_is_a_list_of_that_value() -> None:
    """`num_gpus: 8` fixes the GPU count as `num_gpus: [8]` does (the issue: "a list, or one
    value"), and so for every knob; the same search, so the same study."""
    scalars = moe_dict(num_gpus=8, ep=4, cp=2, tp=2, precision="fp8/mxfp8", sequence_parallel=True)
    lists = moe_dict(num_gpus=[8], ep=[4], cp=[2], tp=[2], precision=["fp8/mxfp8"],
                     sequence_parallel=[True])
    one, other = config_from_dict(scalars), config_from_dict(lists)
    assert one == other and one.space.num_gpus == (8,) and one.space.precision == ("fp8/mxfp8",)
    assert one.study_name() == other.study_name()
    job = SearchSpace(one).build({"pp": 1}).job
    assert job is not None and (job.parallel.tp, job.parallel.ep, job.parallel.cp) == (2, 4, 2)
    assert "space.ep=3 does not divide num_experts=8" in _refused(moe_dict(ep=3))


@pytest.mark.parametrize(("space", "top", "message"), [
    ({"precision": ["fp9"]}, {}, "space.precision='fp9' is not a precision"),
    ({"precision": ["bf16/mxfp8"]}, {}, "bf16 has no recipe"),
    ({"precision": ["fp8/mx"]}, {}, "unknown fp8 recipe 'mx'; use one of fp8/delayed"),
    ({}, {"fp8_recipe": "mxfp8"}, "fp8_recipe=mxfp8 needs precision=fp8"),
    ({"ep": [3]}, {}, "space.ep=3 does not divide num_experts=8; use a divisor of 8"),
    ({"cp": [3]}, {}, "space.cp=3: seq_length=1024 is not divisible by 2*cp = 6"),
    ({"dp": [1, 2]}, {}, "space.num_gpus derives dp"),
    ({"data_parallel_sharding": ["optim_grads_params"]}, {}, "with model tiny-moe (mixture of experts"),
    ({"cuda_graphs": ["full_iteration"]}, {}, "dropless MoE model"),
    ({"cp_comm_type": ["a2a+p2p"]}, {}, "needs hierarchical_context_parallel_sizes"),
])
def test_a_bad_value_is_one_line_naming_the_field_and_the_fix(space: dict[str, Any], top: dict[str, Any],
                                                              message: str) -> None:
    data = moe_dict(**space)
    assert message in _refused({**data, **top})


def test_moe_knobs_on_a_dense_model_are_refused() -> None:
    data = {**tiny_dict(), "storage": "memory", "space": {**tiny_dict()["space"], "ep": [1, 2]}}
    assert "space.ep=2 applies to a mixture-of-experts model; model tiny-gpt is dense" in _refused(data)


def test_a_precision_a_gpu_cannot_run_is_pruned_for_that_gpu_only() -> None:
    space = SearchSpace(config_from_dict({**moe_dict(precision=["fp8/mxfp8"]),
                                          "hardware": ["h100-sxm-80gb", "b200"]}))
    plan = {"tp": 1, "pp": 1, "ep": 2, "cp": 1, "sequence_parallel": False}
    hopper, blackwell = (space.build({**plan, "hardware": h}) for h in ("h100-sxm-80gb", "b200"))
    assert blackwell.valid, blackwell.reasons
    assert not hopper.valid and any("mxfp8 is not supported on h100" in r for r in hopper.reasons)


def test_a_recipe_that_runs_as_an_earlier_one_on_a_gpu_is_searched_once_there(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Transformer Engine emulates blockwise FP8 with MXFP8 on Blackwell: on a B200 the two
    entries are the same plans with the same numbers, so the space holds them once, under the
    entry listed first; on an H100 (no MXFP8) blockwise plans are plans of their own. A baseline
    given as the later entry is evaluated as given."""
    data = {**moe_dict(precision=["fp8/mxfp8", "fp8/blockwise"]), "hardware": ["h100-sxm-80gb", "b200"]}
    space = SearchSpace(config_from_dict(data))
    plan = {"tp": 1, "pp": 1, "ep": 2, "cp": 1, "sequence_parallel": False}
    twin = space.build({**plan, "hardware": "b200", "precision": "fp8/blockwise"})
    assert not twin.valid
    assert any("runs on b200 exactly as precision=fp8/mxfp8 does" in r for r in twin.reasons)
    assert space.build({**plan, "hardware": "b200", "precision": "fp8/mxfp8"}).valid
    assert space.build({**plan, "hardware": "h100-sxm-80gb", "precision": "fp8/blockwise"}).valid
    as_given = space.build({**plan, "hardware": "b200", "precision": "fp8/blockwise"}, distinct=False)
    kept = space.build({**plan, "hardware": "b200", "precision": "fp8/mxfp8"})
    assert as_given.valid and as_given.job is not None and kept.job is not None
    assert evaluate_exact(as_given.job).iteration_time_s == evaluate_exact(kept.job).iteration_time_s
    # a bare "fp8" is the GPU's default recipe, MXFP8 on Blackwell; delayed scaling is its own
    default = SearchSpace(config_from_dict(moe_dict(precision=["fp8", "fp8/mxfp8", "fp8/delayed"])))
    assert not default.build({**plan, "precision": "fp8/mxfp8"}).valid
    assert default.build({**plan, "precision": "fp8/delayed"}).valid
    # the baseline, and the search's output saying what it searched once
    recipe = tmp_path / "twins.yaml"
    baseline = {"hardware": "b200", "num_gpus": 8, "tp": 1, "pp": 1, "ep": 2, "cp": 1,
                "precision": "fp8/blockwise", "micro_batch_size": 1, "schedule": "1f1b",
                "sequence_parallel": False}
    recipe.write_text(json.dumps({**{k: v for k, v in data.items() if k != "storage"}, "baseline": baseline}))
    assert main(["--config", str(recipe), "--exhaustive", "--json", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["baseline"]["plan"]["precision"] == "fp8/blockwise"
    assert report["notes"] == ["precision fp8/blockwise runs on b200 exactly as fp8/mxfp8 does (the same "
                               "format): those plans are searched once, as fp8/mxfp8"]
    blackwell = {p["plan"]["precision"] for p in report["top"] if p["plan"]["hardware"] == "b200"}
    assert blackwell == {"fp8/mxfp8"}


def test_an_mfu_above_100_percent_says_which_peak_it_is_against() -> None:
    """MFU is model FLOPs against the GPU's 16-bit peak for every recipe (the convention of
    published FP8 and FP4 runs), so an FP4 plan can show more than 100%: the table says why,
    and only then."""
    from dataclasses import replace

    from vtrain_ml.planner.outcomes import make_report, outcome
    from vtrain_ml.planner.report import render_table

    space = moe_space(precision=["fp4/nvfp4"])
    candidate = space.build({"tp": 1, "pp": 1, "ep": 2, "cp": 1, "sequence_parallel": False})
    assert candidate.job is not None
    exact = evaluate_exact(candidate.job)
    note = "MFU% is against the GPU's 16-bit peak"
    for mfu, shown in ((0.6, False), (1.11, True)):
        evaluated = [outcome(space, candidate, replace(exact, mfu=mfu))]
        report = make_report(space, "exhaustive", evaluated, 1, 0, 0.1)
        assert (note in render_table(report)) is shown


def test_a_hardware_list_prices_each_plan_with_its_entry() -> None:
    data = {**moe_dict(), "hardware": [{"name": "h100-sxm-80gb", "price_per_gpu_hour_usd": 2.0},
                                       {"name": "b200"}]}
    space = SearchSpace(config_from_dict(data))
    assert space.knobs[0].name == "hardware" and space.knobs[0].choices == ("h100-sxm-80gb", "b200")
    plan = {"tp": 1, "pp": 1, "ep": 2, "cp": 1, "sequence_parallel": False}
    b200 = space.hardware_specs["b200"].price_per_gpu_hour_usd
    for name, price in (("h100-sxm-80gb", 2.0), ("b200", b200)):
        job = space.build({**plan, "hardware": name}).job
        assert job is not None and job.hardware.name == name and job.price_per_gpu_hour_usd == price
        exact = evaluate_exact(job)
        assert exact.cost_per_iteration_usd == pytest.approx(exact.iteration_time_s * 8 * price / 3600)
        assert exact.memory_capacity_bytes == job.hardware.memory_bytes
    assert config_from_dict(data).study_name().startswith("custom-h100-sxm-80gb+b200-8-time-")


def _simulated(space: SearchSpace, params: dict[str, Any]) -> Any:
    """The exact outcome of one plan of `space`."""
    from vtrain_ml.planner.outcomes import outcome

    candidate = space.build(params)
    assert candidate.job is not None
    return outcome(space, candidate, evaluate_exact(candidate.job))


def _header(space: SearchSpace, simulated: list[Any], top: Any = None) -> str:
    """The table's header line of a report of `simulated` (showing only `top`, when given)."""
    from dataclasses import replace

    from vtrain_ml.planner.outcomes import make_report
    from vtrain_ml.planner.report import render_table

    report = make_report(space, "exhaustive", simulated, len(simulated), 0, 0.1)
    return render_table(replace(report, baseline=None, **({"top": top} if top else {}))).splitlines()[0]


def test_the_table_names_the_gpu_and_precision_whenever_the_search_tried_more_than_one() -> None:
    data = {**moe_dict(), "hardware": [{"name": "h100-sxm-80gb"}, {"name": "b200"}]}
    space = SearchSpace(config_from_dict(data))
    plan = {"tp": 1, "pp": 1, "ep": 2, "cp": 1, "sequence_parallel": False}
    outcomes = [_simulated(space, {**plan, "hardware": name}) for name in ("b200", "h100-sxm-80gb")]
    fastest = min(outcomes, key=lambda o: o.exact.iteration_time_s)
    # one row shown, two GPU types tried: which one won is in the table
    assert " gpu " in _header(space, outcomes, (fastest,))
    # one GPU's plans simulated of two searched (the other's fit nowhere): still named
    assert " gpu " in _header(space, outcomes[:1])
    single = moe_space()  # b200 alone: no column
    assert " gpu " not in _header(single, [_simulated(single, plan)])
    # so is the precision: a bf16 row alone shows it when fp8 plans were simulated too
    formats = moe_space(precision=["bf16", "fp8/mxfp8"])
    both = [_simulated(formats, {**plan, "precision": p}) for p in ("bf16", "fp8/mxfp8")]
    assert " precision " in _header(formats, both, (both[0],))
    assert " precision " not in _header(formats, both[:1])


def test_older_searches_keep_their_study_names_and_spaces() -> None:
    config = load_config(EXAMPLES / "case_study_1_mtnlg.yaml")
    assert config.study_name() == "mt-nlg-530b-a100-80gb-3360-time-5bbaad07e3"  # as before issue 25
    space = SearchSpace(config)
    assert space.size == 560 and "hardware" not in [k.name for k in space.knobs]


def test_a_baseline_is_a_full_plan_by_the_jobs_field_names() -> None:
    plan = {"hardware": "b200", "num_gpus": 8, "tp": 1, "pp": 2, "ep": 4, "cp": 2, "dp": 2,
            "precision": "bf16", "micro_batch_size": 1, "schedule": "1f1b", "virtual_stages": 1,
            "sequence_parallel": False, "data_parallel_sharding": "optim"}
    space = SearchSpace(config_from_dict({**moe_dict(), "baseline": plan}))
    candidate = baseline_candidate(space)
    assert candidate is not None and candidate.job is not None
    p = candidate.job.parallel
    assert (p.tp, p.pp, p.ep, p.cp, candidate.job.dp) == (1, 2, 4, 2, 2)
    wrong = SearchSpace(config_from_dict({**moe_dict(), "baseline": {**plan, "dp": 4}}))
    with pytest.raises(ConfigError, match=r"not a plan of this space: dp=4 \(the space's plans have 2"):
        baseline_candidate(wrong)
    # a knob's value the space does not list (its study could not record the plan)
    outside = SearchSpace(config_from_dict({**moe_dict(), "baseline": {**plan, "recompute": "full"}}))
    with pytest.raises(ConfigError, match=r"not a plan of this space: recompute=full \(the space has none\)"):
        baseline_candidate(outside)


def test_recompute_modules_are_choices_of_selective_recompute() -> None:
    """Each module list is one `recompute` choice (`selective:<modules>`, the default list plain
    `selective`); a baseline gives its modules apart, as in a job file, and the plan runs them."""
    space = moe_space(recompute=["none", "selective"], recompute_modules=[["core_attn"], ["moe_act", "moe"]])
    knob = next(k for k in space.knobs if k.name == "recompute")
    assert knob.choices == ("none", "selective", "selective:moe_act+moe")
    job = space.build({"recompute": "selective:moe_act+moe", "tp": 1, "pp": 1, "cp": 1, "ep": 2,
                       "sequence_parallel": False}).job
    assert job is not None
    assert job.training.recompute_modules == (RecomputeModule.MOE_ACT, RecomputeModule.MOE)
    plan = {"tp": 1, "pp": 1, "ep": 2, "cp": 1, "sequence_parallel": False, "recompute": "selective",
            "recompute_modules": ["moe", "moe_act"]}
    data = moe_dict(recompute=["none", "selective"], recompute_modules=[["core_attn"], ["moe_act", "moe"]])
    candidate = baseline_candidate(SearchSpace(config_from_dict({**data, "baseline": plan})))
    assert candidate is not None and candidate.params["recompute"] == "selective:moe_act+moe"


@pytest.mark.parametrize(("space", "message"), [
    ({"recompute": ["selective"], "recompute_modules": [["mla_up_proj"]]},
     "space.recompute_modules: mla_up_proj needs model.multi_latent_attention, which model tiny-moe lacks"),
    ({"recompute": ["none", "full"], "recompute_modules": [["moe_act"]]},
     "space.recompute_modules needs selective in space.recompute"),
    ({"recompute": ["selective"], "recompute_modules": [[]]}, "space.recompute_modules has an empty list")])
def test_recompute_modules_a_plan_cannot_run_are_refused_with_the_space(space: dict[str, Any],
                                                                       message: str) -> None:
    assert message in _refused(moe_dict(**space))


def test_an_uneven_split_counts_embedding_and_loss_as_layers() -> None:
    model = {**TINY_MOE, "num_layers": 6}  # 6 + 2 = 8 layers over 4 stages: 1, 2, 2, 1
    data = {**moe_dict(pp=[1, 2, 4], ep=[1], cp=[1]), "model": model}
    assert "pp" in _refused_or_space({**data, "space": {**data["space"], "pp": [4]}})
    space = SearchSpace(config_from_dict({**data, "space": {**data["space"], "pp": [4],
                                                            "account_for_embedding_and_loss": True}}))
    job = space.build({"tp": 1, "cp": 1, "sequence_parallel": False}).job
    assert job is not None and (job.parallel.first_stage_layers, job.parallel.last_stage_layers) == (1, 1)


def _refused_or_space(data: dict[str, Any]) -> str:
    try:
        SearchSpace(config_from_dict(data))
    except Exception as exc:
        return str(exc)
    return ""


def test_json_csv_and_table_show_the_new_fields(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    recipe = tmp_path / "moe.yaml"
    data = {k: v for k, v in moe_dict(precision=["bf16", "fp8/mxfp8"]).items() if k != "storage"}
    recipe.write_text(json.dumps(data))
    csv = tmp_path / "plans.csv"
    assert main(["--config", str(recipe), "--exhaustive", "--json", "--csv", str(csv), "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    plan = report["best"]["plan"]
    for key in ("hardware", "num_gpus", "ep", "cp", "precision", "data_parallel_sharding", "expert_tp",
                "moe_token_dispatcher"):
        assert key in plan
    header = csv.read_text().splitlines()[0].split(",")
    assert {"hardware", "ep", "cp", "precision", "data_parallel_sharding"} <= set(header)
    assert main(["--config", str(recipe), "--exhaustive", "--quiet", "--ep", "2,4"]) == 0
    table = capsys.readouterr().out
    head = next(line for line in table.splitlines() if "tp x pp x dp" in line)
    assert " ep " in head and "precision" in head  # cp: only where the rows differ in it


def test_every_plan_is_priced_per_million_tokens(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    """Dollars per million tokens compare GPU types, counts and batches alike: the JSON, the CSV
    and the recommendation carry them; a trial stored before them loads without."""
    recipe = tmp_path / "moe.yaml"
    data = {k: v for k, v in moe_dict().items() if k != "storage"}
    recipe.write_text(json.dumps({**data, "hardware": [{"name": "b200", "price_per_gpu_hour_usd": 6.0},
                                                       {"name": "h100-sxm-80gb"}]}))
    csv = tmp_path / "plans.csv"
    assert main(["--config", str(recipe), "--exhaustive", "--json", "--csv", str(csv), "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    tokens = data["global_batch"] * TINY_MOE["seq_length"]
    for plan in report["top"]:
        assert plan["usd_per_million_tokens"] == pytest.approx(plan["cost_per_iteration_usd"] / tokens * 1e6)
    b200 = next(p for p in report["top"] if p["plan"]["hardware"] == "b200")
    hours = b200["iteration_time_s"] / 3600 * b200["num_gpus"]
    assert b200["usd_per_million_tokens"] == pytest.approx(6.0 * hours / tokens * 1e6)
    assert "usd_per_million_tokens" in csv.read_text().splitlines()[0].split(",")
    assert main(["--config", str(recipe), "--exhaustive", "--quiet"]) == 0
    assert "per million tokens)" in capsys.readouterr().out
    job = moe_space().build({"tp": 1, "pp": 1, "ep": 2, "cp": 1, "sequence_parallel": False}).job
    assert job is not None
    stored = {k: v for k, v in evaluate_exact(job).to_dict().items()
              if k not in ("tokens_per_iteration", "usd_per_million_tokens")}
    assert Evaluation.from_dict(stored).usd_per_million_tokens is None


def test_space_flags_are_lists_and_a_bad_one_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--model", "mixtral-8x7b", "--hardware", "h100-sxm-80gb,b200", "--num-gpus", "64",
                 "--global-batch", "64", "--ep", "3", "--storage", "memory", "--quiet"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "space.ep=3 does not divide num_experts=8" in err[0]
    code = main(["--model", "mixtral-8x7b", "--num-gpus", "64", "--global-batch", "64", "--ep", "two"])
    assert code == 2
    assert "--ep two: give comma-separated values" in capsys.readouterr().err


def test_every_layout_knob_has_a_flag_and_a_flag_is_the_recipes_list() -> None:
    """The issue names virtual_stages with the new dimensions; the older knobs (schedule,
    recompute, the three flags of the table) are flags as well, so a space needs no recipe."""
    from vtrain_ml.cli.search import build_config, parser

    args = parser().parse_args(["--model", "mixtral-8x7b", "--hardware", "b200", "--num-gpus", "64",
                                "--global-batch", "64", "--schedule", "interleaved_1f1b",
                                "--virtual-stages", "2,4", "--recompute", "none,full",
                                "--sequence-parallel", "true", "--distributed-optimizer", "true",
                                "--overlap-grad-reduce", "false,true", "--overlap-param-gather", "false"])
    space = build_config(args).space
    assert space.schedule == ("interleaved_1f1b",) and space.virtual_stages == (2, 4)
    assert space.recompute == ("none", "full") and space.sequence_parallel == (True,)
    assert (space.distributed_optimizer, space.overlap_grad_reduce) == ((True,), (False, True))
    assert space.overlap_param_gather == (False,)
    dp = build_config(parser().parse_args(["--model", "mixtral-8x7b", "--max-gpus", "64",
                                           "--global-batch", "64", "--dp", "4,8"]))
    assert dp.space.dp == (4, 8)


def test_a_model_whose_layers_few_pipeline_sizes_divide_says_how_to_try_more() -> None:
    """DeepSeek-V3's 61 layers: by default only pp 1 and 61; the note names Megatron's uneven
    split, which `--account-for-embedding-and-loss` turns on (then pp 4 is a choice)."""
    from vtrain_ml.cli.search import build_config, parser
    from vtrain_ml.planner.rules import pipeline_notes

    flags = ["--model", "deepseek-v3", "--hardware", "gb200", "--num-gpus", "256", "--global-batch", "4096"]
    plain = SearchSpace(build_config(parser().parse_args(flags)))
    assert dict((k.name, k.choices) for k in plain.knobs)["pp"] == (1, 61)
    (note,) = pipeline_notes(plain)
    assert "61 layers (1, 61)" in note and "--account-for-embedding-and-loss" in note and "2, 4, 8" in note
    uneven = SearchSpace(build_config(parser().parse_args([*flags, "--account-for-embedding-and-loss"])))
    assert 4 in dict((k.name, k.choices) for k in uneven.knobs)["pp"] and pipeline_notes(uneven) == ()
    chosen = SearchSpace(build_config(parser().parse_args([*flags, "--pp", "1"])))
    assert pipeline_notes(chosen) == ()  # the user chose the sizes
    dense = SearchSpace(config_from_dict(tiny_dict()))  # 8 layers: 10 adds only 5 and 10
    assert pipeline_notes(dense) == ()


def test_a_config_with_the_new_fields_round_trips_through_a_stored_study() -> None:
    config = config_from_dict({**moe_dict(precision=["fp8"]), "fp8_recipe": "mxfp8",
                               "hardware": [{"name": "b200", "price_per_gpu_hour_usd": 6.0,
                                             "nvlink_domain": 8}]})
    again = SearchConfig.model_validate(json.loads(config.model_dump_json()))
    assert again == config and again.space_hash() == config.space_hash()


def test_sequence_parallel_at_tp_1_is_one_plan_held_once() -> None:
    """Megatron turns sequence parallelism off without tensor parallelism, so tp 1 with and
    without it are one plan: a space offering both holds it once (as false); a space that offers
    only true keeps its tp 1 plans, and a baseline is evaluated as given."""
    from vtrain_ml.planner.space import SP_TWIN

    both = moe_space()  # sequence_parallel: [False, True]
    plan = {"tp": 1, "pp": 1, "ep": 2, "cp": 1}
    assert SP_TWIN in both.build({**plan, "sequence_parallel": True}).reasons
    assert both.build({**plan, "sequence_parallel": False}).valid
    assert both.build({**plan, "sequence_parallel": True}, distinct=False).valid  # a baseline
    assert both.build({**plan, "tp": 2, "sequence_parallel": True}).valid
    only = moe_space(sequence_parallel=[True])
    assert only.build({**plan, "sequence_parallel": True}).valid
