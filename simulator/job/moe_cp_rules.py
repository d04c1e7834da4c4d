"""Cross-field rules of mixture of experts, context parallelism and the attention variants.

Each rule names the fields, their values and the fix, as `validation.job_problems` does; most
restate an assertion of Megatron-Core (`transformer_config.py::__post_init__`,
`training/arguments.py::validate_args`) or of Transformer Engine's context-parallel attention
(`attention/dot_product_attention/context_parallel.py`). A field the simulator does not model
for a setting is refused here, never silently ignored.
"""

from __future__ import annotations

import math

from simulator.job.enums import CpCommType, Framework, Recompute, Schedule, SoftmaxType, TokenDispatcher
from simulator.job.specs import Frozen, Job

# TrainingSpec fields that only mean something for a mixture-of-experts model.
MOE_TRAINING_FIELDS = ("moe_token_dispatcher", "moe_expert_capacity_factor",
                       "moe_pad_expert_input_to_capacity", "moe_grouped_gemm",
                       "moe_overlap_ep_comm", "moe_load_imbalance")
MOE_MODEL_FIELDS = ("moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
                    "moe_layer_freq", "moe_router_score_function")


def uses_new_parallelism(job: Job) -> bool:
    """Whether the job uses anything this module governs (a dense job skips every rule)."""
    m, p = job.model, job.parallel
    return (m.is_moe or m.multi_latent_attention or m.window_size is not None
            or m.softmax_type is not SoftmaxType.VANILLA or m.mtp_num_layers > 0 or m.qk_layernorm
            or p.cp > 1 or p.ep > 1 or p.expert_tp is not None
            or bool(changed(job.training, MOE_TRAINING_FIELDS))
            or bool(changed(m, MOE_MODEL_FIELDS)))


def changed(spec: Frozen, names: tuple[str, ...]) -> list[str]:
    """The fields among `names` whose value differs from the field's default."""
    fields = type(spec).model_fields
    return [n for n in names if getattr(spec, n) != fields[n].default]


def moe_cp_problems(job: Job) -> list[str]:
    if not uses_new_parallelism(job):
        return []
    problems = _framework_problems(job) + _attention_problems(job) + _cp_problems(job)
    problems += _moe_problems(job) if job.model.is_moe else _not_moe_problems(job)
    return problems


def _framework_problems(job: Job) -> list[str]:
    fw = job.training.framework
    if fw is Framework.MEGATRON_LM:
        return []
    return [f"training.framework={fw.value}: mixture of experts, context parallelism, MLA, MTP, "
            f"sliding windows and attention sinks are modelled as Megatron-Core runs them; use "
            f"framework megatron-lm"]


def _attention_problems(job: Job) -> list[str]:
    m, t = job.model, job.training
    fused = [name for name, on in (
        ("model.multi_latent_attention", m.multi_latent_attention),
        ("model.window_size", m.window_size is not None),
        (f"model.softmax_type={m.softmax_type.value}", m.softmax_type is not SoftmaxType.VANILLA),
        (f"parallel.cp={job.parallel.cp}", job.parallel.cp > 1)) if on]
    problems = []
    if fused and not t.flash_attention:
        problems.append(f"{', '.join(fused)} run in Transformer Engine's fused attention; set "
                        f"training.flash_attention: true (the unfused path is not modelled)")
    if m.window_attn_skip_freq is not None and m.window_size is None:
        problems.append("model.window_attn_skip_freq needs model.window_size (the sliding window)")
    if m.window_size is not None and m.window_size >= m.seq_length:
        problems.append(f"model.window_size={m.window_size} >= seq_length={m.seq_length}: every "
                        f"layer would attend to the whole sequence; remove window_size")
    if m.multi_latent_attention and m.num_attention_heads % job.parallel.tp:
        problems.append(f"multi-latent attention splits heads over tp: tp={job.parallel.tp} does "
                        f"not divide num_attention_heads={m.num_attention_heads}")
    return problems


def _cp_problems(job: Job) -> list[str]:
    m, p = job.model, job.parallel
    cp = p.cp
    problems: list[str] = []
    hier = p.hierarchical_context_parallel_sizes
    if cp == 1:
        if hier is not None:
            problems.append("parallel.hierarchical_context_parallel_sizes needs cp > 1")
        return problems
    if m.seq_length % (2 * cp):
        problems.append(f"seq_length={m.seq_length} must be divisible by 2*cp = {2 * cp}: "
                        f"context parallelism gives every rank two chunks of the sequence (causal "
                        f"load balancing); use a multiple of {2 * cp}")
    heads, groups = m.num_attention_heads // p.tp, m.query_groups // p.tp
    a2a = {CpCommType.A2A: cp, CpCommType.A2A_P2P: hier[0] if hier else None}.get(p.cp_comm_type)
    if p.cp_comm_type is CpCommType.A2A_P2P and (hier is None or len(hier) != 2
                                                 or math.prod(hier) != cp):
        problems.append(f"cp_comm_type=a2a+p2p needs parallel.hierarchical_context_parallel_sizes "
                        f"= [a2a size, p2p size] whose product is cp={cp} (got {hier})")
    elif p.cp_comm_type is not CpCommType.A2A_P2P and hier is not None:
        problems.append(f"parallel.hierarchical_context_parallel_sizes is for cp_comm_type=a2a+p2p "
                        f"(got {p.cp_comm_type.value}); remove it")
    elif a2a and (heads % a2a or groups % a2a):
        problems.append(f"cp_comm_type={p.cp_comm_type.value} splits the heads of a tp rank over "
                        f"{a2a} ranks: {heads} query heads and {groups} key/value heads per tp rank "
                        f"must both be divisible by {a2a}; use cp_comm_type p2p or a smaller cp")
    if m.window_size is not None and p.cp_comm_type is not CpCommType.ALL_GATHER:
        problems.append(f"sliding-window attention with cp > 1 runs only with cp_comm_type "
                        f"all_gather in Transformer Engine (got {p.cp_comm_type.value})")
    return problems


def _not_moe_problems(job: Job) -> list[str]:
    m, p, t = job.model, job.parallel, job.training
    named = [f"parallel.ep={p.ep}"] if p.ep > 1 else []
    named += ["parallel.expert_tp"] if p.expert_tp is not None else []
    named += [f"training.{f}" for f in changed(t, MOE_TRAINING_FIELDS)]
    named += [f"model.{f}" for f in changed(m, MOE_MODEL_FIELDS)]
    if not named:
        return []
    return [f"{', '.join(named)} apply to a mixture-of-experts model; set model.num_experts or "
            f"remove them"]


def _moe_problems(job: Job) -> list[str]:
    m, p = job.model, job.parallel
    assert m.num_experts is not None
    e, ep, etp = m.num_experts, p.ep, job.expert_tp
    problems = []
    if e % ep:
        problems.append(f"parallel.ep={ep} does not divide num_experts={e}; every expert rank "
                        f"holds num_experts/ep experts: use a divisor of {e}")
    if m.moe_router_topk > e:
        problems.append(f"moe_router_topk={m.moe_router_topk} exceeds num_experts={e}")
    stage_ranks = p.tp * p.cp * job.dp
    if stage_ranks % (etp * ep):
        problems.append(f"expert_tp*ep = {etp}*{ep} = {etp * ep} does not divide the ranks of a "
                        f"pipeline stage tp*cp*dp = {p.tp}*{p.cp}*{job.dp} = {stage_ranks} (MoE "
                        f"parallel folding needs expert_dp = {stage_ranks}/{etp * ep} whole)")
    if m.moe_ffn % etp:
        problems.append(f"expert_tp={etp} does not divide moe_ffn_hidden_size={m.moe_ffn}")
    freq = m.moe_layer_freq
    if isinstance(freq, tuple) and (len(freq) != m.num_layers or set(freq) - {0, 1}):
        problems.append(f"model.moe_layer_freq as a list needs one 0 (dense) or 1 (MoE) per layer: "
                        f"{m.num_layers} entries (got {len(freq)})")
    if ep * etp > 1 and p.tp > 1 and not p.sequence_parallel:
        problems.append("mixture of experts with tensor and expert parallelism needs "
                        "parallel.sequence_parallel: true (Megatron-Core asserts it)")
    return problems + _training_problems(job)


def _training_problems(job: Job) -> list[str]:
    t, p = job.training, job.parallel
    problems = []
    if t.moe_pad_expert_input_to_capacity and t.moe_expert_capacity_factor is None:
        problems.append("training.moe_pad_expert_input_to_capacity needs "
                        "training.moe_expert_capacity_factor (the capacity to pad to)")
    if t.moe_token_dispatcher is TokenDispatcher.FLEX and job.expert_tp > 1:
        problems.append(f"training.moe_token_dispatcher=flex with expert_tp={job.expert_tp} is not "
                        f"modelled (DeepEP dispatches over the expert-parallel ranks); set "
                        f"parallel.expert_tp: 1 or use the alltoall dispatcher")
    if t.moe_token_dispatcher is TokenDispatcher.FLEX and t.moe_expert_capacity_factor is not None:
        problems.append("training.moe_token_dispatcher=flex (DeepEP) is dropless: remove "
                        "moe_expert_capacity_factor")
    if t.moe_overlap_ep_comm:
        why = []
        if p.ep == 1:
            why.append("parallel.ep > 1")
        if t.moe_token_dispatcher is TokenDispatcher.ALLGATHER:
            why.append("moe_token_dispatcher alltoall or flex")
        if t.recompute is Recompute.FULL:
            why.append("recompute other than full")
        if p.pp > 1 and p.schedule is not Schedule.INTERLEAVED_1F1B:
            why.append("the interleaved schedule when pp > 1")
        if why:
            problems.append(f"training.moe_overlap_ep_comm (Megatron's combined 1F1B overlap) "
                            f"needs {', '.join(why)}")
    return problems
