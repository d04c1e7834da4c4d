"""Job -> SimulationResult: graph, lowering to timed tasks, pipeline engine, tail, metrics."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from simulator.costs.analytic import AnalyticKernelModel, CostSource, KernelModel
from simulator.costs.comm_groups import group_placements, uses_group_placements
from simulator.errors import ProfileError
from simulator.graph.blocks import BLOCKS, JobGraph, blocks_key
from simulator.graph.ops import Block
from simulator.job.catalog import data_dir
from simulator.job.enums import CollectiveKind
from simulator.job.specs import GiB, Job
from simulator.memo import Memo, Pinned, read_only
from simulator.memory.fit import memory_fit
from simulator.memory.stages import ORDER_SIGNS
from simulator.network.collectives import NetworkModel
from simulator.network.fabric import fabric
from simulator.network.nccl import load_nccl_table
from simulator.network.topology import Placement, boundary_placements
from simulator.prepare import BODY_OF, HARDWARE_BODIES, JOBS, JobStatic, job_static, job_summary
from simulator.report.metrics import cost_usd, utilization
from simulator.report.result import SimulationResult, StageReport
from simulator.timeline.engine import Timeline, round_plan, run_pipeline
from simulator.timeline.lowering import (
    COMM_TIMES,
    OP_COSTS,
    BlockCost,
    BlockReplacer,
    StageCosts,
    block_costs,
    block_table,
    stage_costs,
)
from simulator.timeline.param_gather import (
    GatherBuckets,
    first_forward_waits,
    gather_buckets,
    overlaps_param_gather,
    time_with_waits,
)
from simulator.timeline.stragglers import scale_loss
from simulator.timeline.tail import FixedTail, Tail, compute_tail, fixed_tail

if TYPE_CHECKING:
    from simulator.costs.profile_format import Profile
    from simulator.costs.traced import TracedCosts, TracedOptions

# Costed blocks (and their table for the chunk grids) of every (blocks, hardware, tp placement,
# kernel and network model) seen recently: see `_costed_blocks`.
COSTED: Memo[tuple[tuple[BlockCost, ...], np.ndarray]] = Memo(maxsize=512)
# The distinct p2p placements of the pipeline boundaries and each boundary's index among them,
# per (pp, tp, dp, GPUs per node, GPUs, fabric): what `topology.pp_placement` reads.
PLACEMENTS: Memo[tuple[tuple[Placement, ...], np.ndarray]] = Memo(maxsize=512)
NETWORKS: Memo[NetworkModel] = Memo(maxsize=64)
# the breakdown terms on which a slow GPU stretches the critical path (simulator.timeline.stragglers)
GPU_BOUND = ("forward", "backward", "recompute", "pipeline_bubble", "optimizer")


def default_network(job: Job, collnet: bool | None = None) -> NetworkModel:
    """The job's network model (a frozen function of the hardware, the two bandwidths and
    whether the switches reduce in the network (`collnet`, the job's fabric's when None),
    memoized: the NCCL table's path is resolved once)."""
    hw, intra, inter = job.hardware, job.intra_node_bandwidth_Bps, job.inter_node_bandwidth_Bps
    collnet = fabric(job).collnet if collnet is None else collnet

    def build() -> NetworkModel:
        table = load_nccl_table(str(data_dir() / hw.nccl_tables)) if hw.nccl_tables else None
        return NetworkModel(hw, intra, inter, table, collnet)
    return NETWORKS.get((Pinned(hw), intra, inter, collnet), build)


def default_kernels(job: Job) -> KernelModel:
    return AnalyticKernelModel(job.hardware, job.training.precision.base)


def simulate(job: Job, kernels: KernelModel | None = None,
             network: NetworkModel | None = None, blocks: BlockReplacer | None = None
             ) -> SimulationResult:
    """Simulate one training iteration of `job` (validated) and return its frozen result.
    `blocks` replaces the op-level block costs (e.g. phases of a traced stack, simulator.costs.traced)."""
    static = job_static(job)
    graph, plan, memory = static.graph, static.plan, static.memory
    # the per-model terms below are functions of the job's hardware and the two models (a
    # caller's by identity; the default ones are functions of the job): memoized in the job's
    # entry, which hardware objects differing only in efficiencies share (prepare.job_key)
    models = (Pinned(job.hardware), None if kernels is None else Pinned(kernels),
              None if network is None else Pinned(network))
    costed, cached_table = _costed_blocks(job, graph, kernels, network, static)
    kernels = kernels or default_kernels(job)
    network = network or default_network(job, static.collnet)
    costs: StageCosts
    if blocks is None:
        costs, coverage = static.per_blocks.get(Pinned(cached_table), lambda: _costs(
            job, graph, costed, cached_table))
    else:
        costs, coverage = _costs(job, graph, (*blocks.replace_blocks(graph, *costed[:3]),
                                              *costed[3:]), None)
    p, m = job.parallel.pp, job.num_microbatches
    edge_delays, fixed, gathers = static.per_models.get(
        models, lambda: _per_models(job, static, kernels, network))
    timeline = run_pipeline(plan, costs.forward_s, costs.backward_s, edge_delays)
    waits = None
    if gathers is not None:  # --overlap-param-gather: first forwards wait for their parameters
        waits = first_forward_waits(job, timeline, costs.forward_s, gathers)
        read_only(waits)
        timeline = time_with_waits(plan, costs.forward_s, costs.backward_s, edge_delays, waits)
    tail = compute_tail(job, timeline, static.params, kernels, network, fixed)
    stage_total = timeline.stage_end + tail.total_s
    critical = int(stage_total.argmax())
    idle = np.bincount(plan.stage, weights=timeline.idle, minlength=p)
    p2p = np.bincount(plan.stage, weights=timeline.p2p_exposed, minlength=p)
    breakdown = _breakdown(costs, tail, m, critical, idle, p2p, 0.0)
    if waits is not None:  # part of the critical stage's forwards: dp communication it waited for
        breakdown["dp_comm_exposed"] += float(waits[critical].sum())
    loss = scale_loss(job, _layer_blocks(job, graph, costs), sum(breakdown[k] for k in GPU_BOUND))
    breakdown["scale_loss"] = loss.total_s
    iteration = float(stage_total.max()) + loss.total_s
    stages = tuple(map(StageReport, range(p), (stage_total - idle).tolist(),
                       (iteration - stage_total + idle).tolist(), memory.stages))
    peak = float(memory.total_bytes.max())
    allocated = float(memory.allocated_bytes.max())
    fit = memory_fit(allocated, job.hardware.reserved_memory_GiB * GiB, job.hardware.memory_bytes)
    model_flops, hw_flops = static.model_flops, static.hardware_flops
    tokens_per_s = job.training.global_batch_size * job.model.seq_length / iteration
    train_tokens = job.training.train_tokens
    time_to_train = train_tokens / tokens_per_s if train_tokens else None
    return SimulationResult(
        job=dict(static.summary),
        iteration_time_s=iteration,
        breakdown=breakdown,
        critical_stage=critical,
        stages=stages,
        num_microbatches=m,
        tokens_per_s=tokens_per_s,
        model_flops_per_iteration=model_flops,
        hardware_flops_per_iteration=hw_flops,
        mfu=utilization(model_flops, iteration, job),
        hfu=utilization(hw_flops, iteration, job),
        peak_memory_bytes=peak,
        memory_capacity_bytes=job.hardware.memory_bytes,
        fits_in_memory=fit.fits,
        cost_per_iteration_usd=cost_usd(iteration, job),
        train_tokens=train_tokens,
        time_to_train_s=time_to_train,
        cost_to_train_usd=cost_usd(time_to_train, job) if time_to_train else None,
        profile_coverage=dict(coverage),
        timeline=timeline,
        dp_comm_s=tuple(float(x) for x in tail.dp_comm_s),
        graph=graph,
        costs=costs,
        tail=tail,
        p2p_s=tuple(float(x) for x in edge_delays),
        peak_allocated_bytes=allocated,
        scale_loss=loss,
        memory_required_bytes=fit.required_bytes,
        memory_decided_by=fit.decided_by,
        param_gather_wait_s=waits,
    )


def clear_caches() -> None:
    """Forget every memoized plan, block and block cost (the next simulation is cold)."""
    clear_layout_caches()
    BLOCKS.clear()
    COSTED.clear()
    NETWORKS.clear()
    OP_COSTS.clear()
    COMM_TIMES.clear()


def clear_layout_caches() -> None:
    """Forget what depends on the pipeline layout (round plans, the jobs' static parts, p2p
    placements), keeping the blocks of the models and their costs: the next simulation is what
    a search that tries a new layout of a known model pays."""
    round_plan.cache_clear()
    JOBS.clear()
    HARDWARE_BODIES.clear()
    BODY_OF.clear()
    PLACEMENTS.clear()
    ORDER_SIGNS.clear()


def _costed_blocks(job: Job, graph: JobGraph, kernels: KernelModel | None,
                   network: NetworkModel | None, static: JobStatic
                   ) -> tuple[tuple[BlockCost, ...], np.ndarray]:
    """The blocks' costs, memoized. They depend on the blocks (`blocks_key`), the hardware
    (efficiencies included; an immutable object, keyed by identity), the placements of the
    groups their collectives run on (tp; experts', cp's and FSDP's dp group where the job has
    them), and the kernel and network models: the default ones are functions of the hardware,
    the precision (in the training config) and the cluster's bandwidths; a caller's own models
    enter the key by identity."""
    groups = (tuple(group_placements(job).items())
              if uses_group_placements(job) else static.tp_where)
    key = (blocks_key(job), Pinned(job.hardware), groups,
           Pinned(kernels) if kernels is not None else None,
           Pinned(network) if network is not None else
           (job.intra_node_bandwidth_Bps, job.inter_node_bandwidth_Bps, static.collnet))

    def compute() -> tuple[tuple[BlockCost, ...], np.ndarray]:
        costed = block_costs(job, graph, kernels or default_kernels(job),
                             network or default_network(job, static.collnet))
        return costed, block_table(*costed)

    return COSTED.get(key, compute)


def _costs(job: Job, graph: JobGraph, costed: tuple[BlockCost, ...],
           table: np.ndarray | None) -> tuple[StageCosts, dict[str, float]]:
    costs = stage_costs(job, graph, costed, table)
    read_only(costs.forward_s, costs.backward_s, *costs.parts.values(),
              *(costs.forward_parts or {}).values(), *(costs.backward_parts or {}).values())
    return costs, _coverage(costs, job, graph)


def _per_models(job: Job, static: JobStatic, kernels: KernelModel, network: NetworkModel
                ) -> tuple[np.ndarray, FixedTail, GatherBuckets | None]:
    """The p2p delays, the tail's timeline-independent terms and the parameter gathers the
    next forwards wait for (memoized per job and models)."""
    delays = _edge_delays(job, static.graph, network)
    fixed = fixed_tail(job, static.params, kernels, network)
    gathers = gather_buckets(job, static.params, network) if overlaps_param_gather(job) else None
    read_only(delays, *(a for a in vars(fixed).values() if isinstance(a, np.ndarray)),
              *(vars(gathers).values() if gathers is not None else ()))
    return delays, fixed, gathers


def _edge_delays(job: Job, graph: JobGraph, network: NetworkModel) -> np.ndarray:
    """p2p seconds per pipeline boundary; index p-1 is the last -> first stage (interleaving).
    One transfer time per distinct placement (within a node / across nodes), spread to the
    boundaries by the memoized index of each boundary's placement."""
    p = job.parallel.pp
    if p == 1:
        return np.zeros(1)
    distinct, which = PLACEMENTS.get(
        (p, job.parallel.tp, job.dp, job.gpus_per_node, job.cluster.num_gpus, fabric(job)),
        lambda: boundary_placements(job))
    nbytes = graph.p2p_bytes
    return np.array([network.time(CollectiveKind.SEND_RECV, nbytes, w) for w in distinct])[which]


def _breakdown(costs: StageCosts, tail: Tail, m: int, c: int, idle: np.ndarray, p2p: np.ndarray,
               wait: float) -> dict[str, float]:
    parts = {name: float(m * grid[c].sum()) for name, grid in costs.parts.items()}
    parts["tp_comm"] += float(tail.sp_grad_sync_s[c])
    if "fsdp_comm" not in parts:
        parts["fsdp_comm"] = 0.0
    return {
        **parts,
        "pp_comm": float(p2p[c]),
        "dp_comm_exposed": float(tail.dp_exposed_s[c]),
        "embedding_sync": float(tail.embedding_sync_s[c]),
        "pipeline_bubble": float(idle[c] - p2p[c] + wait),
        "optimizer": float(tail.optimizer_s[c]),
    }


def _layer_blocks(job: Job, graph: JobGraph, costs: StageCosts
                  ) -> list[tuple[float, BlockCost, Block]]:
    """Every layer block with how many of it the model runs and its cost."""
    counts = [float(n) for n in graph.layer_counts.sum(axis=(1, 2))] if graph.other_layers \
        else [job.model.num_layers]
    return list(zip(counts, (costs.layer, *costs.other_layers), graph.layer_blocks, strict=True))


def _coverage(costs: StageCosts, job: Job, graph: JobGraph) -> dict[str, float]:
    weighted = [*((n, cost) for n, cost, _ in _layer_blocks(job, graph, costs)),
                (1, costs.embedding), (1, costs.head)]
    totals: dict[str, float] = defaultdict(float)
    for weight, block in weighted:
        for source, seconds in block.by_source.items():
            totals[source.value] += weight * seconds
    grand = sum(totals.values()) or 1.0
    return {s.value: totals.get(s.value, 0.0) / grand for s in CostSource}


# Simulations from a profile directory (operator measurements or traces of the real stack).

def simulate_traced(job: Job, profile: str | Profile, options: TracedOptions | None = None,
                    fallback: KernelModel | None = None,
                    network: NetworkModel | None = None) -> SimulationResult:
    """`simulate` with a traced profile's phase costs; `profile_coverage` reports the share of
    GPU time that was traced, scaled or analytic."""
    from simulator.costs.traced import traced_costs

    return _simulate(traced_costs(profile, job, options, fallback), network)


def _simulate(costs: TracedCosts, network: NetworkModel | None) -> SimulationResult:
    from simulator.costs.traced import TracedKernelModel

    precision = costs.job.training.precision
    if precision.is_low:
        raise ProfileError(f"a traced profile holds the phases of a 16-bit stack; it cannot cost "
                           f"training.precision={precision.value} (its quantize kernels and "
                           f"low-precision GEMMs were never traced); simulate without --profile")
    kernels = TracedKernelModel(costs, costs.fallback)
    result = simulate(costs.job, kernels=kernels, network=network, blocks=costs)
    return replace(result, profile_coverage=costs.coverage())


def simulate_with_profile(job: Job, path: str, strict: bool = False
                          ) -> tuple[SimulationResult, dict[str, str] | None]:
    """`simulate` from any profile directory: traced phases when it has traces (op
    measurements, if also present, cost what no trace covers), else its op measurements.
    Returns the result and, for a traced profile, each phase's source."""
    from simulator.costs.profile_format import read_profile
    from simulator.costs.profiled import (
        ProfiledKernelModel,
        check_device,
        kernel_model_from_profile,
        network_from_profile,
        ops_from_table,
    )
    profile = read_profile(path)
    network = network_from_profile(path, job) if profile.collectives is not None else None
    if not profile.traced:
        kernels = kernel_model_from_profile(path, job, strict)
        return simulate(job, kernels=kernels, network=network), None
    check_device(profile, job, strict)
    analytic = AnalyticKernelModel(job.hardware, job.training.precision.base)
    fallback: KernelModel = analytic
    if profile.ops is not None:
        fallback = ProfiledKernelModel.from_measurements(ops_from_table(profile.ops), analytic)
    from simulator.costs.traced import TracedCosts

    costs = TracedCosts(profile, job, None, fallback)
    return _simulate(costs, network), costs.sources()


__all__ = ["Timeline", "clear_caches", "clear_layout_caches", "default_kernels", "default_network",
           "job_summary", "simulate", "simulate_traced", "simulate_with_profile"]
