"""Collective (kind, bytes, placement) -> seconds.

Analytic model: NCCL's ring all-reduce moves 2(n-1)/n of the buffer through every rank's link
(all-gather and reduce-scatter half of that), plus a per-step latency. When the group spans k
nodes with g members each it is hierarchical: the intra-node (NVLink) level and the inter-node
ring over the k nodes run pipelined, so the slower level bounds the time; the node's network
links (inter-node bandwidth per node) carry 2(k-1)/k of the buffer for every group of this kind
on the node, all communicating in the same phase. Point-to-point sends move the buffer once. Where measured
nccl-tests all-reduce tables exist for the hardware (intra-node, 2-8 GPUs), they replace the
analytic intra-node all-reduce (and all-gather / reduce-scatter as half of it), scaled by
`collective_table_scale`: nccl-tests time back-to-back launches on idle GPUs, while in training
each call also waits for the slowest rank's host and shares the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.job.enums import CollectiveKind
from simulator.job.specs import HardwareSpec
from simulator.network.alltoall import ALL_TO_ALL_KINDS, all_to_all_s
from simulator.network.nccl import NcclTable
from simulator.network.topology import Placement

# Fraction of an all-reduce's ring traffic each kind moves.
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

    def time(self, kind: CollectiveKind, nbytes: float, where: Placement) -> float:
        if nbytes <= 0 or where.size <= 1:
            return 0.0
        eff = self.hardware.efficiency
        if kind is CollectiveKind.SEND_RECV:
            return self._p2p(nbytes, where)
        if kind in ALL_TO_ALL_KINDS:  # simulator.network.alltoall
            return all_to_all_s(self.hardware, self.intra_bandwidth_Bps, self.inter_bandwidth_Bps,
                                kind, nbytes, where)
        share = TRAFFIC[kind]
        if not where.crosses_nodes and self.table is not None and self.table.covers(where.size):
            measured = self.table.all_reduce_s(where.size, nbytes)
            return share * measured * eff.collective_table_scale
        return share * self._ring_all_reduce(nbytes, where)

    def _ring_all_reduce(self, nbytes: float, where: Placement) -> float:
        eff = self.hardware.efficiency
        n = where.size
        volume = 2 * (n - 1) / n * nbytes
        intra = volume / (self.intra_bandwidth_Bps * eff.intra_bus_efficiency)
        if not where.crosses_nodes:
            return intra + 2 * (n - 1) * eff.intra_latency_s
        # hierarchical: each node's share of the buffer crosses the network in a ring over the
        # k nodes; every group of this kind on the node does the same at the same time
        k, g = where.nodes, where.ranks_per_node
        groups_per_node = where.sharing / g
        node_volume = 2 * (k - 1) / k * nbytes * groups_per_node
        inter = node_volume / (self.inter_bandwidth_Bps * eff.inter_bus_efficiency)
        local = 2 * (g - 1) / g * nbytes / (self.intra_bandwidth_Bps * eff.intra_bus_efficiency)
        return max(local, inter) + 2 * (g - 1) * eff.intra_latency_s + 2 * (k - 1) * eff.inter_latency_s

    def _p2p(self, nbytes: float, where: Placement) -> float:
        eff = self.hardware.efficiency
        if where.crosses_nodes:
            bw = self.inter_bandwidth_Bps / where.sharing
            latency = eff.inter_latency_s
        else:
            bw, latency = self.intra_bandwidth_Bps, eff.intra_latency_s
        return nbytes / (bw * eff.p2p_efficiency) + latency
