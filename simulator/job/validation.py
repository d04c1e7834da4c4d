"""Cross-field rules of a job, in one place.

Each rule names the fields, their values and the fix. All violations are reported together
(joined by '; ') so a user fixes a file in one round trip.
"""

from __future__ import annotations

import itertools

from simulator.errors import ConfigError
from simulator.job.enums import (
    CrossEntropyFusion,
    CudaGraphs,
    DataParallelSharding,
    Framework,
    Recompute,
    Schedule,
)
from simulator.job.framework import semantics
from simulator.job.limits import size_problems
from simulator.job.moe_cp_rules import moe_cp_problems
from simulator.job.param_bytes import optimizer_precision_problems
from simulator.job.partition import partition_problems
from simulator.job.precision import precision_problems
from simulator.job.recompute_rules import recompute_problems
from simulator.job.specs import Job


def job_problems(job: Job) -> list[str]:
    """Every cross-field problem of `job`, as user-facing sentences (empty when valid)."""
    m, t, p, c = job.model, job.training, job.parallel, job.cluster
    tp, pp = p.tp, p.pp
    problems: list[str] = []
    if m.hidden_size % m.num_attention_heads and m.kv_channels is None:
        problems.append(
            f"num_attention_heads={m.num_attention_heads} does not divide "
            f"hidden_size={m.hidden_size}; choose a head count that divides it"
        )
    if m.num_attention_heads % m.query_groups:
        problems.append(
            f"num_query_groups={m.query_groups} does not divide num_attention_heads="
            f"{m.num_attention_heads}; use a divisor of the head count"
        )
    if m.num_attention_heads % tp:
        problems.append(
            f"tensor_parallel_size={tp} does not divide num_attention_heads={m.num_attention_heads}; "
            f"use a tp that divides the head count"
        )
    elif m.query_groups % tp:
        problems.append(
            f"tensor_parallel_size={tp} does not divide num_query_groups={m.query_groups}; "
            f"use tp <= {m.query_groups} that divides it"
        )
    if m.ffn % tp:
        problems.append(f"tensor_parallel_size={tp} does not divide ffn_hidden_size={m.ffn}")
    problems += (_pipeline_problems(job) + _framework_problems(job) + _network_problems(job)
                 + moe_cp_problems(job) + precision_problems(job) + _sharding_problems(job)
                 + _overlap_problems(job) + size_problems(job) + recompute_problems(job)
                 + optimizer_precision_problems(job))
    dp, cp = job.dp, p.cp
    names, sizes = ("tp*pp", f"{tp}*{pp}") if cp == 1 else ("tp*cp*pp", f"{tp}*{cp}*{pp}")
    if p.dp is not None and tp * cp * pp * p.dp != c.num_gpus:
        problems.append(
            f"{names}*dp = {sizes}*{p.dp} = {tp * cp * pp * p.dp} != num_gpus={c.num_gpus}; "
            f"make the product equal the GPU count (or omit dp)"
        )
    elif c.num_gpus % (tp * cp * pp):
        problems.append(
            f"{names} = {tp * cp * pp} does not divide num_gpus={c.num_gpus}; no integer "
            f"data-parallel size"
        )
    elif t.global_batch_size % (dp * t.micro_batch_size):
        problems.append(
            f"global_batch_size={t.global_batch_size} is not divisible by "
            f"dp*micro_batch_size = {dp}*{t.micro_batch_size}; use a multiple of "
            f"{dp * t.micro_batch_size}"
        )
    elif p.schedule is Schedule.INTERLEAVED_1F1B:
        problems += _group_problems(job)
    gpn = job.gpus_per_node
    if c.num_gpus > gpn and c.num_gpus % gpn:
        problems.append(
            f"num_gpus={c.num_gpus} is not a whole number of nodes of gpus_per_node={gpn}"
        )
    if t.flash_attention and not job.hardware.supports_flash_attention:
        problems.append(f"flash_attention=true is not supported on {job.hardware.name}; set it false")
    if t.precision not in job.hardware.peak_tflops:
        problems.append(
            f"precision={t.precision.value} is not supported on {job.hardware.name}; "
            f"use {', '.join(x.value for x in job.hardware.peak_tflops)}"
        )
    return problems


def _group_problems(job: Job) -> list[str]:
    """The interleaved schedule's micro-batch groups, as Megatron-Core checks them
    (`schedules.py::forward_backward_pipelining_with_interleaving`): a group of pp (the
    default) to m micro-batches, and a last group of none or at least pp."""
    p, m = job.parallel, job.num_microbatches
    pp, group = p.pp, p.microbatch_group_size_per_vp_stage
    if group is None:
        if m % pp:
            grouped = not semantics(job.training.framework).all_forwards_first_when_m_equals_p
            hint = (" (or set parallel.microbatch_group_size_per_vp_stage, Megatron-Core >= 0.10)"
                    if grouped else "")
            return [f"interleaved_1f1b needs the number of micro-batches ({m}) to be a multiple of "
                    f"pipeline_parallel_size={pp}; change global_batch_size or micro_batch_size{hint}"]
        return []
    if not pp <= group <= m:
        return [f"parallel.microbatch_group_size_per_vp_stage={group} must lie in "
                f"[pipeline_parallel_size={pp}, number of micro-batches={m}] (Megatron-Core raises "
                f"otherwise)"]
    if 0 < m % group < pp:
        return [f"the last group of micro-batches, {m} % microbatch_group_size_per_vp_stage={group} "
                f"= {m % group}, is fewer than pipeline_parallel_size={pp} (Megatron-Core refuses "
                f"its dependency bubbles); make it 0 or at least {pp}"]
    return []


def _pipeline_problems(job: Job) -> list[str]:
    p = job.parallel
    pp, v = p.pp, p.virtual_stages
    problems = []
    if v > 1 and p.schedule is not Schedule.INTERLEAVED_1F1B:
        problems.append(
            f"virtual_stages={v} needs schedule=interleaved_1f1b (got {p.schedule.value})"
        )
    group = p.microbatch_group_size_per_vp_stage
    if group is not None and p.schedule is not Schedule.INTERLEAVED_1F1B:
        problems.append(
            f"parallel.microbatch_group_size_per_vp_stage={group} orders the interleaved schedule's "
            f"model chunks and needs schedule=interleaved_1f1b (got {p.schedule.value}); remove it"
        )
    if group is not None and semantics(job.training.framework).all_forwards_first_when_m_equals_p:
        problems.append(
            f"parallel.microbatch_group_size_per_vp_stage is Megatron-Core's (core_r0.10.0 on); "
            f"training.framework={job.training.framework.value} schedules groups of pp; remove it"
        )
    if p.schedule is Schedule.INTERLEAVED_1F1B and (v < 2 or pp < 2):
        problems.append(
            f"schedule=interleaved_1f1b needs virtual_stages >= 2 and pipeline_parallel_size >= 2 "
            f"(got virtual_stages={v}, pp={pp}); use 1f1b otherwise"
        )
    return problems + partition_problems(job)


def _framework_problems(job: Job) -> list[str]:
    """The eager PyTorch stack (simulator.graph.eager) is modelled on one model replica per GPU:
    data parallelism only, and checkpointing whole layers."""
    t, p = job.training, job.parallel
    if not semantics(t.framework).eager_autocast:
        return []
    problems = []
    if p.tp > 1 or p.pp > 1 or p.sequence_parallel:
        problems.append(
            f"training.framework={t.framework.value} is modelled with data parallelism only "
            f"(got tp={p.tp}, pp={p.pp}, sequence_parallel={p.sequence_parallel}); use tp=1, "
            f"pp=1, or framework megatron-lm for model parallelism")
    if t.recompute is Recompute.SELECTIVE:
        problems.append(
            f"training.recompute=selective is Megatron's; with framework={t.framework.value} use "
            f"none or full (torch.utils.checkpoint of whole layers)")
    return problems


def _network_problems(job: Job) -> list[str]:
    """`cluster.nvlink_domain` and `cluster.topology` against the nodes and the GPU count."""
    c, gpn = job.cluster, job.gpus_per_node
    problems = []
    domain = c.nvlink_domain or job.hardware.nvlink_domain
    if domain is not None and domain % gpn and gpn % domain:
        problems.append(f"cluster.nvlink_domain={domain} and gpus_per_node={gpn}: one must divide "
                        f"the other (an NVLink domain is whole nodes, or a part of one)")
    topo = c.topology
    if topo is None:
        return problems
    if topo.tiers is not None and "switch_radix" in topo.model_fields_set:
        problems.append("cluster.topology: give tiers or switch_radix (which only sizes the "
                        "default tiers), not both")
    if topo.nics_per_node is not None and topo.nic_bandwidth_Gbps is None:
        problems.append("cluster.topology.nics_per_node needs nic_bandwidth_Gbps (without it the "
                        "node's bandwidth is cluster.inter_node_bandwidth_Gbps)")
    tiers = topo.tier_list(gpn)
    if tiers[-1].oversubscription != 1.0:
        problems.append(f"cluster.topology.tiers: the top tier ({tiers[-1].name or tiers[-1].size}) "
                        f"has nothing above it; its oversubscription must be 1 (got "
                        f"{tiers[-1].oversubscription:g}: put it on the tier below)")
    sizes = [t.size for t in tiers]
    if any(b <= a for a, b in itertools.pairwise(sizes)) or any(s % gpn for s in sizes):
        problems.append(f"cluster.topology.tiers sizes {sizes}: each must be a whole number of "
                        f"nodes of {gpn} GPUs and larger than the tier below")
    if sizes[-1] < c.num_gpus:
        problems.append(f"cluster.topology: its top tier holds {sizes[-1]} GPUs < num_gpus="
                        f"{c.num_gpus}; add a tier (tiers) or raise switch_radix")
    if topo.nic_bandwidth_Gbps is not None and c.inter_node_bandwidth_Gbps is not None:
        node = topo.nic_bandwidth_Gbps * (topo.nics_per_node or gpn)
        if abs(node - c.inter_node_bandwidth_Gbps) > 1e-6 * node:
            problems.append(f"cluster.topology.nic_bandwidth_Gbps={topo.nic_bandwidth_Gbps} x "
                            f"{topo.nics_per_node or gpn} NICs = {node:g} Gbps != "
                            f"cluster.inter_node_bandwidth_Gbps={c.inter_node_bandwidth_Gbps:g}; "
                            f"give one of them")
    return problems


def _sharding_problems(job: Job) -> list[str]:
    """Megatron-FSDP's strategies, as Megatron-LM runs them (its own layer graph)."""
    p, t = job.parallel, job.training
    chosen = p.data_parallel_sharding
    problems = []
    if chosen is DataParallelSharding.NO_SHARD and p.distributed_optimizer:
        problems.append("parallel.distributed_optimizer=true is data_parallel_sharding=optim, "
                        "not no_shard; remove one of them")
    if job.shards_gradients and t.framework is not Framework.MEGATRON_LM:
        problems.append(f"parallel.data_parallel_sharding={job.sharding.value} is modelled for "
                        f"framework megatron-lm (Megatron-FSDP), not {t.framework.value}; use "
                        f"optim or no_shard")
    if job.shards_gradients:
        apart = {"model.num_experts": job.model.is_moe,
                 "model.mtp_num_layers": job.model.mtp_num_layers > 0}
        problems += [f"parallel.data_parallel_sharding={job.sharding.value} with {k} is not "
                     f"modelled together yet (FSDP units and their collectives are costed for "
                     f"dense layers); use optim (the distributed optimizer) or drop {k}"
                     for k, on in apart.items() if on]
    return problems


def _overlap_problems(job: Job) -> list[str]:
    """What the host no longer does (CUDA graphs), TE's overlapped tp communication and the
    distributed optimizer's overlapped parameter gather."""
    p, t = job.parallel, job.training
    problems = []
    if p.tp_comm_overlap and not (p.sequence_parallel and p.tp > 1):
        problems.append("parallel.tp_comm_overlap=true needs sequence_parallel=true and tp > 1 "
                        "(Megatron: tp communication overlap happens only with sequence "
                        "parallelism); set both or remove it")
    if p.overlap_param_gather and not (job.shards_optimizer and p.overlap_grad_reduce):
        # Megatron-LM arguments.py: "--overlap-param-gather only supported with distributed
        # optimizer" and "Must use --overlap-param-gather with --overlap-grad-reduce"
        missing = [f"parallel.{k}: true" for k, on in
                   (("distributed_optimizer", job.shards_optimizer),
                    ("overlap_grad_reduce", p.overlap_grad_reduce)) if not on]
        problems.append(f"parallel.overlap_param_gather=true needs the distributed optimizer and "
                        f"the overlapped gradient reduction (Megatron refuses it without them); "
                        f"set {' and '.join(missing)}, or remove it")
    megatron_only = {"parallel.tp_comm_overlap": p.tp_comm_overlap,
                     "training.cuda_graphs": t.cuda_graphs is not CudaGraphs.NONE,
                     f"training.precision={t.precision.value}": t.precision.is_low,
                     "training.cross_entropy_fusion=te":
                         t.cross_entropy_fusion is not CrossEntropyFusion.NONE}
    if p.overlap_param_gather and t.framework is not Framework.MEGATRON_LM:
        problems.append(f"parallel.overlap_param_gather=true is Megatron-Core's distributed "
                        f"optimizer setting, not {t.framework.value}'s; remove it or use "
                        f"framework megatron-lm")
    if t.framework is not Framework.MEGATRON_LM:
        problems += [f"{k} is modelled with Transformer Engine under framework megatron-lm, not "
                     f"{t.framework.value}; remove it or use megatron-lm"
                     for k, on in megatron_only.items() if on]
    if t.cuda_graphs is not CudaGraphs.NONE and job.model.is_moe and not t.moe_pad_expert_input_to_capacity:
        # transformer_config.py: "moe cuda graph is only supported with drop-padding MoE" (a
        # dropless layer syncs its token counts to the host)
        problems.append(f"training.cuda_graphs={t.cuda_graphs.value} with a dropless MoE model is "
                        f"not modelled (Megatron captures MoE layers only with drop-and-pad); set "
                        f"training.moe_pad_expert_input_to_capacity with a capacity factor, or "
                        f"cuda_graphs none")
    return problems


def validate_job(job: Job) -> Job:
    """Return `job` unchanged if valid, else raise one `ConfigError` listing every problem."""
    problems = job_problems(job)
    if problems:
        raise ConfigError("; ".join(problems))
    return job
