"""Rank placement as Megatron does it (tp fastest, then dp, then pp): which groups leave an NVLink
domain (a node unless the cluster says otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import load_job
from simulator.network.topology import (
    boundaries_crossing_domains,
    dp_placement,
    embedding_placement,
    stage_boundary_crosses_domains,
    tp_placement,
)
from tests.conftest import make_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_mtnlg_tp_stays_in_node_dp_and_pp_cross_nodes():
    job = load_job(EXAMPLES / "mtnlg_530b.yaml")  # (tp, dp, pp) = (8, 12, 35), 8 GPUs per node
    tp, dp = tp_placement(job), dp_placement(job)
    assert (tp.size, tp.domains, tp.crosses_domains) == (8, 1, False)
    assert (dp.size, dp.ranks_per_domain, dp.domains) == (12, 1, 12)
    assert dp.sharing == 8  # every GPU of a node reduces its own dp group at the same time
    assert all(stage_boundary_crosses_domains(job, s) for s in range(34))
    assert embedding_placement(job).crosses_domains


@pytest.mark.parametrize(("tp", "dp", "gpn", "ranks_per_domain", "nodes"), [
    (2, 4, 8, 4, 1),  # tp*dp = 8: the dp group fills one node
    (4, 4, 8, 2, 2),  # two dp ranks per node, two nodes
    (1, 8, 4, 4, 2),
    (8, 2, 8, 1, 2),  # tp fills the node: every dp peer is on another node
])
def test_dp_group_lies_where_megatron_puts_it(tp, dp, gpn, ranks_per_domain, nodes):
    job = make_job(parallel={"tp": tp, "pp": 1, "dp": dp},
                   cluster={"num_gpus": tp * dp, "gpus_per_node": gpn},
                   training={"global_batch_size": 8 * dp})
    where = dp_placement(job)
    assert (where.size, where.ranks_per_domain, where.domains) == (dp, ranks_per_domain, nodes)


@pytest.mark.parametrize(("tp", "dp", "pp", "gpn", "crossing"), [
    (2, 2, 2, 8, []),  # 8 GPUs, one node
    (2, 2, 4, 4, [0, 1, 2]),  # each stage fills one node
    (1, 2, 4, 4, [1]),  # two stages per node
])
def test_pipeline_boundaries_cross_nodes_every_node_of_stages(tp, dp, pp, gpn, crossing):
    job = make_job(parallel={"tp": tp, "pp": pp, "dp": dp},
                   cluster={"num_gpus": tp * dp * pp, "gpus_per_node": gpn})
    assert [s for s in range(pp - 1) if stage_boundary_crosses_domains(job, s)] == crossing


def test_tp_group_larger_than_a_node_crosses_domains():
    job = make_job(parallel={"tp": 8, "pp": 1, "dp": 1}, cluster={"gpus_per_node": 4})
    where = tp_placement(job)
    assert (where.ranks_per_domain, where.domains, where.crosses_domains) == (4, 2, True)


@pytest.mark.parametrize(("tp", "pp", "dp", "gpus_per_node"), [
    (1, 8, 1, 8), (1, 8, 1, 2), (2, 4, 1, 8), (1, 4, 2, 4), (4, 2, 1, 2), (1, 2, 4, 8), (2, 8, 1, 4)])
def test_all_boundaries_at_once_agree_with_each_boundary(tp, pp, dp, gpus_per_node):
    """A pipeline of pp stages on nodes of `gpus_per_node` GPUs: stage s starts at rank
    s * tp * dp; a boundary crosses nodes when its two stages start on different nodes (the
    last boundary leads back to stage 0)."""
    job = make_job(model={"num_layers": 8}, training={"global_batch_size": 8 * dp},
                   parallel={"tp": tp, "pp": pp, "dp": dp},
                   cluster={"num_gpus": tp * pp * dp, "gpus_per_node": gpus_per_node})
    start = [s * tp * dp // min(gpus_per_node, tp * pp * dp) for s in range(pp)]
    expected = [start[s] != start[(s + 1) % pp] for s in range(pp)]
    assert boundaries_crossing_domains(job).tolist() == expected
    assert expected == [stage_boundary_crosses_domains(job, s) for s in range(pp)]
