"""Record columns of the dimensions added after the dense surrogate: mixture of experts (MoE),
multi-latent attention (MLA), multi-token prediction (MTP), context and expert parallelism,
low-precision recipes, data-parallel sharding, CUDA graphs, tp comm overlap and NVLink domains.

Every column is a scalar named after the job field it holds (Megatron-Core's argument names), so
the search can build candidate tables without a `Job`. Three fields are not scalars in the job
and are held as scalars here: `training.recompute_modules` as a bit mask (`modules_mask`), the
MoE layer pattern (`ModelSpec.moe_layer_freq`, an int k or a 0/1
list per layer) as ``moe_first_dense_layers`` leading dense layers followed by every
``moe_layer_freq``-th layer MoE (DeepSeek-V3 / Kimi K2: 3 / 1 dense layers first, then all MoE;
Mixtral / Qwen3: 0 and 1), and "None" choices as ``"none"`` or 0 (``num_experts=0`` is a dense
model). A job whose field cannot be held (a sliding-window pattern, a topology of switch tiers,
capacity-factor routing, ...) is refused by `new_columns_of_job` with the field's name, never
turned silently into another job.
"""

from __future__ import annotations

from typing import Any

from simulator.errors import ConfigError
from simulator.job.enums import (
    CpCommType,
    CudaGraphs,
    DataParallelSharding,
    Fp4Recipe,
    Fp8Recipe,
    RecomputeModule,
    RouterScore,
    SoftmaxType,
    StateDtype,
    TokenDispatcher,
)
from simulator.job.precision import recipe_name
from simulator.job.specs import ClusterSpec, Job, ModelSpec, ParallelPlan, TrainingSpec

NONE = "none"  # a None choice (fp8_recipe, fp4_recipe, data_parallel_sharding) in a record

NEW_MODEL_COLUMNS = ("kv_channels", "num_experts", "moe_router_topk", "moe_ffn_hidden_size",
                     "moe_shared_expert_intermediate_size", "moe_first_dense_layers",
                     "moe_layer_freq", "moe_router_score_function", "multi_latent_attention",
                     "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
                     "v_head_dim", "qk_layernorm", "mtp_num_layers")
NEW_TRAINING_COLUMNS = ("fp8_recipe", "fp4_recipe", "cuda_graphs", "moe_token_dispatcher",
                        "moe_overlap_ep_comm", "grad_reduce_in_fp32", "exp_avg_dtype",
                        "exp_avg_sq_dtype", "recompute_modules")
NEW_PLAN_COLUMNS = ("cp", "cp_comm_type", "ep", "expert_tp", "data_parallel_sharding",
                    "tp_comm_overlap", "first_stage_layers", "last_stage_layers",
                    "overlap_param_gather")
NEW_CLUSTER_COLUMNS = ("nvlink_domain",)
NEW_COLUMNS: tuple[str, ...] = (NEW_MODEL_COLUMNS + NEW_TRAINING_COLUMNS + NEW_PLAN_COLUMNS
                                + NEW_CLUSTER_COLUMNS)


def new_column(new: Any, name: str) -> Any:
    """Row `name` of a (`NEW_COLUMNS`, rows) matrix of the new columns' values."""
    return new[NEW_COLUMNS.index(name)]

# Closed choices of the categorical new columns (the record's strings; "none" for None).
CHOICES: dict[str, tuple[str, ...]] = {
    "moe_router_score_function": tuple(s.value for s in RouterScore),
    "fp8_recipe": (NONE, *(r.value for r in Fp8Recipe)),
    "fp4_recipe": (NONE, *(r.value for r in Fp4Recipe)),
    "cuda_graphs": tuple(c.value for c in CudaGraphs),
    "moe_token_dispatcher": tuple(d.value for d in TokenDispatcher),
    "cp_comm_type": tuple(c.value for c in CpCommType),
    "data_parallel_sharding": (NONE, *(s.value for s in DataParallelSharding)),
    "grad_reduce_in_fp32": (NONE, "true", "false"),  # none: the framework's default
    "exp_avg_dtype": tuple(d.value for d in StateDtype),
    "exp_avg_sq_dtype": tuple(d.value for d in StateDtype),
}
NEW_CATEGORICAL_COLUMNS = tuple(CHOICES)
NEW_BOOLEAN_COLUMNS = ("multi_latent_attention", "qk_layernorm", "tp_comm_overlap", "moe_overlap_ep_comm",
                       "overlap_param_gather")

# A dense 16-bit job without the new dimensions. ``expert_tp`` and ``nvlink_domain`` 0 mean
# "the job's default" (tp; the node) for tables saved before these columns; records written by
# `new_columns_of_job` hold the resolved values.
NEW_DEFAULTS: dict[str, Any] = {
    "kv_channels": 0, "num_experts": 0, "moe_router_topk": 0, "moe_ffn_hidden_size": 0,
    "moe_shared_expert_intermediate_size": 0, "moe_first_dense_layers": 0, "moe_layer_freq": 1,
    "moe_router_score_function": RouterScore.SOFTMAX.value, "multi_latent_attention": False,
    "q_lora_rank": 0, "kv_lora_rank": 0, "qk_head_dim": 0, "qk_pos_emb_head_dim": 0,
    "v_head_dim": 0, "qk_layernorm": False, "mtp_num_layers": 0,
    "fp8_recipe": NONE, "fp4_recipe": NONE, "cuda_graphs": CudaGraphs.NONE.value,
    "moe_token_dispatcher": TokenDispatcher.ALLTOALL.value, "moe_overlap_ep_comm": False,
    "grad_reduce_in_fp32": NONE, "exp_avg_dtype": StateDtype.FP32.value,
    "exp_avg_sq_dtype": StateDtype.FP32.value, "recompute_modules": 0,
    "cp": 1, "cp_comm_type": CpCommType.P2P.value, "ep": 1, "expert_tp": 0,
    "data_parallel_sharding": NONE, "tp_comm_overlap": False, "first_stage_layers": 0,
    "last_stage_layers": 0, "overlap_param_gather": False, "nvlink_domain": 0,
}

# Job fields a record does not hold: each must keep its default (else `new_columns_of_job`
# refuses the job, naming it). (section, field) -> the default.
_UNHELD: dict[tuple[str, str], Any] = {
    **{("model", k): ModelSpec.model_fields[k].default
       for k in ("window_size", "window_attn_skip_freq", "softmax_type")},
    **{("training", k): TrainingSpec.model_fields[k].default
       for k in ("moe_expert_capacity_factor", "moe_pad_expert_input_to_capacity",
                 "moe_grouped_gemm", "moe_load_imbalance",
                 "fp8_param_gather", "first_last_layers_bf16", "fp8_dot_product_attention",
                 # TE's fused cross-entropy (memory only, simulator.graph.head): not a column (yet)
                 "cross_entropy_fusion",
                 # the master weights' dtype: not a column (yet)
                 "main_params_dtype")},
    **{("parallel", k): ParallelPlan.model_fields[k].default
       for k in ("hierarchical_context_parallel_sizes", "microbatch_group_size_per_vp_stage")},
    **{("cluster", k): ClusterSpec.model_fields[k].default for k in ("topology", "jitter")},
}
assert _UNHELD[("model", "softmax_type")] is SoftmaxType.VANILLA
# the same, per section (a single prediction checks every job: `Surrogate.predict_one`)
_UNHELD_OF: dict[str, tuple[tuple[str, Any], ...]] = {
    section: tuple((name, default) for (where, name), default in _UNHELD.items() if where == section)
    for section in ("model", "training", "parallel", "cluster")}


def _refuse_unheld(job: Job) -> None:
    """The job's training, parallel and cluster fields a record does not hold (its model's:
    `model_columns`)."""
    for section in ("training", "parallel", "cluster"):
        _refuse_unheld_of(section, getattr(job, section))


def _refuse_unheld_of(section: str, spec: object) -> None:
    for name, default in _UNHELD_OF[section]:
        value = getattr(spec, name)
        if value != default:
            shown = getattr(value, "value", value)
            plain = getattr(default, "value", default)
            held = "its default" if default is None else f"{section}.{name}={plain}"
            raise ConfigError(f"{section}.{name}={shown} cannot be held in a surrogate record "
                              f"(the surrogate models {held}); evaluate this "
                              f"job with the exact simulator")


_MODULE_BIT = {m: 1 << i for i, m in enumerate(RecomputeModule)}


def modules_mask(modules: tuple[RecomputeModule, ...] | None) -> int:
    """`training.recompute_modules` as one integer column: bit i for the i-th
    `RecomputeModule`; 0 for None (Megatron's default, core_attn alone)."""
    return sum(_MODULE_BIT[m] for m in set(modules or ()))


def mask_modules(mask: Any) -> tuple[RecomputeModule, ...] | None:
    """The inverse of `modules_mask` (the enum's order); `ConfigError` naming the column."""
    order = list(RecomputeModule)
    value = int(mask)
    if not 0 <= value < 1 << len(order) or value != mask:
        raise ConfigError(f"record: recompute_modules={mask!r} is not a mask of the "
                          f"{len(order)} modules ({', '.join(m.value for m in order)}): an integer "
                          f"in [0, {(1 << len(order)) - 1}]")
    return tuple(m for i, m in enumerate(order) if value >> i & 1) or None


def _layer_pattern(m: ModelSpec) -> tuple[int, int]:
    """(leading dense layers, MoE every k-th layer after them) of `m.moe_layer_freq`."""
    freq = m.moe_layer_freq
    if isinstance(freq, int):
        return 0, freq
    first = next((i for i, x in enumerate(freq) if x), len(freq))
    if first == len(freq) or not all(freq[first:]):
        raise ConfigError(f"model.moe_layer_freq={list(freq)} cannot be held in a surrogate "
                          f"record (it holds k dense layers, then every layer MoE); evaluate "
                          f"this job with the exact simulator")
    return first, 1


def model_columns(m: ModelSpec) -> dict[str, Any]:
    """The `NEW_MODEL_COLUMNS` of `m`; `ConfigError` naming a field a record cannot hold."""
    _refuse_unheld_of("model", m)
    first_dense, freq = _layer_pattern(m) if m.is_moe else (0, 1)
    mla = m.multi_latent_attention
    return {
        "kv_channels": m.kv_channels or 0, "num_experts": m.num_experts or 0,
        "moe_router_topk": m.moe_router_topk if m.is_moe else 0,
        "moe_ffn_hidden_size": m.moe_ffn if m.is_moe else 0,
        "moe_shared_expert_intermediate_size":
            (m.moe_shared_expert_intermediate_size or 0) if m.is_moe else 0,
        "moe_first_dense_layers": first_dense, "moe_layer_freq": freq,
        "moe_router_score_function": m.moe_router_score_function.value,
        "multi_latent_attention": mla, "q_lora_rank": (m.q_lora_rank or 0) if mla else 0,
        "kv_lora_rank": m.kv_lora_rank if mla else 0, "qk_head_dim": m.qk_head_dim if mla else 0,
        "qk_pos_emb_head_dim": m.qk_pos_emb_head_dim if mla else 0,
        "v_head_dim": m.v_head_dim if mla else 0, "qk_layernorm": m.qk_layernorm,
        "mtp_num_layers": m.mtp_num_layers,
    }


def new_columns_of_job(job: Job) -> dict[str, Any]:
    """The `NEW_COLUMNS` of `job` (recipes and expert tp resolved); `ConfigError` naming the field
    when the job uses something a record cannot hold."""
    _refuse_unheld(job)
    t, p = job.training, job.parallel
    recipe = recipe_name(job)
    low = t.precision.is_low
    return {
        **model_columns(job.model),
        "fp8_recipe": recipe if low and t.precision.value == "fp8" else NONE,
        "fp4_recipe": recipe if low and t.precision.value == "fp4" else NONE,
        "cuda_graphs": t.cuda_graphs.value, "moe_token_dispatcher": t.moe_token_dispatcher.value,
        "moe_overlap_ep_comm": t.moe_overlap_ep_comm,
        "grad_reduce_in_fp32": NONE if t.grad_reduce_in_fp32 is None else str(t.grad_reduce_in_fp32).lower(),
        "exp_avg_dtype": t.exp_avg_dtype.value, "exp_avg_sq_dtype": t.exp_avg_sq_dtype.value,
        "recompute_modules": modules_mask(t.recompute_modules),
        "cp": p.cp, "cp_comm_type": p.cp_comm_type.value, "ep": p.ep, "expert_tp": job.expert_tp,
        "data_parallel_sharding": p.data_parallel_sharding.value if p.data_parallel_sharding else NONE,
        "tp_comm_overlap": p.tp_comm_overlap, "first_stage_layers": p.first_stage_layers or 0,
        "last_stage_layers": p.last_stage_layers or 0,
        "overlap_param_gather": p.overlap_param_gather, "nvlink_domain": job.nvlink_domain,
    }


_NULLABLE = ("fp8_recipe", "fp4_recipe", "data_parallel_sharding", "grad_reduce_in_fp32")  # "none": None


def _flag(value: str | None) -> bool | None:
    return None if value is None else value == "true"


def _choice(r: dict[str, Any], column: str) -> str | None:
    value = str(r[column])
    if value not in CHOICES[column]:
        raise ConfigError(f"record: {column}={value!r} is not one of {', '.join(CHOICES[column])}")
    return None if value == NONE and column in _NULLABLE else value


def _moe_fields(r: dict[str, Any]) -> dict[str, Any]:
    experts, layers = int(r["num_experts"]), int(r["num_layers"])
    if experts <= 0:
        if experts < 0:
            raise ConfigError(f"record: num_experts={experts} must be >= 0 (0: a dense model)")
        return {}
    first, freq = int(r["moe_first_dense_layers"]), int(r["moe_layer_freq"])
    if not 0 <= first < layers or (first and freq != 1):
        raise ConfigError(f"record: moe_first_dense_layers={first} must be in [0, num_layers="
                          f"{layers}) and, when > 0, moe_layer_freq=1 (got {freq})")
    pattern: Any = tuple([0] * first + [1] * (layers - first)) if first else freq
    return {"num_experts": experts, "moe_router_topk": r["moe_router_topk"],
            "moe_ffn_hidden_size": r["moe_ffn_hidden_size"],
            "moe_shared_expert_intermediate_size": r["moe_shared_expert_intermediate_size"] or None,
            "moe_layer_freq": pattern,
            "moe_router_score_function": _choice(r, "moe_router_score_function")}


def _mla_fields(r: dict[str, Any]) -> dict[str, Any]:
    if not bool(r["multi_latent_attention"]):
        return {}
    return {"multi_latent_attention": True, "q_lora_rank": r["q_lora_rank"] or None,
            **{k: r[k] for k in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")}}


def new_fields_of_record(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Job fields of the `NEW_COLUMNS` of record `r`, by section (model, training, parallel,
    cluster); a bad choice raises `ConfigError` naming its column (numbers are validated by
    the job's own specs, which name the field)."""
    model = {"kv_channels": r["kv_channels"] or None, **_moe_fields(r), **_mla_fields(r),
             "qk_layernorm": bool(r["qk_layernorm"]), "mtp_num_layers": r["mtp_num_layers"]}
    training = {"fp8_recipe": _choice(r, "fp8_recipe"), "fp4_recipe": _choice(r, "fp4_recipe"),
                "cuda_graphs": _choice(r, "cuda_graphs"),
                "moe_token_dispatcher": _choice(r, "moe_token_dispatcher"),
                "moe_overlap_ep_comm": bool(r["moe_overlap_ep_comm"]),
                "grad_reduce_in_fp32": _flag(_choice(r, "grad_reduce_in_fp32")),
                "exp_avg_dtype": _choice(r, "exp_avg_dtype"),
                "exp_avg_sq_dtype": _choice(r, "exp_avg_sq_dtype"),
                "recompute_modules": mask_modules(r["recompute_modules"])}
    parallel = {"cp": r["cp"], "cp_comm_type": _choice(r, "cp_comm_type"), "ep": r["ep"],
                # a dense job's expert tp is its tp (`Job.expert_tp`); the field is MoE's
                "expert_tp": (r["expert_tp"] or None) if int(r["num_experts"]) > 0 else None,
                "data_parallel_sharding": _choice(r, "data_parallel_sharding"),
                "tp_comm_overlap": bool(r["tp_comm_overlap"]),
                "first_stage_layers": r["first_stage_layers"] or None,
                "last_stage_layers": r["last_stage_layers"] or None,
                "overlap_param_gather": bool(r["overlap_param_gather"])}
    cluster = {"nvlink_domain": r["nvlink_domain"] or None}
    return {"model": model, "training": training, "parallel": parallel, "cluster": cluster}
