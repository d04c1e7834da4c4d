"""Collective (kind, bytes, placement) -> seconds: one cost function per `CollectiveKind`.

`NetworkModel.time` is the single dispatch point (`COSTS`): all-reduce, all-gather and
reduce-scatter cost what NCCL's tuner predicts for the algorithm and protocol it would choose
(simulator.network.algorithms: ring, tree, NVLS, NVLS-Tree, CollNet, PAT), on the links the
group's placement gives it (simulator.network.topology): NVLink inside its domain; across
domains, its members' NICs (the node's network bandwidth over the GPUs that drive it at the same
time, as every group of a kind communicates at once), times the share oversubscribed tiers leave
it, plus the switch hops' latency. Where measured nccl-tests all-reduce tables exist for the
hardware (one domain, 2-8 GPUs), they replace the analytic all-reduce inside a domain
(all-gather and reduce-scatter as half of it), scaled by `collective_table_scale`: nccl-tests
time back-to-back launches on idle GPUs. Point-to-point sends move the buffer once.

A new kind (all-to-all) adds its cost function to `COSTS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.job.enums import CollectiveKind, GpuArchitecture
from simulator.job.specs import HardwareSpec
from simulator.network.algorithms import RING_SIMPLE_NET_S, RING_SIMPLE_NVLINK_S, Choice, Links, choose
from simulator.network.alltoall import all_to_all_s
from simulator.network.nccl import NcclTable
from simulator.network.topology import Placement

# Fraction of an all-reduce's traffic each kind moves (for the measured all-reduce tables).
TRAFFIC = {
    CollectiveKind.ALL_REDUCE: 1.0,
    CollectiveKind.ALL_GATHER: 0.5,
    CollectiveKind.REDUCE_SCATTER: 0.5,
}


@dataclass(frozen=True)
class NetworkModel:
    hardware: HardwareSpec
    intra_bandwidth_Bps: float  # per GPU, per direction (NVLink)
    inter_bandwidth_Bps: float  # per node
    table: NcclTable | None = None
    collnet: bool = False  # the switches reduce in the network (SHARP): NCCL's CollNet

    def time(self, kind: CollectiveKind, nbytes: float, where: Placement) -> float:
        if nbytes <= 0 or where.size <= 1:
            return 0.0
        return COSTS[kind](self, kind, nbytes, where)

    def links(self, where: Placement) -> Links:
        """What a collective of `where` sees, per rank (efficiencies applied)."""
        eff = self.hardware.efficiency
        inter = (self.inter_bandwidth_Bps / where.sharing * where.ranks_per_domain
                 * eff.inter_bus_efficiency * where.tier_factor)
        return Links(where.size, where.domains, self.intra_bandwidth_Bps * eff.intra_bus_efficiency,
                     inter, self.hardware.nvlink_sharp, self.collnet,
                     eff.intra_latency_s / RING_SIMPLE_NVLINK_S,
                     eff.inter_latency_s / RING_SIMPLE_NET_S, where.hop_latency_s,
                     self.hardware.architecture is GpuArchitecture.BLACKWELL)

    def choice(self, kind: CollectiveKind, nbytes: float, where: Placement) -> Choice:
        """NCCL's (algorithm, protocol) for this collective and its predicted cost."""
        return choose(kind, self.links(where), nbytes)


def _collective(net: NetworkModel, kind: CollectiveKind, nbytes: float, where: Placement) -> float:
    table = net.table
    if not where.crosses_domains and table is not None and table.covers(where.size):
        measured = table.all_reduce_s(where.size, nbytes)
        return TRAFFIC[kind] * measured * net.hardware.efficiency.collective_table_scale
    return net.choice(kind, nbytes, where).seconds


def _send_recv(net: NetworkModel, kind: CollectiveKind, nbytes: float, where: Placement) -> float:
    eff = net.hardware.efficiency
    if where.crosses_domains:
        bw = net.inter_bandwidth_Bps / where.sharing * where.tier_factor
        latency = eff.inter_latency_s + where.hop_latency_s
    else:
        bw, latency = net.intra_bandwidth_Bps, eff.intra_latency_s
    return nbytes / (bw * eff.p2p_efficiency) + latency


def _all_to_all(net: NetworkModel, kind: CollectiveKind, nbytes: float, where: Placement) -> float:
    """NCCL's all-to-all (MoE dispatch, Ulysses) or DeepEP's kernels (simulator.network.alltoall)."""
    return all_to_all_s(net.hardware, net.intra_bandwidth_Bps, net.inter_bandwidth_Bps, kind, nbytes,
                        where)


COSTS: dict[CollectiveKind, Callable[[NetworkModel, CollectiveKind, float, Placement], float]] = {
    CollectiveKind.ALL_REDUCE: _collective,
    CollectiveKind.ALL_GATHER: _collective,
    CollectiveKind.REDUCE_SCATTER: _collective,
    CollectiveKind.SEND_RECV: _send_recv,
    CollectiveKind.ALL_TO_ALL: _all_to_all,
    CollectiveKind.DEEPEP_ALL_TO_ALL: _all_to_all,
}
