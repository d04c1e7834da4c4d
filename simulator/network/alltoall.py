"""All-to-all (kind, bytes, placement) -> seconds: MoE token dispatch and combine, Ulysses
context parallelism.

Every rank sends `nbytes` in total, an equal share to each of the n ranks of its group (itself
included: that share never leaves the GPU). Of the (n - 1)/n that leaves, the share addressed
to the g ranks of its own NVLink domain crosses NVLink, the share addressed to other domains
crosses the rank's part of the domain's network links (less what oversubscribed switch tiers
leave it, plus the latency of the extra switch hops) (every rank of the domain sends at the
same time: the node's inter-node bandwidth over its `sharing` GPUs; on a DGX one 400 Gb/s NIC
per GPU). Both run at once, so the slower bounds the time, plus one latency per level (NCCL
posts the n - 1 sends and receives of `ncclAllToAll` as one group).

Bus efficiencies: NCCL's all-to-all (Megatron's `alltoall` and `allgather` dispatchers, TE's
Ulysses attention) uses the hardware file's collective efficiencies (its own
`all_to_all_bus_efficiency` inside the domain where one was measured). DeepEP's kernels (`flex`)
reach a stated share of the links: on H800 (~160 GB/s NVLink, 400 Gb/s CX7 ~50 GB/s RDMA)
153-158 GB/s intranode and 43-58 GB/s internode bottleneck bandwidth with EP 8-64
(deepseek-ai/DeepEP docs/legacy.md, "Normal kernels with NVLink and RDMA forwarding"); on SM100
NVLink (900 GB/s) EP 8 reaches 726-740 GB/s (README, V2). The model takes the lower
intranode ratio of the two generations (726 / 900 = 0.81) and the lowest internode one
(43 / 50 = 0.86, whose "logical" bandwidth also counts local traffic).
"""

from __future__ import annotations

from simulator.job.enums import CollectiveKind
from simulator.job.specs import HardwareSpec
from simulator.network.topology import Placement

ALL_TO_ALL_KINDS = frozenset({CollectiveKind.ALL_TO_ALL, CollectiveKind.DEEPEP_ALL_TO_ALL})
DEEPEP_NVLINK_EFFICIENCY = 726 / 900
DEEPEP_RDMA_EFFICIENCY = 43 / 50


def all_to_all_s(hardware: HardwareSpec, intra_bandwidth_Bps: float, inter_bandwidth_Bps: float,
                 kind: CollectiveKind, nbytes: float, where: Placement) -> float:
    """Seconds of one all-to-all in which every rank of `where` sends `nbytes` in total."""
    n = where.size
    if nbytes <= 0 or n <= 1:
        return 0.0
    eff = hardware.efficiency
    deepep = kind is CollectiveKind.DEEPEP_ALL_TO_ALL
    nccl_eff = eff.all_to_all_bus_efficiency or eff.intra_bus_efficiency
    intra_eff = DEEPEP_NVLINK_EFFICIENCY if deepep else nccl_eff
    g = where.ranks_per_domain
    intra = (g - 1) / n * nbytes / (intra_bandwidth_Bps * intra_eff)
    if not where.crosses_domains:
        return intra + eff.intra_latency_s
    inter_eff = DEEPEP_RDMA_EFFICIENCY if deepep else eff.inter_bus_efficiency
    # the rank's share of its node's NICs, less what the oversubscribed tiers below the
    # highest one the group climbs leave it (simulator.network.topology)
    per_gpu = inter_bandwidth_Bps / where.sharing * where.tier_factor
    inter = (n - g) / n * nbytes / (per_gpu * inter_eff)
    return max(intra, inter) + eff.intra_latency_s + eff.inter_latency_s + where.hop_latency_s


def all_to_all_bytes_on_links(nbytes: float, where: Placement) -> tuple[float, float]:
    """(bytes over NVLink, bytes over the network) that one rank sends in the all-to-all."""
    n, g = where.size, where.ranks_per_domain
    if n <= 1:
        return 0.0, 0.0
    return (g - 1) / n * nbytes, (n - g) / n * nbytes
