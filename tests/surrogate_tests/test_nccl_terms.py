"""The closed form's collectives cost what the simulator's NCCL model costs (surrogate.nccl_terms
against simulator.network.algorithms.choose): inside one NVLink domain, and across domains
for the ring and the tree, on GPUs of three generations. A ring of Simple steps alone, as the
closed form charged until schema 24, put B200's tp collectives (21.6 us per step) at 2.7x the
LL ring NCCL picks, and an expert-gradient all-reduce over 1,024 ranks at 6x NCCL's tree."""

from __future__ import annotations

import pytest

from simulator.job.enums import CollectiveKind
from simulator.network.algorithms import Links, choose
from surrogate.hardware import catalog_hardware
from surrogate.nccl_terms import crossing_ring_s, crossing_tree_s, domain_all_reduce_s, domain_ring_s
from surrogate.physics import HW_FIELDS, Hardware, hardware_vector

GPUS = ("b200", "h100-sxm-80gb", "gb200")
SIZES = (1e4, 1e6, 8e6, 64e6, 1e9)


def _hardware(gpu: str) -> tuple[Hardware, float, object]:
    spec = catalog_hardware(gpu)
    vector = hardware_vector(spec)
    return (Hardware(*(vector[k] for k in HW_FIELDS)),
            spec.nvlink_bandwidth_GBps * 1e9 * spec.efficiency.intra_bus_efficiency, spec)


def _links(spec: object, n: int, domains: int, intra: float, inter: float) -> Links:
    e = spec.efficiency  # type: ignore[attr-defined]
    return Links(n, domains, intra, inter, spec.nvlink_sharp, False,  # type: ignore[attr-defined]
                 e.intra_latency_s / 3.4e-6, e.inter_latency_s / 14e-6, 0.0,
                 spec.architecture.value == "blackwell")  # type: ignore[attr-defined]


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("n", [2, 4, 8])
def test_inside_a_domain_each_collective_costs_nccls_choice(gpu: str, n: int) -> None:
    hw, bus, spec = _hardware(gpu)
    links = _links(spec, n, 1, bus, 1e12)
    for nbytes in SIZES:
        all_reduce = choose(CollectiveKind.ALL_REDUCE, links, nbytes).seconds
        gather = choose(CollectiveKind.ALL_GATHER, links, nbytes).seconds
        assert domain_all_reduce_s(hw, nbytes, float(n), bus, 1.0) == pytest.approx(all_reduce, rel=1e-9)
        assert domain_ring_s(hw, nbytes, float(n), float(n - 1), bus, 1.0) == pytest.approx(gather, rel=1e-9)


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize(("n", "per_domain"), [(16, 8), (1024, 8), (256, 2), (64, 1), (4096, 4)])
def test_across_domains_the_ring_and_the_tree_cost_nccls_choice(gpu: str, n: int, per_domain: int) -> None:
    """Reduce-scatters take the ring (n - 1 steps, k - 1 over the network); all-reduces the
    faster of the ring and the tree (or NVLS-Tree), per call of `calls`."""
    hw, bus, spec = _hardware(gpu)
    k = n // per_domain
    for inter in (40e9, 320e9):
        links = _links(spec, n, k, bus, inter)
        for nbytes in SIZES:
            for calls in (1.0, 7.0):
                per_call = nbytes / calls
                scatter = calls * choose(CollectiveKind.REDUCE_SCATTER, links, per_call).seconds
                all_reduce = calls * choose(CollectiveKind.ALL_REDUCE, links, per_call).seconds
                ring_rs = crossing_ring_s(hw, nbytes, float(n), float(k), n - 1.0, k - 1.0,
                                          min(bus, inter), calls, 0.0)
                ring_ar = crossing_ring_s(hw, nbytes, float(n), float(k), 2.0 * (n - 1), 2.0 * (k - 1),
                                          min(bus, inter), calls, 1.0)
                tree = crossing_tree_s(hw, nbytes, float(n), float(k), bus, inter, calls)
                assert ring_rs == pytest.approx(scatter, rel=1e-9)
                assert min(ring_ar, tree) == pytest.approx(all_reduce, rel=1e-9)
