"""The cluster's network as data: NVLink domains, one NIC per GPU, and a fat tree's switch tiers.

`cluster.topology` (job.specs.TopologySpec) describes it; `fabric(job)` resolves it into numbers
that placements read: the GPUs of one NVLink domain (`cluster.nvlink_domain`, else the hardware
file's, else the node), the network bandwidth behind each GPU, and each switch tier's size in
GPUs, oversubscription and per-hop latency. Without tiers, a non-blocking tree follows from the
switch radix R (Leiserson's fat tree with R-port switches, as in NVIDIA's DGX SuperPOD reference
designs): a leaf unit of R/2 nodes (one leaf switch per rail, rail-optimized), R^2/2 GPUs under
one spine layer, R^3/4 under a core layer; 64 ports (NVIDIA Quantum-2) give 256, 2,048 and
65,536 GPUs with 8-GPU nodes.

A group whose traffic climbs a tier whose switches are oversubscribed o:1 gets at most 1/o of
its links' bandwidth when every GPU under the switch sends up at once; `tier_bandwidth_factor`
says how much of that a traffic pattern actually pays (simulator.network.topology).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from simulator.job.specs import Job, TopologySpec


@dataclass(frozen=True)
class Tier:
    size: int  # GPUs under one switch (group) of this tier
    oversubscription: float
    hop_latency_s: float


@dataclass(frozen=True)
class Fabric:
    domain: int  # GPUs per NVLink domain
    gpus_per_node: int
    nic_Bps: float  # network bandwidth behind one GPU (its NIC, or its share of the node's)
    tiers: tuple[Tier, ...]
    collnet: bool  # in-network reduction (SHARP)

    def tier_of(self, a: int, b: int) -> int:
        """The lowest tier whose one switch holds GPUs `a` and `b`: -1 when they share an NVLink
        domain (no switch), len(tiers) - 1 at most."""
        if a // self.domain == b // self.domain:
            return -1
        for t, tier in enumerate(self.tiers):
            if a // tier.size == b // tier.size:
                return t
        return len(self.tiers) - 1

    def extra_hop_latency_s(self, tier: int) -> float:
        """Latency of the switches a message crosses beyond one leaf switch (NCCL's network
        latencies are measured through one): up and down every tier below `tier`."""
        return sum(2 * t.hop_latency_s for t in self.tiers[1:tier + 1])


DEFAULT_TOPOLOGY = TopologySpec()  # frozen: the non-blocking radix-64 tree


def fabric(job: Job) -> Fabric:
    return _fabric(job.cluster.topology or DEFAULT_TOPOLOGY, job.gpus_per_node, job.nvlink_domain,
                   job.inter_node_bandwidth_Bps)


@lru_cache(maxsize=256)
def _fabric(topo: TopologySpec, gpus_per_node: int, domain: int, node_Bps: float) -> Fabric:
    tiers = topo.tier_list(gpus_per_node)
    return Fabric(domain, gpus_per_node, node_Bps / gpus_per_node,
                  tuple(Tier(t.size, t.oversubscription, t.hop_latency_us * 1e-6) for t in tiers),
                  topo.collnet)
