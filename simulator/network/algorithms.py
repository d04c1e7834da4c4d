"""NCCL's collective algorithms and protocols, costed and chosen the way NCCL's tuner does.

Transcribed from NCCL's own model, `src/graph/tuning.cc` (NVIDIA/nccl @ 5067397c, 2026-06:
`ncclTopoTuneModel` and `ncclTopoGetAlgoTime`) and the selection in `src/enqueue.cc`
(`updateCollCostTable`, `topoGetAlgoInfo`: the (algorithm, protocol) of least predicted time).
Each candidate costs `latency + bytes / bandwidth`, with `bytes` the whole buffer (for
all-gather and reduce-scatter the gathered one: `ncclFuncMaxSendRecvCount`).

- Ring (LL, LL128, Simple): bus bandwidth = the slowest link a ring crosses per rank; algorithm
  bandwidth = bus x n / steps (2(n-1) steps for all-reduce, n-1 otherwise); latency = a base plus
  one hardware latency per step, network steps costing the network's (2(k-1) of them over k
  NVLink domains) and NVLink steps at least the host's 3 x 1 us network post overhead.
- Tree (all-reduce; double binary tree across domains, chain inside): bus x 0.92 (LL: / 3.8;
  LL128: 7/9 in one domain, 120/128 across), algorithm bandwidth half of it, NCCL's size
  correction table; latency 2 ((ranks per domain - 1) intra + log2(k) network).
- NVLS (NVLink SHARP, Simple; Hopper and later, `hardware.nvlink_sharp`): in-switch reduction at
  nvlsEfficiency (0.85 Hopper, 0.74 Blackwell: `nvlsEfficiency[compCapIndex]`) of the NVLink
  bandwidth, doubled for all-reduce (two operations pipelined); across domains only with CollNet.
  NVLS-Tree: NVLS inside, tree across.
- CollNet Direct / Chain (SHARP in the network switches, `topology.collnet`; all-reduce): every
  byte crosses each NIC once; latency of one network step.
- PAT (all-gather / reduce-scatter with one rank per domain): 0.75 of the bus bandwidth,
  logarithmic network latency plus 2.8 us per rank.

Deliberate simplifications, each small next to the terms kept: channel counts are not modelled
(NCCL's per-channel caps, which bind only below ~16 channels, are left out; the ring plateau
factor applies from 64 bytes per rank and channel with 16 channels); CPU-dependent constants
take an x86 Intel host; the LL bandwidth ceiling of one domain takes Blackwell's on a Blackwell
GPU, Hopper's where the hardware has NVLink SHARP, else Ampere's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from simulator.job.enums import CollectiveKind


class Algo(StrEnum):
    RING = "ring"
    TREE = "tree"
    NVLS = "nvls"
    NVLS_TREE = "nvls_tree"
    COLLNET_DIRECT = "collnet_direct"
    COLLNET_CHAIN = "collnet_chain"
    PAT = "pat"


class Proto(StrEnum):
    LL = "LL"
    LL128 = "LL128"
    SIMPLE = "Simple"


US = 1e-6
# tuning.cc ncclTunerConstantsDefaults (microseconds): base latency per (algorithm, protocol)
BASE_US = {Algo.TREE: (6.8, 14.0, 8.4), Algo.RING: (6.6, 14.0, 8.4), Algo.PAT: (8.0, 8.0, 8.0)}
# hardware latency per step: NVLink and network (LL, LL128, Simple)
NVLINK_US = {Algo.TREE: (0.6, 1.25, 4.0), Algo.RING: (0.6, 1.9, 3.4),
             Algo.COLLNET_DIRECT: (0, 0, 3.7), Algo.COLLNET_CHAIN: (0, 0, 2.8),
             Algo.NVLS: (0, 0, 25.0), Algo.NVLS_TREE: (0, 0, 25.0), Algo.PAT: (0, 0, 4.0)}
NET_US = {Algo.TREE: (5.0, 8.5, 14.0), Algo.RING: (2.7, 4.0, 14.0),
          Algo.COLLNET_DIRECT: (0, 0, 31.0), Algo.COLLNET_CHAIN: (0, 0, 30.0),
          Algo.NVLS: (0, 0, 18.0), Algo.NVLS_TREE: (0, 0, 20.9), Algo.PAT: (0, 0, 14.0)}
PROTOS = (Proto.LL, Proto.LL128, Proto.SIMPLE)
# the two per-step latencies that `Efficiency.intra_latency_s` / `inter_latency_s` name (Ring,
# Simple); every NVLink (network) latency of the table scales by the calibrated ratio to them
RING_SIMPLE_NVLINK_S = 3.4e-6
RING_SIMPLE_NET_S = 14.0e-6
NET_OVERHEAD_US = 1.0  # getNetOverhead, x86 Intel host; x3 for Simple
# llMaxBws (GB/s): one domain by GPU generation; across domains, Intel host row by domain count
LL_MAX_ONE_DOMAIN = {False: 87.7e9, True: 141.0e9}  # Ampere / Hopper
LL_MAX_ONE_DOMAIN_BLACKWELL = 2 * 141.0e9
LL_MAX_ACROSS = (39.0e9, 39.0e9, 20.4e9)
NVLS_EFFICIENCY = 0.85  # nvlsEfficiency, Hopper
NVLS_EFFICIENCY_BLACKWELL = 0.74
CHANNELS = 16
PAT_PER_RANK_US = 2.8  # PAT's latency per rank (tuning.cc)
RING_PLATEAU = 1.4  # the ring's Simple all-reduce latency plateau across domains (Ampere and later)
# treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B to 256 MB
TREE_CORRECTION = {
    Proto.LL: (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9,
               1.0, 1.0, 1.0, 1.0, 1.0),
    Proto.LL128: (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9,
                  .9, .9, .9, 1.0, 1.0, 1.0),
    Proto.SIMPLE: (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7,
                   .7, .8, .9, .9, .9),
}


@dataclass(frozen=True)
class Links:
    """What one collective of `n` ranks over `domains` NVLink domains sees, per rank: the NVLink
    bandwidth and the share of the network it gets (bytes/s, efficiencies, contention and
    oversubscription applied), the two latency scales (calibrated / NCCL's) and the switch hops'
    extra latency per network step."""

    n: int
    domains: int
    intra_Bps: float
    inter_Bps: float
    nvls: bool = False
    collnet: bool = False
    intra_scale: float = 1.0
    inter_scale: float = 1.0
    hop_s: float = 0.0
    blackwell: bool = False  # NCCL's Blackwell constants (compute capability 10.x)

    @property
    def nvls_efficiency(self) -> float:
        return NVLS_EFFICIENCY_BLACKWELL if self.blackwell else NVLS_EFFICIENCY

    @property
    def ll_max_one_domain(self) -> float:
        return LL_MAX_ONE_DOMAIN_BLACKWELL if self.blackwell else LL_MAX_ONE_DOMAIN[self.nvls]

    @property
    def per_domain(self) -> float:
        return self.n / self.domains

    def bus_Bps(self) -> float:
        """The slowest link of a ring or tree: NVLink, and the network across domains."""
        return self.intra_Bps if self.domains == 1 else min(self.intra_Bps, self.inter_Bps)

    def intra_s(self, algo: Algo, proto: Proto) -> float:
        return NVLINK_US[algo][PROTOS.index(proto)] * US * self.intra_scale

    def inter_s(self, algo: Algo, proto: Proto) -> float:
        # with one rank per domain NCCL charges every network step the tree's latency
        source = Algo.TREE if self.per_domain == 1 else algo
        return NET_US[source][PROTOS.index(proto)] * US * self.inter_scale + self.hop_s


@dataclass(frozen=True)
class Choice:
    algo: Algo
    proto: Proto
    latency_s: float
    bandwidth_Bps: float  # algorithm bandwidth
    seconds: float


def _steps(kind: CollectiveKind, n: int) -> int:
    return 2 * (n - 1) if kind is CollectiveKind.ALL_REDUCE else n - 1


def ring(kind: CollectiveKind, links: Links, proto: Proto, nbytes: float) -> tuple[float, float]:
    n, k = links.n, links.domains
    bus = links.bus_Bps()
    if proto is Proto.LL:
        ll_max = links.ll_max_one_domain if k == 1 else LL_MAX_ACROSS[min(k, 3) - 1]
        bus = min(ll_max, bus * 0.5)
    elif proto is Proto.LL128:
        bus *= 0.92
    steps = _steps(kind, n)
    net_steps = 0 if k == 1 else (2 * (k - 1) if kind is CollectiveKind.ALL_REDUCE else k - 1)
    intra = links.intra_s(Algo.RING, proto)
    if k > 1:
        intra = max(intra, NET_OVERHEAD_US * US * (3 if proto is Proto.SIMPLE else 1))
    latency = (BASE_US[Algo.RING][PROTOS.index(proto)] * US + (steps - net_steps) * intra
               + net_steps * links.inter_s(Algo.RING, proto))
    if (proto is Proto.SIMPLE and k > 1 and kind is CollectiveKind.ALL_REDUCE
            and nbytes / (CHANNELS * n) >= 64):
        latency *= RING_PLATEAU
    return latency, bus * n / steps


def tree(links: Links, proto: Proto, nbytes: float) -> tuple[float, float]:
    """All-reduce only."""
    k = links.domains
    bus = links.bus_Bps() * 0.92
    if proto is Proto.LL:
        bus = min(bus / 3.8, links.ll_max_one_domain if k == 1 else LL_MAX_ACROSS[min(k, 3) - 1])
    elif proto is Proto.LL128:
        bus *= 7.0 / 9.0 if k == 1 else 120.0 / 128.0
    log_size = int(math.log2(max(nbytes, 1.0) / 64)) if nbytes >= 64 else -1
    if 0 <= log_size < 23:
        bus *= TREE_CORRECTION[proto][log_size]
    hops = 2 * ((links.per_domain - 1) * links.intra_s(Algo.TREE, proto)
                + math.floor(math.log2(k)) * links.inter_s(Algo.TREE, proto))
    return BASE_US[Algo.TREE][PROTOS.index(proto)] * US + hops, bus * 0.5


def nvls(kind: CollectiveKind, links: Links, algo: Algo) -> tuple[float, float] | None:
    """NVLS (inside a domain, or across with CollNet) and NVLS-Tree (all-reduce, across)."""
    n, k, ppn = links.n, links.domains, links.per_domain
    if not links.nvls or ppn < 2:
        return None
    if algo is Algo.NVLS and k > 1 and not links.collnet:
        return None
    if algo is Algo.NVLS_TREE and (k == 1 or kind is not CollectiveKind.ALL_REDUCE):
        return None
    if kind is not CollectiveKind.ALL_REDUCE and k > 1:
        return None  # needs CollNet all-gather / reduce-scatter with a NIC per local rank
    intra = links.intra_Bps * links.nvls_efficiency
    intra *= 2.0 if kind is CollectiveKind.ALL_REDUCE else (ppn - 1) / ppn
    # NCCL bounds it by the graph's network speed too, which inside one domain is the NVLink's
    inter = links.inter_Bps if k > 1 else links.intra_Bps
    bus = min(intra, inter * (2 if algo is Algo.NVLS_TREE and k <= 2 else 1))
    latency = links.intra_s(algo, Proto.SIMPLE)
    if algo is Algo.NVLS and k > 1:
        latency += links.inter_s(algo, Proto.SIMPLE)
    if algo is Algo.NVLS_TREE:
        latency += 2 * math.floor(math.log2(k)) * links.inter_s(algo, Proto.SIMPLE)
    if kind is CollectiveKind.ALL_REDUCE:
        return latency, bus * n / _steps(kind, n)
    return latency, bus  # NCCL converts no non-ring all-gather / reduce-scatter bandwidth


def collnet(links: Links, algo: Algo) -> tuple[float, float] | None:
    """CollNet Direct / Chain all-reduce: SHARP reduces in the switches, each byte crosses each
    NIC once (Direct x 0.85 on Hopper and later; latency arity 0.4 us per local rank)."""
    if not links.collnet or links.domains == 1 or links.per_domain > 8:
        return None
    ppn = links.per_domain
    bw = min(links.intra_Bps, links.inter_Bps)
    if algo is Algo.COLLNET_DIRECT:
        latency = (2 * (min(1.0, ppn - 1) * links.intra_s(algo, Proto.SIMPLE) + (ppn - 1) * 0.4 * US)
                   + links.inter_s(algo, Proto.SIMPLE))
        return latency, bw * (links.nvls_efficiency if links.nvls else 1.0)
    return 2 * (ppn - 1) * links.intra_s(algo, Proto.SIMPLE) + links.inter_s(algo, Proto.SIMPLE), bw


def pat(links: Links) -> tuple[float, float] | None:
    """PAT all-gather / reduce-scatter: only with one rank per domain."""
    if links.per_domain != 1 or links.domains < 2:
        return None
    latency = (BASE_US[Algo.PAT][2] * US + math.floor(math.log2(links.domains))
               * links.inter_s(Algo.PAT, Proto.SIMPLE) / 3.5 + links.n * PAT_PER_RANK_US * US)
    return latency, links.bus_Bps() * 0.75


def candidates(kind: CollectiveKind, links: Links, nbytes: float
               ) -> dict[tuple[Algo, Proto], tuple[float, float]]:
    """(latency_s, algorithm bandwidth) of every (algorithm, protocol) NCCL would consider."""
    out: dict[tuple[Algo, Proto], tuple[float, float]] = {}
    for proto in PROTOS:
        out[(Algo.RING, proto)] = ring(kind, links, proto, nbytes)
        if kind is CollectiveKind.ALL_REDUCE:
            out[(Algo.TREE, proto)] = tree(links, proto, nbytes)
    others = [(Algo.NVLS, nvls(kind, links, Algo.NVLS)), (Algo.NVLS_TREE, nvls(kind, links, Algo.NVLS_TREE))]
    if kind is CollectiveKind.ALL_REDUCE:
        others += [(Algo.COLLNET_DIRECT, collnet(links, Algo.COLLNET_DIRECT)),
                   (Algo.COLLNET_CHAIN, collnet(links, Algo.COLLNET_CHAIN))]
    else:
        others.append((Algo.PAT, pat(links)))
    for algo, cost in others:
        if cost is not None:
            out[(algo, Proto.SIMPLE)] = cost
    return out


def choose(kind: CollectiveKind, links: Links, nbytes: float) -> Choice:
    """The (algorithm, protocol) NCCL picks for `nbytes`: the least predicted time."""
    best: Choice | None = None
    for (algo, proto), (latency, bw) in candidates(kind, links, nbytes).items():
        if bw <= 0:
            continue
        seconds = latency + nbytes / bw
        if best is None or seconds < best.seconds:
            best = Choice(algo, proto, latency, bw, seconds)
    assert best is not None
    return best
