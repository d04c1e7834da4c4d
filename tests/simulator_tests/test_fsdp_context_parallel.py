"""Megatron-FSDP with context parallelism: the units shard over the data-parallel group WITH
context parallelism, dp x cp ranks (Megatron-LM `mcore_fsdp_adapter._init_dist_index`:
`get_data_parallel_group(with_context_parallel=True)`), as the distributed optimizer does."""

from __future__ import annotations

from typing import Any

import pytest

from simulator import job_from_dict, simulate
from simulator.costs.comm_groups import group_placements
from simulator.graph.blocks import build_graph
from simulator.graph.ops import CommGroup
from simulator.graph.params import layer_params
from simulator.job.validation import job_problems
from simulator.network.groups import data_parallel_placement
from simulator.simulate import clear_caches
from tests.simulator_tests.test_fsdp_graphs_presets import job


def cp_job(sharding: str | None, dp: int, cp: int) -> dict[str, Any]:
    data = job(sharding, dp=dp, parallel={"cp": cp})
    data["cluster"]["num_gpus"] = dp * cp
    data["training"]["global_batch_size"] = 4 * dp
    return data


def states(data: dict[str, Any]) -> Any:
    clear_caches()
    return simulate(job_from_dict(data)).stages[0].memory


@pytest.mark.parametrize("sharding", ["optim_grads", "optim_grads_params"])
def test_fsdp_with_context_parallelism_is_accepted(sharding: str) -> None:
    assert job_problems(job_from_dict(cp_job(sharding, dp=2, cp=2))) == []


def test_the_units_shard_their_states_over_dp_times_cp() -> None:
    """dp 2 x cp 4 shards a layer's gradients and weights eight ways, as dp 8 does: the same
    bytes of every sharded state."""
    for sharding in ("optim", "optim_grads", "optim_grads_params"):
        with_cp, dp_only = states(cp_job(sharding, dp=2, cp=4)), states(cp_job(sharding, dp=8, cp=1))
        for term in ("weights_bytes", "gradients_bytes", "optimizer_states_bytes",
                     "fsdp_unsharded_bytes"):
            assert getattr(with_cp, term) == pytest.approx(getattr(dp_only, term)), (sharding, term)


def test_context_parallelism_alone_shards_the_units() -> None:
    """dp 1 with cp 2: the group is the two cp ranks, so ZeRO-3 still gathers every layer."""
    layer = build_graph(job_from_dict(cp_job("optim_grads_params", dp=1, cp=2))).layer
    params = layer_params(job_from_dict(cp_job(None, dp=1, cp=2)).model).per_rank(1)
    fwd = [(c.kind.value, c.bytes) for c in layer.forward_comm if c.group is CommGroup.DP]
    assert fwd == [("all_gather", 2 * params)]
    one = states(cp_job("optim_grads_params", dp=1, cp=2))
    plain = states(cp_job(None, dp=1, cp=2))
    units = 8 * params
    assert one.weights_bytes == pytest.approx(plain.weights_bytes - 2 * units / 2)


def test_the_units_collectives_run_over_the_dp_times_cp_group() -> None:
    """The FSDP group is the distributed optimizer's reduction group, dp x cp ranks tp apart."""
    data = cp_job("optim_grads", dp=2, cp=4)
    data["parallel"]["tp"] = 2
    data["cluster"]["num_gpus"] = 16
    j = job_from_dict(data)
    where = group_placements(j)[CommGroup.DP]
    assert where == data_parallel_placement(j)
    assert where.size == 8


def test_a_slower_network_exposes_more_of_the_reduce_scatters_with_cp() -> None:
    fast = cp_job("optim_grads_params", dp=2, cp=2)
    slow = cp_job("optim_grads_params", dp=2, cp=2)
    slow["cluster"]["intra_node_bandwidth_GBps"] = 1.0
    clear_caches()
    assert simulate(job_from_dict(slow)).breakdown["fsdp_comm"] > \
        simulate(job_from_dict(fast)).breakdown["fsdp_comm"]
