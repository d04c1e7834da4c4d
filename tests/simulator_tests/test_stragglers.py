"""The expected slowest rank (`scale_loss`) against its formulas, and the NIC shared by the
overlapped data-parallel reduction and the pipeline's sends."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator import job_from_dict, simulate
from simulator.timeline.stragglers import expected_max, transient_fraction
from simulator.timeline.tail import nic_share_left_by_p2p
from tests.conftest import job_dict


def test_expected_maximum_of_normals_matches_known_values():
    """E[max] of 2 and 3 standard normals are 1/sqrt(pi) and 3/(2 sqrt(pi)); large n by sampling."""
    assert expected_max(1) == 0.0
    assert expected_max(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    assert expected_max(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-6)
    rng = np.random.default_rng(0)
    sampled = rng.standard_normal((2000, 1024)).max(axis=1).mean()
    assert expected_max(1024) == pytest.approx(sampled, abs=0.02)
    assert all(expected_max(n) < expected_max(2 * n) for n in (8, 512, 8192))


def _job(gpus: int, jitter: dict[str, float] | None = None, **parallel: object):
    par = {"tp": 2, "pp": 2, "dp": gpus // 4, **parallel}
    cluster = {"num_gpus": gpus, "gpus_per_node": 8}
    if jitter is not None:
        cluster["jitter"] = jitter
    return job_from_dict(job_dict(parallel=par, cluster=cluster,
                                  training={"global_batch_size": 4 * (gpus // 4)}))


def test_persistent_term_is_sigma_times_expected_max_of_the_gpus():
    """Only GPU speed varies: scale_loss = cv * E[max of N] * GPU-bound critical path."""
    job = _job(64, {"gpu_speed_cv": 0.02, "kernel_time_cv": 0.0})
    r = simulate(job)
    gpu_bound = sum(r.breakdown[k] for k in ("forward", "backward", "recompute",
                                             "pipeline_bubble", "optimizer"))
    assert r.breakdown["scale_loss"] == pytest.approx(0.02 * expected_max(64) * gpu_bound)
    assert r.iteration_time_s == pytest.approx(sum(r.breakdown.values()))
    none = simulate(_job(64, {"gpu_speed_cv": 0.0, "kernel_time_cv": 0.0}))
    assert none.breakdown["scale_loss"] == 0.0
    assert none.iteration_time_s == pytest.approx(r.iteration_time_s - r.breakdown["scale_loss"])


def test_transient_term_waits_for_the_slowest_of_each_synchronizing_group():
    """Only kernels vary: per second of layer compute, cv * (e(tp) sqrt(I S2) + e(2) sqrt(2 S2 /
    layers per chunk) + e(dp) sqrt(S2 / layers of an iteration)) / T."""
    job = _job(16, {"gpu_speed_cv": 0.0, "kernel_time_cv": 0.03})
    r = simulate(job)
    assert r.costs is not None and r.graph is not None
    layer, block = r.costs.layer, r.graph.layer
    s2, t = layer.kernel_square_s2, layer.forward + layer.backward + layer.recompute
    syncs = len(block.forward_comm) + len(block.backward_comm) + len(block.recompute_comm)
    per_chunk = job.model.num_layers / 2
    expected = (expected_max(2) * math.sqrt(syncs * s2) + expected_max(2) * math.sqrt(2 * s2 / per_chunk)
                + expected_max(4) * math.sqrt(s2 / (per_chunk * job.num_microbatches))) / t
    assert transient_fraction(job, [(job.model.num_layers, layer, block)]) == pytest.approx(expected)
    assert r.scale_loss is not None and r.scale_loss.persistent_s == 0.0
    assert r.scale_loss.transient_s > 0


def test_one_gpu_loses_nothing_and_more_gpus_lose_more():
    one = job_from_dict(job_dict(parallel={"tp": 1, "pp": 1, "dp": 1}, cluster={"num_gpus": 1},
                                 training={"global_batch_size": 4}))
    assert simulate(one).breakdown["scale_loss"] == 0.0
    losses = [simulate(_job(n)).breakdown["scale_loss"] / simulate(_job(n)).iteration_time_s
              for n in (8, 64, 512)]
    assert losses[0] < losses[1] < losses[2]


def test_overlapped_dp_reduction_shares_the_nic_with_pipeline_sends():
    """Stages on different nodes and dp across nodes: the reduction keeps 1 - u of the NIC, u the
    pipeline's send time per backward over the backward's duration (at least half)."""
    job = job_from_dict(job_dict(
        parallel={"tp": 8, "pp": 2, "dp": 2, "overlap_grad_reduce": True},
        cluster={"num_gpus": 32, "gpus_per_node": 8, "inter_node_bandwidth_Gbps": 100},
        training={"global_batch_size": 16}))
    r = simulate(job)
    assert r.timeline is not None
    from simulator.simulate import default_network
    share = nic_share_left_by_p2p(job, r.timeline, default_network(job))
    assert (share < 1).all() and (share >= 0.5).all()
    alone = job_from_dict(job_dict(
        parallel={"tp": 8, "pp": 1, "dp": 2, "overlap_grad_reduce": True},
        cluster={"num_gpus": 16, "gpus_per_node": 8, "inter_node_bandwidth_Gbps": 100},
        training={"global_batch_size": 16}))
    r1 = simulate(alone)
    assert r1.timeline is not None
    assert (nic_share_left_by_p2p(alone, r1.timeline, default_network(alone)) == 1).all()


def test_trace_shows_the_scale_loss_span(tmp_path):
    from simulator.report.trace import chrome_trace
    r = simulate(_job(64))
    spans = [e for e in chrome_trace(r)["traceEvents"] if e.get("cat") == "scale_loss"]
    assert spans and spans[0]["args"]["ranks"] == 64
    end = max(e["ts"] + e["dur"] for e in chrome_trace(r)["traceEvents"] if e["ph"] == "X")
    assert end == pytest.approx(r.iteration_time_s * 1e6, rel=1e-9)
