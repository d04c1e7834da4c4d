"""NCCL's collective algorithms in the surrogate's closed form, as the simulator costs and
chooses them (simulator.network.algorithms, transcribed from NCCL's tuner): rings inside one
NVLink domain (`domain_ring_s`) and across domains (`crossing_ring_s`), the double binary tree
and NVLS-Tree across domains (`crossing_tree_s`), each at its fastest protocol. Written over
scalars or arrays with `surrogate.physics`' helpers, compiled inline into the feature kernels.

A GPU whose collectives inside a node come from measured nccl-tests tables (`ll_max_Bps` 0,
surrogate.physics.hardware_vector) keeps the calibrated ring of `surrogate.timing._ring_s`."""

from __future__ import annotations

import numpy as np

from simulator.jit import njit
from simulator.network.algorithms import (
    BASE_US,
    CHANNELS,
    LL_MAX_ACROSS,
    NET_OVERHEAD_US,
    NET_US,
    NVLINK_US,
    PAT_PER_RANK_US,
    PROTOS,
    RING_PLATEAU,
    RING_SIMPLE_NET_S,
    RING_SIMPLE_NVLINK_S,
    TREE_CORRECTION,
    US,
    Algo,
)
from surrogate.compiled_ops import Vec, floor, log2, maximum, minimum, skips, where
from surrogate.physics import Hardware

_LL, _LL128, _SIMPLE = 0, 1, 2  # NCCL's protocols, as simulator.network.algorithms.PROTOS orders them
_TREE_BASE_S = tuple(us * US for us in BASE_US[Algo.TREE])
_TREE_STEP_S = tuple(us * US for us in NVLINK_US[Algo.TREE])
_NVLS_TREE_NET_S = NET_US[Algo.NVLS_TREE][_SIMPLE] * US
_PAT_BASE_S, _PAT_NET_S = BASE_US[Algo.PAT][_SIMPLE] * US, NET_US[Algo.PAT][_SIMPLE] * US
_PAT_RANK_S = PAT_PER_RANK_US * US
_TREE_CORRECTION = np.array([TREE_CORRECTION[proto] for proto in PROTOS])
_RING_NET_S = tuple(us * US for us in NET_US[Algo.RING])
_TREE_NET_S = tuple(us * US for us in NET_US[Algo.TREE])
_NET_POST_S = NET_OVERHEAD_US * US
_LL_ACROSS_2, _LL_ACROSS_3 = LL_MAX_ACROSS[1], LL_MAX_ACROSS[2]
_CHANNELS, _PLATEAU = float(CHANNELS), RING_PLATEAU
_RING_BASE_S = tuple(us * US for us in BASE_US[Algo.RING])
_RING_STEP_S = tuple(us * US for us in NVLINK_US[Algo.RING])
NVLS_STEP_S = NVLINK_US[Algo.NVLS][_SIMPLE] * US


@njit(inline=True)
def domain_all_reduce_s(hw: Hardware, nbytes: Vec, n: Vec, bus: Vec, calls: Vec) -> Vec:
    """`calls` all-reduces of `nbytes` in all over `n` ranks of one NVLink domain of bus
    bandwidth `bus`, each at the (algorithm, protocol) NCCL's tuner picks (simulator.network.
    algorithms.choose): a ring (`domain_ring_s`, 2(n - 1) steps) or NVLS. A ring of Simple
    steps alone charged B200's small tp collectives (21.6 us per step) 2.7x the LL ring NCCL
    runs."""
    steps = 2 * (n - 1)
    ring = domain_ring_s(hw, nbytes, n, steps, bus, calls)
    if skips(hw.nvls_eff > 0):  # a compiled row without NVLink SHARP
        return ring
    nvls = (calls * NVLS_STEP_S * hw.intra_lat_s / RING_SIMPLE_NVLINK_S
            + nbytes * steps / maximum(n, 1) / maximum(minimum(2 * hw.nvls_eff, 1.0) * bus, 1.0))
    return where(hw.nvls_eff > 0, minimum(ring, nvls), ring)


@njit(inline=True)
def domain_ring_s(hw: Hardware, nbytes: Vec, n: Vec, steps: Vec, bus: Vec, calls: Vec) -> Vec:
    """`calls` ring collectives of `steps` steps (2(n - 1) for an all-reduce, n - 1 for an
    all-gather or reduce-scatter) over `n` ranks of one NVLink domain moving `nbytes` in all,
    at NCCL's fastest protocol (simulator.network.algorithms.ring): LL, LL128 or Simple, each
    a base latency, its per-step latency scaled by the GPU's calibrated Simple one
    (`intra_lat_s`) and its share of the bus bandwidth `bus` (LL's capped by `ll_max_Bps`)."""
    scale = hw.intra_lat_s / RING_SIMPLE_NVLINK_S
    moved = nbytes * steps / maximum(n, 1)
    best = _ring_protocol_s(calls, steps, scale, moved, _SIMPLE, bus)
    best = minimum(best, _ring_protocol_s(calls, steps, scale, moved, _LL128, 0.92 * bus))
    ll = maximum(minimum(hw.ll_max_Bps, 0.5 * bus), 1.0)  # 1 B/s where no LL ceiling is known (unused)
    return minimum(best, _ring_protocol_s(calls, steps, scale, moved, _LL, ll))


@njit(inline=True)
def crossing_ring_s(hw: Hardware, nbytes: Vec, n: Vec, k: Vec, steps: Vec, net_steps: Vec, bus: Vec,
                    calls: Vec, all_reduce: Vec) -> Vec:
    """`calls` ring collectives of `steps` steps over `n` ranks on `k` > 1 NVLink domains moving
    `nbytes` in all, `net_steps` of the steps over the network (2(k - 1) for an all-reduce,
    k - 1 for an all-gather or reduce-scatter), at NCCL's fastest protocol (simulator.network.
    algorithms.ring): each a base latency, the NVLink steps at the protocol's latency scaled by
    the GPU's calibrated one but at least the host's network post overhead, the network steps
    at the protocol's network latency scaled by the calibrated one (the tree's with one rank
    per domain), the buffer at the protocol's share of `bus` (the slowest link); Simple's
    all-reduce plateau; with one rank per domain an all-gather or reduce-scatter may take PAT
    (simulator.network.algorithms.pat). The per-step latencies add up on rings of hundreds of
    ranks: B200's expert-gradient reduce-scatters over 1,024 ranks cost ~12 ms each."""
    scale = hw.intra_lat_s / RING_SIMPLE_NVLINK_S
    net_scale = hw.inter_lat_s / RING_SIMPLE_NET_S
    moved = nbytes * steps / maximum(n, 1)
    one = n <= k  # one rank per domain
    best = moved / bus + calls * (
        _RING_BASE_S[_SIMPLE] + (steps - net_steps) * maximum(_RING_STEP_S[_SIMPLE] * scale, 3 * _NET_POST_S)
        + net_steps * where(one, _TREE_NET_S[_SIMPLE], _RING_NET_S[_SIMPLE]) * net_scale) * where(
        (all_reduce > 0) & (nbytes / maximum(calls, 1.0) / (_CHANNELS * n) >= 64), _PLATEAU, 1.0)
    for proto in (_LL, _LL128):
        share = where(proto == _LL, minimum(where(k >= 3, _LL_ACROSS_3, _LL_ACROSS_2), 0.5 * bus), 0.92 * bus)
        intra = maximum(_RING_STEP_S[proto] * scale, _NET_POST_S)
        latency = (_RING_BASE_S[proto] + (steps - net_steps) * intra
                   + net_steps * where(one, _TREE_NET_S[proto], _RING_NET_S[proto]) * net_scale)
        best = minimum(best, calls * latency + moved / share)
    # PAT: an all-gather or reduce-scatter with one rank per domain (0.75 of the bus bandwidth)
    pat = (calls * (_PAT_BASE_S + depth_of(k) * _PAT_NET_S * net_scale / 3.5 + n * _PAT_RANK_S)
           + nbytes / (0.75 * bus))
    return where(one & (all_reduce == 0), minimum(best, pat), best)


@njit(inline=True)
def crossing_tree_s(hw: Hardware, nbytes: Vec, n: Vec, k: Vec, intra: Vec, inter: Vec, calls: Vec) -> Vec:
    """`calls` all-reduces of `nbytes` in all over `n` ranks on `k` > 1 NVLink domains by NCCL's
    double binary tree at its fastest protocol, or NVLS-Tree with NVLink SHARP (simulator.
    network.algorithms.tree, nvls): 2 ((n / k - 1) NVLink + log2(k) network) hops, at half of
    0.92 of the slowest link (`intra`, the NVLink; `inter`, the group's network share) with
    NCCL's size correction. Where the ring's steps add up (hundreds of ranks), the tree wins."""
    scale = hw.intra_lat_s / RING_SIMPLE_NVLINK_S
    net_scale = hw.inter_lat_s / RING_SIMPLE_NET_S
    bus = minimum(intra, inter) * 0.92
    per_domain = n / maximum(k, 1.0)
    depth = depth_of(k)
    size = floor(log2(maximum(nbytes / maximum(calls, 1.0), 64.0) / 64.0))
    best = nbytes * 2.0 / (bus * _tree_correction(_SIMPLE, size)) + calls * (
        _TREE_BASE_S[_SIMPLE] + 2 * ((per_domain - 1) * _TREE_STEP_S[_SIMPLE] * scale
                                     + depth * _TREE_NET_S[_SIMPLE] * net_scale))
    for proto in (_LL, _LL128):
        share = where(proto == _LL, minimum(bus / 3.8, where(k >= 3, _LL_ACROSS_3, _LL_ACROSS_2)),
                      bus * 120.0 / 128.0)
        latency = _TREE_BASE_S[proto] + 2 * ((per_domain - 1) * _TREE_STEP_S[proto] * scale
                                             + depth * _TREE_NET_S[proto] * net_scale)
        best = minimum(best, calls * latency + nbytes * 2.0 / (share * _tree_correction(proto, size)))
    if skips((hw.nvls_eff > 0) & (per_domain >= 2)):
        return best
    sharp = maximum(minimum(2 * hw.nvls_eff * intra, inter * where(k <= 2, 2.0, 1.0)), 1.0)
    nvls_tree = calls * (NVLS_STEP_S * scale + 2 * depth * _NVLS_TREE_NET_S * net_scale) + nbytes * 2 * (
        n - 1) / (n * sharp)
    return where((hw.nvls_eff > 0) & (per_domain >= 2), minimum(best, nvls_tree), best)


@njit(inline=True)
def depth_of(k: Vec) -> Vec:
    """floor(log2(k)): the network levels of NCCL's tree (and PAT) over k domains."""
    return floor(log2(maximum(k, 1.0)))


@njit
def _tree_correction(proto: int, size: Vec) -> Vec:
    """NCCL's tree bandwidth correction for calls of 64 x 2**size bytes (1 beyond its table)."""
    if isinstance(size, float):
        return _TREE_CORRECTION[proto, int(size)] if size < 23 else 1.0
    return np.where(size < 23, _TREE_CORRECTION[proto][np.minimum(size, 22).astype(np.int64)], 1.0)


@njit(inline=True)
def _ring_protocol_s(calls: Vec, steps: Vec, scale: Vec, moved: Vec, proto: int, bus: Vec) -> Vec:
    latency = _RING_BASE_S[proto] + steps * _RING_STEP_S[proto] * scale
    return calls * latency + moved / bus
