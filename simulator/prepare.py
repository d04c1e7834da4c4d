"""The parts of a simulation that depend on the job alone, built once per job (layout).

A simulation combines two kinds of work: what the kernel and network models decide (the blocks'
costs, the pipeline's timing, the collectives after it), and what the job's structure alone
decides: its graph, the schedule's round plan, each stage's parameters and memory at its peak
moment, the FLOPs per iteration and the job's summary. The second kind is built here and
memoized per job, so that a loop that simulates the same layout under other kernel or network
models, or again (the scheduler re-simulates a job at each GPU count it tries, a calibration
re-simulates its rows with new efficiencies), builds it once; a new layout builds it anew
("new layout" in bench/bench_simulator.py). Every value is a pure function of the key, so a hit
returns what a fresh build would (tests/simulator_tests/test_caches.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.graph.blocks import JobGraph, build_graph
from simulator.graph.flops import hardware_flops_per_iteration, model_flops_per_iteration
from simulator.graph.params import active_params, total_params
from simulator.job.buckets import bucket_bytes, bucketed_chunks
from simulator.job.enums import CrossEntropyFusion, CudaGraphs
from simulator.job.framework import semantics
from simulator.job.precision import recipe_name
from simulator.job.specs import HardwareSpec, Job
from simulator.memo import Memo, Pinned, read_only
from simulator.memory.stages import MemoryTable, stage_memory_table
from simulator.memory.states import stage_param_counts
from simulator.network.fabric import fabric
from simulator.network.topology import Placement, tp_placement
from simulator.timeline.engine import RoundPlan, round_plan


@dataclass(frozen=True)
class JobStatic:
    """What `simulate` needs of a job that no kernel or network model changes."""

    graph: JobGraph
    plan: RoundPlan
    params: np.ndarray  # (p,) parameters held by one GPU of each stage
    memory: MemoryTable
    model_flops: float
    hardware_flops: float
    summary: dict[str, Any]  # job_summary(job); callers get a copy
    tp_where: Placement  # the tp group's placement (a key of the costed blocks)
    collnet: bool  # the fabric reduces in the switches (the default network model's)
    # What simulate memoizes per job and kernel / network model (p2p delays, the tail's fixed
    # terms) and per job and costed blocks (stage costs): kept here, so that they live and go
    # with the job's entry in JOBS.
    per_models: Memo[Any] = field(default_factory=lambda: Memo(maxsize=8), compare=False,
                                  repr=False)
    per_blocks: Memo[Any] = field(default_factory=lambda: Memo(maxsize=8), compare=False,
                                  repr=False)


# Per job: its configs (pydantic, hashed by content) and its hardware without its efficiencies
# (nothing here reads one). Bounded like `engine.round_plan`'s cache: an entry holds the job's
# round plan (~1 MB for MT-NLG's 11,200 ops).
JOBS: Memo[JobStatic] = Memo(maxsize=256)
# A hardware object -> the first object seen with the same fields but its efficiencies, so that a
# calibration's candidates (one hardware object per set of efficiencies tried) share each job's
# static parts instead of rebuilding them for every evaluation.
HARDWARE_BODIES: Memo[Pinned] = Memo(maxsize=64)
BODY_OF: Memo[Pinned] = Memo(maxsize=256)


def hardware_body(hardware: HardwareSpec) -> Pinned:
    """A key equal for hardware objects that differ only in `efficiency`."""
    return BODY_OF.get(Pinned(hardware), lambda: HARDWARE_BODIES.get(
        hardware.model_dump_json(exclude={"efficiency"}), lambda: Pinned(hardware)))


def job_key(job: Job) -> tuple[object, ...]:
    return job.model, job.training, job.parallel, job.cluster, hardware_body(job.hardware)


def job_static(job: Job) -> JobStatic:
    """The job's static parts, memoized under `job_key`."""
    return JOBS.get(job_key(job), lambda: build_static(job))


def build_static(job: Job) -> JobStatic:
    """The job's static parts (not memoized)."""
    graph = build_graph(job)
    p, v, m = job.parallel.pp, job.parallel.virtual_stages, job.num_microbatches
    all_warmup = semantics(job.training.framework).all_forwards_first_when_m_equals_p and m == p
    plan = round_plan(job.parallel.schedule, p, m, v, all_warmup,
                      job.parallel.microbatch_group_size_per_vp_stage)
    static = JobStatic(graph, plan, stage_param_counts(job), stage_memory_table(job, graph, plan),
                       model_flops_per_iteration(job), hardware_flops_per_iteration(job),
                       job_summary(job), tp_placement(job), fabric(job).collnet)
    read_only(graph.chunk_layers, static.params, static.memory.allocated_bytes,
              static.memory.total_bytes)
    return static


def job_summary(job: Job) -> dict[str, Any]:
    t, p, c = job.training, job.parallel, job.cluster
    return {
        "model": job.model.name,
        "parameters": total_params(job.model),
        "gpu": job.hardware.name,
        "num_gpus": c.num_gpus,
        "gpus_per_node": job.gpus_per_node,
        "tp": p.tp, "pp": p.pp, "dp": job.dp, "virtual_stages": p.virtual_stages,
        "schedule": p.schedule.value,
        # Megatron-Core's interleaved micro-batch groups, only where set (others' summaries as before)
        **({"microbatch_group_size_per_vp_stage": p.microbatch_group_size_per_vp_stage}
           if p.microbatch_group_size_per_vp_stage else {}),
        "sequence_parallel": p.sequence_parallel,
        "distributed_optimizer": p.distributed_optimizer,
        "overlap_grad_reduce": p.overlap_grad_reduce,
        **_bucket_summary(job),
        "global_batch_size": t.global_batch_size,
        "micro_batch_size": t.micro_batch_size,
        "seq_length": job.model.seq_length,
        "precision": t.precision.value,
        "recompute": t.recompute.value,
        "flash_attention": t.flash_attention,
        **_parallel_summary(job),
        **_modern_summary(job),
    }


def _bucket_summary(job: Job) -> dict[str, Any]:
    """The data-parallel gradient buckets (simulator.job.buckets), for jobs that overlap them
    with the backward, and whether the next forwards gather the parameters in them (others'
    summaries are unchanged)."""
    if not job.parallel.overlap_grad_reduce:
        return {}
    every = bool(bucketed_chunks(job).all())
    out: dict[str, Any] = {"grad_bucket_mb": round(bucket_bytes(job) / 1e6, 3),
                           "bucketed_chunks": "every chunk" if every else "the first stage's first chunk"}
    if job.parallel.overlap_param_gather:  # the parameters gathered in the same buckets
        out["overlap_param_gather"] = True
    return out


def _parallel_summary(job: Job) -> dict[str, Any]:
    """Context and expert parallelism, for jobs that use them (others' summaries are unchanged)."""
    p = job.parallel
    out: dict[str, Any] = {}
    if p.cp > 1:
        out.update(cp=p.cp, cp_comm_type=p.cp_comm_type.value)
    if job.model.is_moe:
        out.update(ep=p.ep, expert_tp=job.expert_tp, expert_dp=job.expert_dp,
                   moe_token_dispatcher=job.training.moe_token_dispatcher.value,
                   active_parameters=active_params(job.model))
    return out


def _modern_summary(job: Job) -> dict[str, Any]:
    """The summary's entries for low precision, FSDP, CUDA graphs and overlapped tp
    communication, present only when a job uses them (older results keep their keys)."""
    t, p = job.training, job.parallel
    out: dict[str, Any] = {}
    recipe = recipe_name(job)
    if recipe is not None:
        out["low_precision_recipe"] = recipe
        out["fp8_param_gather"] = t.fp8_param_gather
        if t.first_last_layers_bf16:
            out["bf16_layers"] = [t.num_layers_at_start_in_bf16, t.num_layers_at_end_in_bf16]
        if t.fp8_dot_product_attention:
            out["fp8_dot_product_attention"] = True
    if p.data_parallel_sharding is not None:
        out["data_parallel_sharding"] = job.sharding.value
    if t.cuda_graphs is not CudaGraphs.NONE:
        out["cuda_graphs"] = t.cuda_graphs.value
    if p.tp_comm_overlap:
        out["tp_comm_overlap"] = True
    if t.cross_entropy_fusion is not CrossEntropyFusion.NONE:
        out["cross_entropy_fusion"] = t.cross_entropy_fusion.value
    return out
