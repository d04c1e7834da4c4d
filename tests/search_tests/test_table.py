"""The space as arrays (`SpaceTable`, `planner.rules`, `planner.batch`) agrees with the built
candidates it stands in for: the same valid and feasible plans, the same static memory, the same
surrogate columns, the same neighbours."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from surrogate.columns import Factorized
from surrogate.features import JOB_COLUMNS, job_to_record
from tests.search_tests.conftest import tiny_config, tiny_dict
from tests.search_tests.test_dimensions import moe_dict
from vtrain_ml.planner import rules
from vtrain_ml.planner.batch import job_columns
from vtrain_ml.planner.config import SearchConfig, load_config
from vtrain_ml.planner.space import SearchSpace, static_memory_bytes
from vtrain_ml.planner.table import SpaceTable

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TINY_SPACES = {
    "tiny": tiny_dict(),
    "all gpus, interleaved": tiny_dict(space={**tiny_dict()["space"], "use_all_gpus": True,
                                              "schedule": ["1f1b", "interleaved_1f1b"],
                                              "virtual_stages": [2, 4], "sequence_parallel": [False, True]}),
    "odd budget, nodes of 4": tiny_dict(max_gpus=12, gpus_per_node=4, global_batch=48,
                                        space={**tiny_dict()["space"], "dp": [1, 2, 3, 4, 6, 12]}),
    "architectures": {**{k: v for k, v in tiny_dict().items() if k != "model"},
                      "architecture": {"num_layers": [4, 8, 12], "hidden_size": [512, 768, 1024],
                                       "head_dim": [64, 96]},
                      "objective": "largest_model", "tokens_per_parameter": 20, "time_budget_days": 1},
    "big model, memory bound": tiny_dict(model="gpt3-175b", max_gpus=64, global_batch=64),
    # issue 25's knobs: a MoE model over ep, expert tp, cp and its exchange, precision recipes,
    # two GPU types at their prices, a fixed GPU count, the dispatcher
    "moe + cp, two gpus, recipes": {**moe_dict(ep=[1, 2, 4, 8], expert_tp=[1, 2], cp=[1, 2, 4],
                                               cp_comm_type=["p2p", "a2a"], num_gpus=[8, 16],
                                               tp=[1, 2, 4], precision=["bf16", "fp8/mxfp8", "fp8/blockwise"],
                                               moe_token_dispatcher=["alltoall", "flex"]),
                                    "max_gpus": 16,
                                    "hardware": [{"name": "h100-sxm-80gb", "price_per_gpu_hour_usd": 2.5},
                                                 {"name": "b200", "nvlink_domain": 4}]},
    # the combined-1F1B dispatch overlap: refused with ep 1, the allgather dispatcher, full
    # recompute, or pp > 1 without the interleaved schedule
    "moe: dispatch overlap": {**moe_dict(ep=[1, 2, 4], pp=[1, 2], recompute=["none", "full"],
                                         schedule=["1f1b", "interleaved_1f1b"], virtual_stages=[2],
                                         moe_token_dispatcher=["alltoall", "allgather", "flex"],
                                         moe_overlap_ep_comm=[False, True]), "max_gpus": 8},
    # selective recompute by module: each module list is a `recompute` choice; moe_act and
    # layernorm are refused with delayed-scaling FP8 (Megatron), which Hopper runs
    "moe: recompute modules": {**moe_dict(ep=[1, 2], cp=[1], recompute=["none", "selective", "full"],
                                          recompute_modules=[["core_attn"], ["moe_act"],
                                                             ["moe_act", "layernorm"], ["moe"]],
                                          precision=["bf16", "fp8/delayed", "fp8/tensorwise"]),
                               "hardware": "h100-sxm-80gb", "max_gpus": 8},
    # the memory settings: a 16-bit gradient buffer and bf16 Adam moments (these only with the
    # distributed optimizer) change the static bound, on a memory-bound model
    "memory settings": tiny_dict(model="gpt3-175b", max_gpus=64, global_batch=64, precision="bf16",
                                 space={**tiny_dict()["space"], "grad_reduce_in_fp32": [True, False],
                                        "exp_avg_dtype": ["fp32", "bf16"],
                                        "exp_avg_sq_dtype": ["fp32", "bf16"]}),
    # --overlap-param-gather: refused without a sharded optimizer or overlapped reduction
    "dense: parameter gather": tiny_dict(
        model={**tiny_dict()["model"], "num_layers": 8},
        space={**tiny_dict()["space"], "pp": [1, 2], "schedule": ["1f1b", "interleaved_1f1b"],
               "virtual_stages": [2], "overlap_grad_reduce": [False, True],
               "overlap_param_gather": [False, True]}),
    "dense: sharding, overlap, uneven split": tiny_dict(
        model={**tiny_dict()["model"], "num_layers": 6}, hardware="b200", precision="bf16",
        space={**{k: v for k, v in tiny_dict()["space"].items() if k != "distributed_optimizer"},
               "pp": [1, 2, 4], "sequence_parallel": [False, True], "cp": [1, 2],
               "data_parallel_sharding": ["no_shard", "optim", "optim_grads_params"],
               "tp_comm_overlap": [False, True], "cuda_graphs": ["none", "per_layer"],
               "precision": ["bf16", "fp8", "fp4/nvfp4"], "account_for_embedding_and_loss": True}),
}


def _value(column: object, i: int) -> object:
    return column.uniques[column.codes[i]] if isinstance(column, Factorized) else column[i]  # type: ignore[index,attr-defined]


def _check(table: SpaceTable, positions: np.ndarray) -> None:
    valid, feasible = rules.valid(table), rules.feasible(table)
    static = table.flat(rules.static_memory_grid(table))
    chosen = positions[feasible[positions]]
    columns = job_columns(table, chosen)
    k = 0
    for p in positions:
        candidate = table.candidate(int(p))
        assert (candidate.valid, candidate.feasible) == (bool(valid[p]), bool(feasible[p])), candidate.reasons
        if candidate.valid and candidate.job is not None:
            assert static[p] == static_memory_bytes(candidate.job)
        if feasible[p]:
            assert candidate.job is not None
            record = job_to_record(candidate.job)
            assert {c: _value(columns[c], k) for c in JOB_COLUMNS} == record
            k += 1


@pytest.mark.parametrize("name", sorted(TINY_SPACES))
def test_the_table_agrees_with_every_built_candidate_of_a_small_space(name: str) -> None:
    space = SearchSpace(SearchConfig.model_validate({**TINY_SPACES[name], "storage": "memory"}))
    table = SpaceTable(space)
    assert len(table) == space.size and rules.valid(table).any()
    _check(table, np.arange(len(table)))


@pytest.mark.parametrize("recipe", ["case_study_1_mtnlg.yaml", "case_study_3_compute_optimal.yaml"])
def test_the_table_agrees_with_built_candidates_of_the_case_studies(recipe: str) -> None:
    space = SearchSpace(load_config(EXAMPLES / recipe))
    table = SpaceTable.sampled(space, 20_000, seed=1)
    positions = np.random.default_rng(2).choice(len(table), size=min(len(table), 400), replace=False)
    feasible = np.flatnonzero(rules.feasible(table))
    _check(table, np.unique(np.concatenate([positions, feasible[:100]])))


def test_rows_params_and_positions_round_trip() -> None:
    space = SearchSpace(tiny_config())
    whole, sample = SpaceTable(space), SpaceTable.sampled(space, 100, seed=3)
    first = [p for _, p in zip(range(5), space.enumerate(), strict=False)]
    assert [whole.params(i) for i in range(5)] == first
    for position in range(len(sample)):
        row = sample.row_of(sample.params(position))
        assert row == sample.rows[position] and sample.positions(np.array([row]))[0] == position
    outside = np.setdiff1d(whole.rows, sample.rows)[:5]
    assert (sample.positions(outside) == -1).all()


def test_neighbour_rows_are_the_spaces_neighbours() -> None:
    space = SearchSpace(SearchConfig.model_validate({**TINY_SPACES["architectures"], "storage": "memory"}))
    table = SpaceTable(space)
    for position in (0, 17, len(table) // 2):
        candidate = table.candidate(position)
        expected = {n.key for n in space.neighbours(candidate)}
        got = {table.candidate(int(r)).key for r in table.neighbour_rows(int(table.rows[position]))}
        assert got == expected


def test_the_parameter_gather_knob_keeps_only_plans_megatron_accepts() -> None:
    space = SearchSpace(SearchConfig.model_validate({**TINY_SPACES["dense: parameter gather"],
                                                     "storage": "memory"}))
    table = SpaceTable(space)
    feasible = np.flatnonzero(rules.feasible(table))
    jobs = [table.candidate(int(p)).job for p in feasible]
    gathering = [j for j in jobs if j is not None and j.parallel.overlap_param_gather]
    assert gathering, "plans with the distributed optimizer and overlapped reduction may gather"
    assert all(j.shards_optimizer and j.parallel.overlap_grad_reduce for j in gathering)
