"""A MoE layer in the surrogate's closed form (`surrogate.extended`), as the simulator builds
it (simulator.graph.moe, balanced routing): the dispatcher's collectives (`dispatch_s`), the
token shuffles and router (`token_shuffle_s`), the layer's extra host launches counted in the
simulator's blocks (`moe_host_s`), the experts' grouped GEMMs (`moe_layer_terms`) and their
extra saved activations (`saved_activations_bytes`); their gradient reduction and optimizer
step are `surrogate.dp_terms.expert_tail_s`. The dispatchers:

- ``alltoall``: per direction one all-to-all of the rank's tokens x top-k over the ep ranks, and
  with expert tp an all-gather (dispatch) / reduce-scatter (combine) of the tokens the local
  experts compute (tokens x top-k x expert_tp per rank) over the expert-tp ranks;
- ``flex`` (DeepEP): one all-to-all that sends a token once per distinct rank among its top-k
  experts (`simulator.graph.moe.dispatch.distinct_ranks`), at DeepEP's efficiencies;
- ``allgather``: every rank's tokens all-gathered over the expert_tp x ep ranks (with the routing
  map and probabilities forward), reduce-scattered back after the experts.

The closed form used to price every dispatcher as ``alltoall`` without expert tp: allgather rows
sat at +0.44 log against it, alltoall rows at +0.11 (2026-11-27, MoE+CP space).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache, partial
from typing import Any, NamedTuple

import numpy as np

from simulator.graph.moe.dispatch import distinct_ranks
from simulator.jit import njit
from surrogate.columns import row_groups, value_at
from surrogate.compiled_ops import Vec, floor, gemm_efficiency, maximum, minimum, skips, where
from surrogate.features import JOB_COLUMNS
from surrogate.launch_keys import KeyedCache, stable_code, stable_codes
from surrogate.nccl_terms import crossing_ring_s, domain_ring_s
from surrogate.physics import RECOMPUTE, Hardware
from surrogate.records import CHOICES
from surrogate.records import new_column as _col
from surrogate.slots import (
    CP,
    CUDA_GRAPHS,
    EP,
    EXPERT_TP,
    GATED_MLP,
    GPUS_PER_NODE,
    HIDDEN_SIZE,
    INTER_NODE_BANDWIDTH_GBPS,
    INTRA_NODE_BANDWIDTH_GBPS,
    MICRO_BATCH_SIZE,
    MOE_FFN_HIDDEN_SIZE,
    MOE_OVERLAP_EP_COMM,
    MOE_ROUTER_TOPK,
    MOE_SHARED_EXPERT_INTERMEDIATE_SIZE,
    MOE_TOKEN_DISPATCHER,
    NUM_EXPERTS,
    NUM_GPUS,
    NVLINK_DOMAIN,
    RECOMPUTE_CODE,
    SEQ_LENGTH,
    TP,
)

_DISPATCHERS = CHOICES["moe_token_dispatcher"]
ROUTING_BYTES_PER_EXPERT = 5.0  # a bool routing-map entry and an fp32 probability per expert
# codes the compiled formulas compare with (numba reads module constants, not dict lookups)
_FLEX = float(_DISPATCHERS.index("flex"))
_ALLGATHER = float(_DISPATCHERS.index("allgather"))
_FULL = float(RECOMPUTE.index("full"))


def token_copies(new: np.ndarray) -> np.ndarray:
    """Copies of a token the dispatch sends: top-k, or (flex) its distinct expert ranks."""
    topk = _col(new, "moe_router_topk")
    flex = _col(new, "moe_token_dispatcher") == _DISPATCHERS.index("flex")
    if not flex.any():
        return topk
    experts, ep = _col(new, "num_experts"), _col(new, "ep")
    rows = np.flatnonzero(flex)
    groups, firsts = row_groups([x[rows].astype(np.int64) for x in (experts, topk, ep)],
                                "dispatch groups")  # np.unique over columns: ~1 ms per 20k rows
    values = np.array([_distinct(int(experts[i]), int(topk[i]), int(ep[i])) for i in rows[firsts]])
    out = topk.copy()
    out[rows] = values[groups]
    return out


def token_copies_of_record(new: np.ndarray) -> np.ndarray:
    """`token_copies` of one record's (`NEW_COLUMNS`, 1) values."""
    topk = new[MOE_ROUTER_TOPK]
    if new[MOE_TOKEN_DISPATCHER, 0] != _FLEX:
        return topk
    return np.array([_distinct(int(new[NUM_EXPERTS, 0]), int(topk[0]), int(new[EP, 0]))])


@lru_cache(maxsize=1024)
def _distinct(experts: int, topk: int, ep: int) -> float:
    if experts <= 0 or ep <= 0 or experts % ep:
        return float(topk)
    return distinct_ranks(experts, topk, ep)


@njit
def ring_gather_s(total_bytes: Vec, n: Vec, per_node: Vec, intra_Bps: Vec, node_Bps: Vec,
                  hw: Hardware) -> Vec:
    """A ring all-gather (or reduce-scatter) of `total_bytes` gathered over `n` consecutive
    ranks, `per_node` of them on each node: NCCL's ring (`simulator.network.algorithms.ring`)
    moves (n - 1)/n of it through every rank, at its slowest link's rate: NVLink, and across
    nodes the group's share of the node's NICs (`node_Bps`, NCCL's rings spread over all of
    them); n - 1 steps of latency, of which k - 1 cross the network between the k nodes it
    spans, the rest inside a node. (Until schema 23 the network carried (n - per_node)/n, as a
    hierarchical gather would: cp 8's K/V gathers over two nodes were 0.67x the simulator's.)"""
    g = minimum(per_node, n)
    crosses = n > g
    intra = (n - 1) / maximum(n, 1.0) * total_bytes / intra_Bps
    inter = (n - 1) / maximum(n, 1.0) * total_bytes / node_Bps
    k = -floor(-n / maximum(g, 1.0))  # the nodes (domains) the ring spans
    latency = where(crosses, (n - k) * hw.intra_lat_s + (k - 1) * hw.inter_lat_s,
                    (n - 1) * hw.intra_lat_s)
    # NCCL's protocol choice (surrogate.nccl_terms) where no measured table: inside one domain,
    # and across (LL / LL128 steps where Simple's B200 21.6 us ones were charged, or PAT)
    flat = where(hw.ll_max_Bps > 0, domain_ring_s(hw, total_bytes, n, n - 1, intra_Bps, 1.0),
                 intra + latency)
    bus = minimum(intra_Bps, node_Bps)
    across = where(hw.ll_max_Bps > 0, crossing_ring_s(hw, total_bytes, n, k, n - 1, k - 1, bus, 1.0, 0.0),
                   maximum(intra, inter) + latency)
    return where(n > 1, where(crosses, across, flat), 0.0)


class DispatchSeconds(NamedTuple):
    """One MoE layer's dispatch plus combine in one direction, one micro-batch (the forward's
    and the backward's are equal): what the combined-1F1B overlap can hide (the all-to-alls) and
    what it cannot (expert tp's gathers, the all-gather dispatcher, the token counts)."""

    hideable: Vec
    exposed: Vec


@njit
def _gather_s(total: Vec, n: Vec, domain: Vec, gpn: Vec, intra: Vec, node: Vec,
              hw: Hardware) -> Vec:
    """`ring_gather_s` over `n` consecutive ranks (expert tp fastest, then ep) of a domain."""
    g = minimum(n, domain)
    return ring_gather_s(total, n, g, intra, node * g / gpn, hw)


@njit(inline=True)
def dispatch_s(f: Any, new: Any, tokens: Vec, a2a_s: Vec, hw: Hardware) -> DispatchSeconds:
    """`DispatchSeconds` by dispatcher (module docstring); `a2a_s`: one all-to-all of the
    dispatched copies (`surrogate.extended._alltoall_s`). `f`, `new`: the rows' `ROW_FIELDS`
    and `NEW_COLUMNS` (`surrogate.slots`)."""
    ep, etp, h = new[EP], new[EXPERT_TP], f[HIDDEN_SIZE]
    domain = maximum(new[NVLINK_DOMAIN], 1.0)
    gpn = maximum(minimum(f[GPUS_PER_NODE], f[NUM_GPUS]), 1.0)
    intra = f[INTRA_NODE_BANDWIDTH_GBPS] * 1e9 * hw.intra_eff
    node = f[INTER_NODE_BANDWIDTH_GBPS] * 1e9 / 8 * hw.inter_eff
    group = ep * etp
    allgather = (2 * _gather_s(tokens * group * h * 2.0, group, domain, gpn, intra, node, hw)
                 + 0.5 * _gather_s(tokens * group * new[NUM_EXPERTS] * ROUTING_BYTES_PER_EXPERT,
                                   group, domain, gpn, intra, node, hw))  # the map: forward only
    expert_tp = 2 * _gather_s(tokens * new[MOE_ROUTER_TOPK] * etp * h * 2.0, etp, domain, gpn,
                              intra, node, hw)
    counts = 0.5 * _gather_s(8.0 * new[NUM_EXPERTS] * group, group, domain, gpn, intra, node,
                             hw)  # forward only
    kind = new[MOE_TOKEN_DISPATCHER]
    gathers = kind == _ALLGATHER
    flex = kind == _FLEX
    return DispatchSeconds(where(gathers, 0.0, 2 * a2a_s),
                           where(gathers, allgather, where(flex, 0.0, expert_tp + counts)))


@njit(inline=True)
def token_shuffle_s(f: Any, new: Any, tokens: Vec, copies: Vec, hw: Hardware) -> Vec:
    """Seconds per MoE layer and micro-batch of what the dense form has no counterpart for:
    the memory-bound token shuffles around the experts (simulator.graph.moe.layer: permute into
    per-expert copies, sort the received chunks by local expert and back, the weighted
    unpermute; each reads and writes its rows, forward and backward, and again in a full
    recompute's forward), the router's small kernels, and the host synchronization of dropless
    routing (the GPU waits for the host's next launch after it, forward and recompute)."""
    h, topk = f[HIDDEN_SIZE], new[MOE_ROUTER_TOPK]
    experts, ep, etp = new[NUM_EXPERTS], new[EP], new[EXPERT_TP]
    flex = new[MOE_TOKEN_DISPATCHER] == _FLEX
    not_flex = new[MOE_TOKEN_DISPATCHER] != _FLEX
    sent = tokens * copies  # `token_copies`
    computed = tokens * topk * etp
    local = maximum(experts / maximum(ep, 1.0), 1.0)
    rows = (where(flex, 0.0, tokens + sent)  # permute
            + where((local > 1) | flex, 2 * computed, 0.0)  # sort by local expert
            + where((local > 1) & not_flex, 2 * computed, 0.0)  # and back
            + where(flex, computed, sent) + tokens)  # unpermute
    kernels = (where(flex, 0.0, 1.0) + where((local > 1) | flex, 1.0, 0.0)
               + where((local > 1) & not_flex, 1.0, 0.0) + 1.0)
    forward = rows * h * 2.0 / hw.hbm_Bps + (kernels + ROUTER_KERNELS) * hw.launch_s
    full = f[RECOMPUTE_CODE] == _FULL
    sync = hw.host_s * (1 + full)
    return where(experts > 0, forward * (2 + full) + sync, 0.0)


ROUTER_KERNELS = 8.0  # simulator.graph.moe.router: 10 small forward kernels, 6 backward: per pass


# What decides how many kernels and collectives a MoE layer's MLP launches (simulator.graph.moe:
# the dispatcher and its collectives, expert tp's gathers, the local experts' sort, the shared
# experts, the recipe's quantize kernels on the GPU's architecture, what recompute re-runs, CUDA
# graphs): these columns, and whether ep, expert tp, tp, the local experts and the shared
# experts are more than one. A key that left out something the counts depend on would make a
# row's features depend on which row of its key the process met first (the weights' quantize
# kernels, once per iteration, are counted per quantization for that reason).
_LAUNCH_COLUMNS = ("gpu", "gated_mlp", "moe_token_dispatcher", "sequence_parallel", "precision",
                   "fp8_recipe", "fp4_recipe", "recompute", "recompute_modules",
                   "moe_overlap_ep_comm", "cuda_graphs", "flash_attention")
_MLP_OPS = ("moe.", "shared_expert.")
# the dense form's MLP: up GEMM, activation, down GEMM forward; their gradients backward
# (surrogate.timing.layer_times)
DENSE_MLP_LAUNCHES = (3.0, 5.0)
# launch key (stable codes) -> (launches per micro-batch, launches per weight quantization,
# collectives)
_LAUNCHES: dict[tuple[int, ...], tuple[float, float, float]] = {}
# the same counts as arrays, for a table's rows at once (surrogate.launch_keys)
_LAUNCH_TABLE = KeyedCache(3, "MoE launch keys")


def clear_launch_counts() -> None:
    """Forget every launch key's counts (a test of their independence from history)."""
    _LAUNCHES.clear()
    _LAUNCH_TABLE.clear()


def moe_host_table_s(columns: Mapping[str, Any], new: np.ndarray, recompute: np.ndarray,
                     hw: Hardware) -> np.ndarray:
    """`moe_host_s` of every row of a table (zero on the dense rows, which it skips)."""
    rows = np.flatnonzero(new[NUM_EXPERTS] > 0)
    out = np.zeros(new.shape[1])
    if len(rows):
        out[rows] = moe_host_s(columns, rows, new[:, rows], recompute[rows],
                               {"host_s": hw.host_s[rows], "coll_s": hw.coll_s[rows]})
    return out


def moe_host_s(columns: Mapping[str, Any], rows: np.ndarray, new: np.ndarray,
               recompute: np.ndarray, hw: Mapping[str, Any]) -> np.ndarray:
    """Host dispatch seconds a MoE layer spends beyond the dense form's layer (per layer and
    micro-batch, forward, backward and recompute): its MLP's launches, weighted per direction
    as the stack's Python costs them, less the dense MLP's, and its collectives, counted in the
    simulator's own blocks (simulator.costs.blocks._host_s) once per distinct launch key in the
    process (~5 ms each; a 40k-row table of the MoE+CP space holds ~1,800). `rows`: the MoE
    rows of the table `columns`; `new`, `recompute`, `hw`: theirs."""
    experts, ep = _col(new, "num_experts"), _col(new, "ep")
    flags = np.stack([ep > 1, experts > ep, _col(new, "expert_tp") > 1,
                      np.asarray(columns["tp"])[rows] > 1,
                      _col(new, "moe_shared_expert_intermediate_size") > 0])
    parts = np.stack([(flags * (1 << np.arange(5))[:, None]).sum(axis=0).astype(np.uint64),
                      *(stable_codes(columns[name], name, rows) for name in _LAUNCH_COLUMNS)], axis=1)

    def count(i: int) -> tuple[float, float, float]:  # a key not in _LAUNCH_TABLE, at rows[i]
        return _launches(tuple(int(v) for v in parts[i]), partial(_record_at, columns, int(rows[i])))

    counts = _LAUNCH_TABLE.values(parts, count)
    m = (np.asarray(columns["global_batch_size"])[rows]
         / (np.asarray(columns["dp"])[rows] * np.asarray(columns["micro_batch_size"])[rows]))
    return _host_seconds(counts.T, m, recompute, _col(new, "cuda_graphs"), hw["host_s"], hw["coll_s"])


def _record_at(columns: Mapping[str, Any], i: int) -> dict[str, Any]:
    return {k: value_at(v, i) for k, v in columns.items() if k in _JOB_KEYS}


def moe_host_of_record(record: Mapping[str, Any], new: np.ndarray, recompute: np.ndarray,
                       hw: Hardware) -> np.ndarray:
    """`moe_host_table_s` of one record (`new`, `recompute`, `hw`: its one-element arrays), its
    launch key made of its own values (the single-prediction path: no table to group)."""
    if not new[NUM_EXPERTS, 0] > 0:
        return np.zeros(1)
    experts, ep = new[NUM_EXPERTS, 0], new[EP, 0]
    bits = (ep > 1, experts > ep, new[EXPERT_TP, 0] > 1, record["tp"] > 1,
            new[MOE_SHARED_EXPERT_INTERMEDIATE_SIZE, 0] > 0)
    key = (sum(int(bit) << j for j, bit in enumerate(bits)),
           *(stable_code(name, record[name]) for name in _LAUNCH_COLUMNS))
    counts = _launches(key, lambda: {k: record[k] for k in _JOB_KEYS})
    m = record["global_batch_size"] / (record["dp"] * record["micro_batch_size"])
    # Python numbers through the same formula as a table's arrays: the same IEEE operations
    return np.array([_host_seconds(counts, float(m), float(recompute[0]), float(new[CUDA_GRAPHS, 0]),
                                   float(hw.host_s[0]), float(hw.coll_s[0]))])


def _host_seconds(counts: Any, m: Vec, recompute: Vec, cuda_graphs: Vec, host_s: Vec, coll_s: Vec) -> Vec:
    """`moe_host_s` of rows from their launch counts ((3, rows): `_launches_of`; or one row's 3
    numbers) and their micro-batches per iteration `m`."""
    # TE quantizes a weight once per iteration (1/m per micro-batch; FSDP, refused with experts,
    # would re-quantize every micro-batch): those launches follow the row's own micro-batches
    launches = counts[0] + counts[1] / maximum(m, 1.0)
    collectives = counts[2]
    full = recompute == RECOMPUTE.index("full")
    dense = DENSE_MLP_LAUNCHES[0] * (1 + full) + DENSE_MLP_LAUNCHES[1]
    out = maximum(launches - dense, 0.0) * host_s + collectives * coll_s
    return where(cuda_graphs > 0, 0.0, out)


def _launches(key: tuple[int, ...], record: Callable[[], dict[str, Any]]) -> tuple[float, float, float]:
    """`_launches_of` the record `record()` makes (called only on a miss), kept per launch key
    (its stable codes)."""
    if key not in _LAUNCHES:
        if len(_LAUNCHES) > 8192:
            _LAUNCHES.clear()
        _LAUNCHES[key] = _launches_of(record())
    return _LAUNCHES[key]


_JOB_KEYS = frozenset(JOB_COLUMNS)


def _launches_of(record: dict[str, Any]) -> tuple[float, float, float]:
    """(launches weighted per direction, of them those per weight quantization, collectives) of
    the MoE MLP of one record's first MoE layer: its ops named `_MLP_OPS`, from the simulator's
    blocks. The weights' quantize kernels run `weight_casts_per_microbatch` times per
    micro-batch (1/m): they are returned per quantization, so that the counts are a function of
    the launch key alone."""
    from simulator.graph.blocks import build_all_blocks
    from simulator.graph.primitives import weight_casts_per_microbatch
    from surrogate.features import record_to_job

    job = record_to_job(record)
    layers, *_ = build_all_blocks(job)
    block = next(b for b in layers if any(o.name.startswith("moe.") for o in b.forward))
    w = block.host_cost
    launches = casts = 0.0
    for ops, weight in ((block.forward, w.forward), (block.backward, w.backward),
                        (block.recompute, w.recompute)):
        for o in ops:
            if not o.name.startswith(_MLP_OPS):
                continue
            n = weight * (o.kernels if o.host_launches is None else o.host_launches)
            if o.name.endswith(".quantize_weight"):
                casts += n
            else:
                launches += n
    per_cast = weight_casts_per_microbatch(job) if job.training.precision.is_low else 0.0
    collectives = sum(1 for comms in (block.forward_comm, block.backward_comm, block.recompute_comm)
                      for o in comms if o.name.startswith("moe."))
    # rounded: the division would otherwise leave last-bit noise that depends on the row's m
    return launches, round(casts / per_cast, 9) if per_cast else 0.0, float(collectives)


@njit
def _gemm_s(hw: Hardware, peak: Vec, batch: Vec, m: Vec, n: Vec, k: Vec, accumulate: Vec,
            operand: Vec) -> Vec:
    """Forward, data- and weight-gradient GEMMs of `batch` problems Y[m,n] = X[m,k] W[k,n] at
    the FLOP rate `peak` (16 bits, or a recipe's rate: timing.projection_gemms), as the
    simulator costs a grouped GEMM (simulator.graph.moe.experts: one op of `batch` problems, one
    kernel each): its roofline with the tile / wave / depth efficiency of each pass's shape
    (forward m x n deep k, data gradient m x k deep n, weight gradient n x k deep m) over all
    `batch` problems' tiles, one launch gap per problem, operands of `operand` bytes per element
    (a recipe's format with its scales; 16-bit outputs: simulator.graph.primitives.gemm). The
    weight gradient reads and writes `accumulate` more bytes per weight (Megatron's gradient-
    accumulation fusion adds it into the gradient buffer: primitives.gemm's `accumulate_bytes`).
    Until schema 26 each expert's tiles filled the SMs alone: 128 experts of 256 rows each ran
    at a sixth of the waves the simulator's grouped GEMM fills, and weights were 16-bit."""
    flops = 2.0 * batch * m * n * k
    launches = batch * hw.launch_s
    total = 0.0 * flops
    for rows, cols, depth, out in ((m, n, k, 2.0), (m, k, n, 2.0), (n, k, m, 2.0 + accumulate)):
        eff = gemm_efficiency(batch, rows, cols, depth, hw.num_sms, hw.gemm_max, hw.k_half)
        traffic = batch * ((rows * depth + depth * cols) * operand + rows * cols * out)
        total = total + maximum(flops / (peak * eff), traffic / hw.hbm_Bps) + launches
    return total


@njit(inline=True)
def _expert_gemm_s(f: Any, new: Any, tokens: Vec, hw: Hardware, peak: Vec, grad_bytes: Vec,
                   operand: Vec) -> Vec:
    """Seconds per MoE layer and micro-batch that the experts' grouped GEMMs take beyond what
    the dense form charged for them (MoE rows only). The dense form prices the routed experts as
    one dense MLP of top-k x moe_ffn split over tp, on the rank's b s / cp tokens; the simulator
    runs each local expert's GEMMs on its share of the dispatched tokens (balanced routing:
    tokens x top-k x expert_tp x ep / experts rows, the expert-tp group's tokens gathered, each
    expert's FFN split over expert_tp; simulator.graph.moe: one kernel per expert, its weights
    read whatever the rows), much less efficient when an expert gets few rows, and without
    sequence parallelism on every tp rank's whole copy of the tokens: tp times the dense form's
    FLOPs where expert_tp is 1 (until 2026-11-27 this term compared the grouped GEMMs with a
    dense MLP of their own rows, which left that factor and expert_tp's gathered rows out).
    Both at `peak`, the recipe's GEMM rate under low precision (the simulator quantizes the
    experts' GEMMs as the dense ones: charged at 16 bits until schema 24, FP4 MoE rows on B200
    with tp 4 sat at -0.57 log). Each weight gradient is accumulated into the `grad_bytes`
    buffer (read and written: 2 grad_bytes per weight where it wrote 2), which the dense form
    leaves out: with few rows per expert that traffic, not the FLOPs, sets the weight gradients'
    time (3.8x the forward's bytes for 32 local experts of Qwen3-235B on H100, where the closed
    form was 0.61x the simulator). The grouped GEMMs read the recipe's `operand` bytes per
    element: with 128 experts on a GPU their weights, not their FLOPs, set the forward's time
    (16-bit operands put an FP8 DeepSeek-V3 row on 8 H200s at -0.24 log against the simulator,
    -0.02 with the format's bytes)."""
    experts, topk = new[NUM_EXPERTS], new[MOE_ROUTER_TOPK]
    ep, etp, h, t = new[EP], new[EXPERT_TP], f[HIDDEN_SIZE], f[TP]
    gated = where(f[GATED_MLP] > 0, 2.0, 1.0)
    ffn = new[MOE_FFN_HIDDEN_SIZE] / maximum(etp, 1.0)
    rows = maximum(tokens * topk * etp * ep / experts, 1.0)  # per local expert
    local = experts / ep
    accumulate = 2.0 * grad_bytes - 2.0
    grouped = (_gemm_s(hw, peak, local, rows, ffn * gated, h, accumulate, operand)
               + _gemm_s(hw, peak, local, rows, h, ffn, accumulate, operand))
    charged_ffn = topk * new[MOE_FFN_HIDDEN_SIZE] / t
    charged_rows = f[MICRO_BATCH_SIZE] * f[SEQ_LENGTH] / new[CP]
    charged = (_gemm_s(hw, peak, 1.0, charged_rows, charged_ffn * gated, h, 0.0, 2.0)
               + _gemm_s(hw, peak, 1.0, charged_rows, h, charged_ffn, 0.0, 2.0))
    return maximum(grouped - charged, 0.0)


@njit(inline=True)
def moe_layer_terms(f: Any, new: Any, tokens: Vec, a2a_s: Vec, copies: Vec, hw: Hardware,
                    layer_c: Vec, gemm_peak: Vec, grad_bytes: Vec, operand: Vec) -> tuple[Vec, Vec]:
    """Per MoE layer and micro-batch (zero on dense rows): the dispatcher's exposed collectives
    (with the combined-1F1B overlap, simulator.costs.blocks: a forward's all-to-alls hide under
    the other micro-batch's backward compute, 2/3 of the layer's, a backward's under its
    forward, 1/3) and the experts' extra GPU time (grouped GEMMs, token shuffles). Its host
    launches are a lookup per launch key (`moe_host_s`). `gemm_peak`: the experts' GEMM rate,
    `grad_bytes`: their gradients', `operand`: their operands' bytes per element (`_expert_gemm_s`)."""
    moe = new[NUM_EXPERTS] > 0
    if skips(moe):
        return 0.0, 0.0
    pair = dispatch_s(f, new, tokens, a2a_s, hw)  # one direction's
    # full recompute runs the layer's forward again before its backward: one more direction's
    # dispatch and combine, and the experts' forward GEMMs (a third of their three passes)
    full = f[RECOMPUTE_CODE] == _FULL
    gpu = (_expert_gemm_s(f, new, tokens, hw, gemm_peak, grad_bytes, operand) * where(full, 4 / 3, 1.0)
           + token_shuffle_s(f, new, tokens, copies, hw))
    # the other direction's compute is the MoE layer's, its experts' extra time included (the
    # dense form's layer alone until schema 25: a 128-expert layer's overlap hid 2x too little)
    busy = layer_c + gpu
    hidden = maximum(0.0, pair.hideable - 2 / 3 * busy) + maximum(0.0, pair.hideable - busy / 3)
    comm = (where(new[MOE_OVERLAP_EP_COMM] > 0, hidden, 2 * pair.hideable) + 2 * pair.exposed
            + where(full, pair.hideable + pair.exposed, 0.0))
    return where(moe, comm, 0.0), where(moe, gpu, 0.0)


@njit(inline=True)
def saved_activations_bytes(f: Any, new: Any, tokens: Vec, element: Vec) -> Vec:
    """Bytes one MoE layer saves per micro-batch for its backward beyond the dense form's MLP of
    the same FFN (simulator.graph.moe): the experts' first GEMM keeps its input, one row per
    computed copy where the dense MLP keeps one per token; the unpermute keeps nothing, the
    probabilities being applied in the experts' activation. The experts' intermediates (the
    GLU's input and output, or the activation's) are the dense form's MLP of the active FFN only
    under sequence parallelism: without it each tp rank routes the whole sequence (`tokens`)
    and an expert shards its FFN over expert_tp, so a rank keeps tokens x topk x FFN where the
    dense form kept (b s / cp) x topk x FFN / tp. A linear's saved input (the experts' two
    GEMMs', the shared expert's) takes `element` bytes: the recipe's quantized copy
    (simulator.graph.quantize), 2 in 16 bits; the router and the GLU's input stay 16-bit. Zero
    without experts; the caller counts the layer-micro-batches a stage holds (none under full
    recompute)."""
    h = f[HIDDEN_SIZE]
    topk, etp = new[MOE_ROUTER_TOPK], new[EXPERT_TP]
    computed = tokens * topk * etp
    glu = where(f[GATED_MLP] > 0, 3.0, 2.0)
    sequence = f[MICRO_BATCH_SIZE] * f[SEQ_LENGTH] / new[CP] / f[TP]
    intermediates = (2.0 * (glu - 1.0) + element) * topk * new[MOE_FFN_HIDDEN_SIZE] * maximum(
        tokens - sequence, 0.0)
    # the router keeps its own input and its fp32 scores, the shared experts their own input
    shared = where(new[MOE_SHARED_EXPERT_INTERMEDIATE_SIZE] > 0, 1.0, 0.0)
    extra = (element * h * (maximum(computed - tokens, 0.0) + shared * tokens) + 2.0 * h * tokens
             + intermediates + 4.0 * tokens * new[NUM_EXPERTS])
    return where(new[NUM_EXPERTS] > 0, extra, 0.0)
