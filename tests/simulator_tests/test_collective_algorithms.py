"""Each collective algorithm's cost on a small tree, against formulas written out here from NCCL's
tuning model (src/graph/tuning.cc @ 5067397c: base and per-step hardware latencies in us, bus
bandwidth refinements, bus -> algorithm bandwidth) and from the fat tree's link counts: which
algorithm NCCL picks, what it costs, and what the placement on an oversubscribed tree leaves a
group."""

from __future__ import annotations

import math

import pytest

from simulator import job_from_dict
from simulator.job.enums import CollectiveKind
from simulator.network.algorithms import Algo, Links, Proto, candidates, choose
from simulator.network.collectives import NetworkModel
from simulator.network.topology import Placement, dp_placement, pp_placement, tp_placement
from tests.conftest import job_dict, make_job

AR, AG = CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER
US = 1e-6
B_NV, B_NET = 240e9, 20e9  # bytes/s per rank: NVLink; the group's network share


def _links(n: int, k: int, **kw: object) -> Links:
    return Links(n, k, B_NV, B_NET if k > 1 else 0.0, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_simple_in_one_domain(n):
    """8.4 us base + 2(n-1) NVLink steps of 3.4 us; bus bandwidth x n / 2(n-1)."""
    nbytes = 1e9
    lat, bw = candidates(AR, _links(n, 1), nbytes)[(Algo.RING, Proto.SIMPLE)]
    assert lat == pytest.approx((8.4 + 2 * (n - 1) * 3.4) * US)
    assert bw == pytest.approx(B_NV * n / (2 * (n - 1)))
    # all-gather of the same (gathered) buffer: n - 1 steps, half the time at large sizes
    lat_ag, bw_ag = candidates(AG, _links(n, 1), nbytes)[(Algo.RING, Proto.SIMPLE)]
    assert lat_ag == pytest.approx((8.4 + (n - 1) * 3.4) * US)
    assert bw_ag == pytest.approx(B_NV * n / (n - 1))


def test_ring_across_domains_pays_network_steps_and_the_plateau():
    """k = 4 domains of g = 8: 2(n-1) steps, 2(k-1) of them on the network at 14 us, the others at
    max(3.4, 3 x 1 us network post overhead); x1.4 for the multi-node ring plateau; the bus is the
    slower of NVLink and the network."""
    n, k = 32, 4
    lat, bw = candidates(AR, _links(n, k), 1e9)[(Algo.RING, Proto.SIMPLE)]
    steps, net = 2 * (n - 1), 2 * (k - 1)
    assert lat == pytest.approx(1.4 * (8.4 + (steps - net) * 3.4 + net * 14.0) * US)
    assert bw == pytest.approx(min(B_NV, B_NET) * n / steps)


def test_ring_ll_is_capped_by_nccl_s_ll_bandwidth():
    lat, bw = candidates(AR, _links(16, 16), 1e6)[(Algo.RING, Proto.LL)]
    # one rank per domain: every network step costs the tree's LL latency (5 us)
    assert lat == pytest.approx((6.6 + 2 * 15 * 5.0) * US)
    assert bw == pytest.approx(min(20.4e9, 0.5 * B_NET) * 16 / 30)


def test_tree_all_reduce_latency_is_logarithmic_in_domains():
    """Double binary tree: 2 ((ppn - 1) NVLink + log2(k) network) steps; bus x 0.92 x
    NCCL's size correction, halved."""
    n, k, nbytes = 64, 64, 1 << 20  # log2(1 MiB / 64) = 14: Simple correction 0.5
    lat, bw = candidates(AR, _links(n, k), nbytes)[(Algo.TREE, Proto.SIMPLE)]
    assert lat == pytest.approx((8.4 + 2 * (0 * 4.0 + 6 * 14.0)) * US)
    assert bw == pytest.approx(B_NET * 0.92 * 0.5 * 0.5)


def test_nccl_picks_tree_for_small_and_ring_for_large_messages_at_scale():
    links = _links(512, 512)
    assert choose(AR, links, 4e3).algo is Algo.TREE
    assert choose(AR, links, 4e9).algo is Algo.RING
    # and the chosen time is the least of all candidates
    for nbytes in (4e3, 4e6, 4e9):
        best = min(lat + nbytes / bw for lat, bw in candidates(AR, links, nbytes).values())
        assert choose(AR, links, nbytes).seconds == pytest.approx(best)


def test_nvls_in_one_domain():
    """NVLink SHARP: latency 25 us; 0.85 of NVLink doubled for all-reduce, bounded by the NVLink
    itself, then x n / 2(n-1); absent without NVLink SHARP."""
    n = 8
    lat, bw = candidates(AR, _links(n, 1, nvls=True), 1e9)[(Algo.NVLS, Proto.SIMPLE)]
    assert lat == pytest.approx(25.0 * US)
    assert bw == pytest.approx(min(2 * 0.85 * B_NV, B_NV) * n / (2 * (n - 1)))
    assert (Algo.NVLS, Proto.SIMPLE) not in candidates(AR, _links(n, 1), 1e9)
    # all-gather: 0.85 (ppn - 1) / ppn of NVLink, not converted
    lat, bw = candidates(AG, _links(n, 1, nvls=True), 1e9)[(Algo.NVLS, Proto.SIMPLE)]
    assert bw == pytest.approx(0.85 * B_NV * (n - 1) / n)


def test_nvls_tree_across_domains_and_nvls_only_with_collnet():
    n, k = 32, 4
    plain = candidates(AR, _links(n, k, nvls=True), 1e9)
    assert (Algo.NVLS, Proto.SIMPLE) not in plain  # NVLS across domains needs CollNet
    lat, bw = plain[(Algo.NVLS_TREE, Proto.SIMPLE)]
    assert lat == pytest.approx((25.0 + 2 * 2 * 20.9) * US)
    assert bw == pytest.approx(min(2 * 0.85 * B_NV, B_NET) * n / (2 * (n - 1)))
    lat, _ = candidates(AR, _links(n, k, nvls=True, collnet=True), 1e9)[(Algo.NVLS, Proto.SIMPLE)]
    assert lat == pytest.approx((25.0 + 18.0) * US)


def test_collnet_direct_and_chain():
    n, k = 32, 4  # 8 ranks per domain
    c = candidates(AR, _links(n, k, collnet=True), 1e9)
    lat, bw = c[(Algo.COLLNET_DIRECT, Proto.SIMPLE)]
    assert lat == pytest.approx((2 * (1 * 3.7 + 7 * 0.4) + 31.0) * US)
    assert bw == pytest.approx(min(B_NV, B_NET))
    lat, bw = c[(Algo.COLLNET_CHAIN, Proto.SIMPLE)]
    assert lat == pytest.approx((2 * 7 * 2.8 + 30.0) * US)
    assert (Algo.COLLNET_DIRECT, Proto.SIMPLE) not in candidates(AR, _links(n, k), 1e9)


def test_pat_all_gather_with_one_rank_per_domain():
    n = 16
    lat, bw = candidates(AG, _links(n, n), 1e6)[(Algo.PAT, Proto.SIMPLE)]
    assert lat == pytest.approx((8.0 + 4 * 14.0 / 3.5 + 16 * 2.8) * US)
    assert bw == pytest.approx(0.75 * B_NET)
    assert (Algo.PAT, Proto.SIMPLE) not in candidates(AG, _links(32, 4), 1e6)


# ------------------------------------------------------------------ placement on a small tree

SMALL_TREE = {"tiers": [{"size": 4, "oversubscription": 4.0, "hop_latency_us": 1.0},
                        {"size": 16, "oversubscription": 1.0, "hop_latency_us": 2.0}]}


def _tree_job(tp: int, pp: int, dp: int, topology: dict[str, object] = SMALL_TREE):
    """16 GPUs, 2 per node (NVLink domain), leaves of 2 nodes oversubscribed 4:1, one spine."""
    return job_from_dict(job_dict(
        model={"num_layers": 8}, training={"global_batch_size": 8 * dp},
        parallel={"tp": tp, "pp": pp, "dp": dp},
        cluster={"num_gpus": 16, "gpus_per_node": 2, "inter_node_bandwidth_Gbps": 400,
                 "topology": topology}))


def test_ring_leaving_an_oversubscribed_leaf_keeps_domains_per_leaf_over_o():
    """dp = 8 ranks 2 GPUs apart: one per domain, 2 per leaf; every GPU's ring leaves its leaf:
    min(1, 2 / 4) of the NIC; the hops: up and down the spine tier beyond one leaf switch."""
    job = _tree_job(tp=2, pp=1, dp=8)
    where = dp_placement(job)
    assert (where.size, where.ranks_per_domain, where.domains, where.tier) == (8, 1, 8, 1)
    assert where.tier_factor == pytest.approx(0.5)
    assert where.hop_latency_s == pytest.approx(2 * 2.0 * US)
    net = NetworkModel(job.hardware.model_copy(update={"nccl_tables": None}), 150e9, 50e9)
    eff = job.hardware.efficiency
    links = net.links(where)
    assert links.inter_Bps == pytest.approx(50e9 / 2 * 1 * eff.inter_bus_efficiency * 0.5)
    nbytes = 1e9
    lat, bw = candidates(AR, links, nbytes)[(Algo.RING, Proto.SIMPLE)]
    inter_step = 14.0 * US + 4.0 * US  # NCCL's network step + the extra hops
    assert lat == pytest.approx(1.4 * (8.4 * US + 14 * inter_step))
    assert bw == pytest.approx(links.inter_Bps * 8 / 14)


def test_groups_inside_a_leaf_or_a_domain_pay_no_oversubscription():
    tp = tp_placement(_tree_job(tp=2, pp=1, dp=8))
    assert (tp.domains, tp.tier, tp.tier_factor) == (1, -1, 1.0)
    dp = dp_placement(_tree_job(tp=1, pp=4, dp=4))  # 4 GPUs in a row: one leaf
    assert (dp.domains, dp.tier, dp.tier_factor) == (2, 0, 1.0)


def test_pipeline_boundary_out_of_an_oversubscribed_leaf():
    """Stages of tp x dp = 2 GPUs: at a leaf boundary 2 of the leaf's 4 GPUs send out of it at
    once: min(1, 4 / (4 x 2)); inside a leaf, full rate."""
    job = _tree_job(tp=1, pp=8, dp=2)
    crossing = pp_placement(job, 1)  # GPUs 2-3 -> 4-5: next leaf
    assert (crossing.tier, crossing.tier_factor) == (1, pytest.approx(0.5))
    inside = pp_placement(job, 0)  # GPUs 0-1 -> 2-3: same leaf, other node
    assert (inside.tier, inside.tier_factor) == (0, 1.0)


def test_bad_topology_gets_one_line_naming_the_field():
    from simulator.errors import ConfigError
    from simulator.job.validation import validate_job
    with pytest.raises(ConfigError, match="top tier holds 8 GPUs < num_gpus=16"):
        validate_job(_tree_job(1, 1, 16, {"tiers": [{"size": 4}, {"size": 8}]}))
    with pytest.raises(ConfigError, match="whole number of nodes"):
        validate_job(_tree_job(1, 1, 16, {"tiers": [{"size": 3}, {"size": 16}]}))
    with pytest.raises(ConfigError, match="its oversubscription must be 1"):
        validate_job(_tree_job(1, 1, 16, {"tiers": [{"size": 4}, {"size": 16, "oversubscription": 2}]}))
    with pytest.raises(ConfigError, match="tiers or switch_radix"):
        validate_job(_tree_job(1, 1, 16, {"tiers": [{"size": 16}], "switch_radix": 32}))
    with pytest.raises(ConfigError, match="nics_per_node needs nic_bandwidth_Gbps"):
        validate_job(_tree_job(1, 1, 16, {"nics_per_node": 4}))
    with pytest.raises(ConfigError, match="nvlink_domain=3"):
        validate_job(make_job(cluster={"gpus_per_node": 2, "nvlink_domain": 3}))


def test_an_nvlink_domain_larger_than_a_node_keeps_tp_on_nvlink():
    """NVL72-style: 4 GPUs per node, 16 per NVLink domain; tp 8 spans two nodes, one domain."""
    job = make_job(parallel={"tp": 8, "pp": 1, "dp": 2}, training={"global_batch_size": 8},
                   cluster={"num_gpus": 16, "gpus_per_node": 4, "nvlink_domain": 16})
    tp = tp_placement(job)
    assert (tp.ranks_per_domain, tp.domains, tp.crosses_domains) == (8, 1, False)
    node_bound = make_job(parallel={"tp": 8, "pp": 1, "dp": 2}, training={"global_batch_size": 8},
                          cluster={"num_gpus": 16, "gpus_per_node": 4})
    assert tp_placement(node_bound).crosses_domains


def test_point_to_point_moves_the_buffer_once():
    job = make_job()
    net = NetworkModel(job.hardware, 300e9, 200e9)
    eff = job.hardware.efficiency
    across = Placement(2, 1, 2, 8, 1, 0.5, 3 * US)
    expected = 64e6 / (200e9 / 8 * 0.5 * eff.p2p_efficiency) + eff.inter_latency_s + 3 * US
    assert net.time(CollectiveKind.SEND_RECV, 64e6, across) == pytest.approx(expected, rel=1e-12)
    inside = Placement(2, 2, 1, 2)
    expected = 64e6 / (300e9 * eff.p2p_efficiency) + eff.intra_latency_s
    assert net.time(CollectiveKind.SEND_RECV, 64e6, inside) == pytest.approx(expected, rel=1e-12)
    assert math.isfinite(expected)
