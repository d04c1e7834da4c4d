"""Physics of the dimensions past the dense surrogate: MoE, MLA, MTP, context and expert
parallelism, low-precision recipes, data-parallel sharding, CUDA graphs, tp comm overlap and
NVLink domains (the columns of `surrogate.records`), vectorized with numpy over a table.

Two parts. `effective_fields` maps each row onto the dense closed form of `surrogate.physics`
(compiled per row): a MoE layer's MLP as the dense MLP of the FFN a token meets (top-k routed
experts plus the shared ones: the expert GEMMs of the ep x expert_tp ranks carry the stage's
tokens x top-k, so per GPU the FLOPs are those of that FFN split over tp), context parallelism as
the cp-fold smaller job (a rank's b s / cp queries against all s keys: micro-batch, global batch
and GPUs divided by cp), an NVLink domain larger than the node (GB200 NVL72) as the "node" of
the ring formulas. `extended_values` then adds what the dense form lacks, from the simulator's
own functions: parameters, FLOPs and layer kinds per distinct model (simulator.graph.params /
flops, simulator.job.layer_pattern), the MoE dispatch / combine all-to-all
(simulator.network.alltoall.all_to_all_s, its placement as simulator.network.topology
.strided_group: the ep group strided by expert_tp), the cp exchange of K/V (ring: (cp - 1) K/V
blocks per layer; Ulysses: four all-to-alls; all-gather), the recipe's GEMM peak and measured
efficiency (simulator.job.precision), FSDP's parameter gathers, and what CUDA graphs (host
dispatch) and tp comm overlap hide; the two baselines the model's residuals are taken against
(``est_log_time_s``, ``est_log_memory_bytes``) are corrected by these terms. The terms of their
own modules: the MoE layer (`surrogate.moe_terms`: the dispatchers' collectives, the token
shuffles, its host launches, the experts' grouped GEMMs, gradients, optimizer and saved copies),
attention's true head sizes and ring attention (`surrogate.attention_terms`), the uneven
pipeline split (`surrogate.pipeline_terms`) and the recipes' memory (`surrogate.memory_terms`).
The boosted trees learn the rest. A dense 16-bit row keeps its dense features and baselines
unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from simulator.errors import DataError
from simulator.graph.flops import attention_matmul_weights, kind_forward_flops_per_token
from simulator.graph.params import expert_params, layers_params, total_params
from simulator.job.enums import DataParallelSharding
from simulator.job.layer_pattern import layer_kinds
from simulator.job.specs import HardwareSpec
from simulator.network.alltoall import DEEPEP_NVLINK_EFFICIENCY, DEEPEP_RDMA_EFFICIENCY
from surrogate.attention_terms import Heads, attention_extra_s, heads, ring_exposed_s
from surrogate.columns import factorize, row_groups, value_at
from surrogate.features import MODEL_COLUMNS, NEW_MODEL_COLUMNS, model_of_record
from surrogate.memory_terms import quantized_activations_delta, state_bytes_delta
from surrogate.moe_terms import expert_tail_s, moe_layer_terms, saved_activations_bytes, token_copies
from surrogate.param_gather_terms import param_gather_shift_s
from surrogate.physics import OPTIMIZER_BYTES_PER_PARAM, PRECISIONS, ROW_FIELDS
from surrogate.pipeline_terms import layer_params_per_gpu, stage_split, uneven_memory_bytes, uneven_time_s
from surrogate.records import CHOICES, NEW_COLUMNS
from surrogate.records import new_column as _col
from surrogate.timing import grad_buckets

EXTENDED_PHYSICS: tuple[str, ...] = (
    "moe_layers", "active_ffn", "expert_params_per_gpu", "model_params_all", "model_params_active",
    "forward_flops_per_token", "flops_per_gpu_all", "expert_dp", "a2a_bytes_layer", "a2a_s_layer",
    "cp_bytes_layer", "cp_s_layer", "lp_speedup", "quantize_bytes_layer", "fsdp_gather_bytes",
    "sharding_level", "time_moe_comm_s", "time_cp_comm_s", "time_lowp_saving_s",
    "time_graph_saving_s", "time_overlap_saving_s", "dense_est_log_time_s",
    "dense_est_log_memory_bytes", "memory_delta_bytes", "hw_peak_lp", "hw_lp_efficiency",
    "time_dp_tree_s", "state_bytes_delta", "time_expert_gemm_s", "time_param_gather_shift_s")
EXTENDED_FEATURES: tuple[str, ...] = (*NEW_COLUMNS, *EXTENDED_PHYSICS)

_F = {name: j for j, name in enumerate(ROW_FIELDS)}
_GEMM_SHARE = 0.75  # share of a layer's GPU time in GEMMs that a low-precision recipe speeds up


def new_field_matrix(c: Mapping[str, Any]) -> np.ndarray:
    """float64 (NEW_COLUMNS, rows) of a table: numbers as they are, choices as their index in
    `surrogate.records.CHOICES` (an unknown one: `DataError` naming the column), expert tp 0
    as tp and NVLink domain 0 as the node (tables saved before these columns)."""
    out = np.empty((len(NEW_COLUMNS), len(c["num_layers"])))
    for j, name in enumerate(NEW_COLUMNS):
        if name in CHOICES:
            out[j] = _codes(c[name], name)
        else:
            out[j] = np.asarray(c[name], dtype=np.float64)
    tp, gpn, n = (np.asarray(c[k], dtype=np.float64) for k in ("tp", "gpus_per_node", "num_gpus"))
    etp, dom = NEW_COLUMNS.index("expert_tp"), NEW_COLUMNS.index("nvlink_domain")
    out[etp] = np.where(out[etp] > 0, out[etp], tp)
    out[dom] = np.where(out[dom] > 0, out[dom], np.minimum(gpn, n))
    return out


def _codes(values: Any, column: str) -> np.ndarray:
    choices = CHOICES[column]
    f = factorize(values)
    bad = sorted(str(u) for u in f.uniques if str(u) not in choices)
    if bad:
        raise DataError(f"column {column} has unknown value(s) {', '.join(bad)}; use {', '.join(choices)}")
    return f.lookup(lambda u: float(choices.index(str(u))))


@lru_cache(maxsize=4096)
def _model_values(key: tuple[Any, ...]) -> tuple[float, ...]:
    """(MoE layers, mean FFN a token meets per layer, routed-expert parameters, all parameters,
    active parameters, forward FLOPs per token, attention weights) of one model, from the
    simulator's own functions (`key`: the model columns in `_MODEL_KEY` order)."""
    model = model_of_record(dict(zip(_MODEL_KEY, key, strict=True)))
    kinds = layer_kinds(model)
    n_moe = sum(k.moe for k in kinds)
    shared = model.moe_shared_expert_intermediate_size or 0
    moe_ffn = model.moe_router_topk * model.moe_ffn + shared if model.is_moe else model.ffn
    active_ffn = ((len(kinds) - n_moe) * model.ffn + n_moe * moe_ffn) / len(kinds)
    layers = layers_params(model)
    logits = 2.0 * model.hidden_size * model.vocab_size
    forward = sum(kind_forward_flops_per_token(model, k) for k in kinds) + logits
    forward += model.mtp_num_layers * (kind_forward_flops_per_token(model, kinds[-1])
                                       + 4.0 * model.hidden_size ** 2 + logits)
    routed = n_moe * (model.num_experts or 0) * expert_params(model) if model.is_moe else 0
    active = total_params(model) - layers.experts + layers.active_experts
    return (float(n_moe), float(active_ffn), float(routed), float(total_params(model)),
            float(active), forward, float(attention_matmul_weights(model)))


_MODEL_KEY = (*MODEL_COLUMNS, *NEW_MODEL_COLUMNS)


def model_values(c: Mapping[str, Any], new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """((7, rows) `_model_values` of each row's model, rows beyond the dense form), asked of the
    simulator once per distinct model for the models beyond the dense form (MoE, MLA, MTP, a
    head size of their own); a dense model's parameters and FLOPs are the dense form's
    (`complete_model_values`: the same functions' closed form, `surrogate.physics`)."""
    n = len(c["num_layers"])
    out = np.zeros((7, n))
    out[1] = np.asarray(c["ffn_hidden_size"], dtype=np.float64)
    general = ((_col(new, "num_experts") > 0) | (_col(new, "multi_latent_attention") > 0)
               | (_col(new, "mtp_num_layers") > 0) | (_col(new, "kv_channels") > 0))
    rows = np.flatnonzero(general)
    if len(rows) == 0:
        return out, general
    codes, firsts = _distinct_models(c, rows)
    table = np.array([_model_values(tuple(value_at(c[k], i) for k in _MODEL_KEY)) for i in firsts])
    out[:, rows] = table.reshape(len(firsts), 7)[codes].T
    return out, general


def _distinct_models(c: Mapping[str, Any], rows: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """(index of each of `rows`' model among the distinct ones, a row of each distinct model),
    by `surrogate.columns.row_groups` over the model columns' codes."""
    arrays = []
    for k in _MODEL_KEY:
        values = c[k] if hasattr(c[k], "uniques") or np.asarray(c[k]).dtype.kind in "biuf" \
            else factorize(c[k])
        arrays.append(values.codes[rows] if hasattr(values, "uniques") else np.asarray(values)[rows])
    codes, firsts = row_groups(arrays, "models")
    return codes, [int(rows[i]) for i in firsts]


def complete_model_values(models: np.ndarray, general: np.ndarray, fields: np.ndarray,
                          dense: Mapping[str, np.ndarray]) -> None:
    """Dense models' parameters and forward FLOPs per token from the dense physics, in place."""
    tokens = fields[_F["global_batch_size"]] * fields[_F["seq_length"]]
    plain = ~general
    models[3] = np.where(plain, dense["params"], models[3])
    models[4] = np.where(plain, dense["params"], models[4])
    models[5] = np.where(plain, dense["model_flops"] / (3 * tokens), models[5])


def effective_fields(fields: np.ndarray, new: np.ndarray, models: np.ndarray) -> np.ndarray:
    """The dense `ROW_FIELDS` matrix each row maps onto (see the module docstring); `fields`
    itself when no row uses MoE, cp or a domain beyond the node."""
    cp = new[NEW_COLUMNS.index("cp")]
    moe = new[NEW_COLUMNS.index("num_experts")] > 0
    domain = new[NEW_COLUMNS.index("nvlink_domain")]
    gpn = fields[_F["gpus_per_node"]]
    if not (moe.any() or (cp > 1).any() or (domain > gpn).any()):
        return fields
    eff = fields.copy()
    eff[_F["ffn_hidden_size"]] = np.where(moe, models[1], fields[_F["ffn_hidden_size"]])
    for name in ("micro_batch_size", "global_batch_size", "num_gpus"):
        eff[_F[name]] = fields[_F[name]] / cp
    eff[_F["gpus_per_node"]] = np.maximum(gpn, domain)
    # the domain's "node" has the NICs of all its GPUs (each GB200 has its own)
    inter = _F["inter_node_bandwidth_Gbps"]
    eff[inter] = fields[inter] * np.maximum(gpn, domain) / gpn
    return eff


def _hardware_lp(c: Mapping[str, Any], hardware: Mapping[str, HardwareSpec] | None,
                 new: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(GEMM peak FLOP/s of each row's precision, the recipe's measured GEMM efficiency over
    the 16-bit one, the format's bytes per element with its scales, its quantized copies of an
    operand used both ways) per row (simulator.job.precision: the recipe's format, its gemm
    kernel's `low_precision_gemm_efficiency`); 16-bit rows: the bf16 peak, 1, 0 and 0."""
    from simulator.job.precision import FORMATS
    from surrogate.hardware import catalog_hardware

    gpu = factorize(c["gpu"])
    precision = factorize(c["precision"])
    recipe8 = new[NEW_COLUMNS.index("fp8_recipe")].astype(np.intp)
    key = (gpu.codes * len(precision.uniques) + precision.codes) * 8 + recipe8
    keys, inverse = np.unique(key, return_inverse=True)
    peak, eff = np.empty(len(keys)), np.empty(len(keys))
    element, copies = np.zeros(len(keys)), np.zeros(len(keys))
    for i, k in enumerate(keys.tolist()):
        g, rest = divmod(k, len(precision.uniques) * 8)
        prec, r8 = divmod(rest, 8)
        name = str(gpu.uniques[g])
        spec = hardware[name] if hardware and name in hardware else catalog_hardware(name)
        bf16 = spec.peak_tflops.get("bf16", spec.peak_tflops.get("fp16", 0.0))  # type: ignore[call-overload]
        p = str(precision.uniques[prec])
        recipe = CHOICES["fp8_recipe"][r8] if p == "fp8" else "nvfp4"
        arch = spec.architecture
        fmt = FORMATS.get((recipe, arch)) if p in ("fp8", "fp4") and arch is not None else None
        table = spec.efficiency.low_precision_gemm_efficiency
        if fmt is None or p not in spec.peak_tflops:
            peak[i], eff[i] = bf16 * 1e12, 1.0
        else:
            peak[i] = spec.peak_tflops[p] * 1e12  # type: ignore[index]
            eff[i] = table.get(fmt.gemm_kernel, 1.0)
            element[i], copies[i] = fmt.bytes_per_element, fmt.copies
    return peak[inverse], eff[inverse], element[inverse], copies[inverse]


def _alltoall_s(nbytes: Any, n: Any, stride: Any, domain: Any, intra_Bps: Any, inter_Bps: Any,
                gpn: Any, hw: Mapping[str, Any], deepep: Any) -> Any:
    """`simulator.network.alltoall.all_to_all_s` over rows: the group of `n` ranks `stride`
    apart (simulator.network.topology.strided_group), its share to its own domain on NVLink,
    the rest on the node's links shared by the node's GPUs (non-blocking fabric)."""
    g = np.where(stride >= domain, 1.0, np.maximum(1.0, np.minimum(n, domain // np.maximum(stride, 1))))
    intra_eff = np.where(deepep, DEEPEP_NVLINK_EFFICIENCY, hw["intra_eff"])
    inter_eff = np.where(deepep, DEEPEP_RDMA_EFFICIENCY, hw["inter_eff"])
    intra = (g - 1) / n * nbytes / (intra_Bps * intra_eff)
    inter = (n - g) / n * nbytes / (inter_Bps / gpn * inter_eff)
    crosses = n > g
    t = np.where(crosses, np.maximum(intra, inter) + hw["intra_lat_s"] + hw["inter_lat_s"],
                 intra + hw["intra_lat_s"])
    return np.where((n > 1) & (nbytes > 0), t, 0.0)


def _comm_terms(f: Mapping[str, np.ndarray], new: np.ndarray, models: np.ndarray,
                hw: Mapping[str, Any], dims: Heads) -> dict[str, np.ndarray]:
    """Per layer and micro-batch: the MoE dispatch all-to-all (bytes a rank sends, seconds)
    and the cp exchange (bytes, seconds; ``ring``: the p2p exchange, hidden under attention)."""
    n_moe, routed = models[0], models[2]
    t, p, d, b, s, h = (f[k] for k in ("tp", "pp", "dp", "micro_batch_size", "seq_length", "hidden_size"))
    cp, ep, etp = _col(new, "cp"), _col(new, "ep"), _col(new, "expert_tp")
    domain = np.maximum(_col(new, "nvlink_domain"), 1.0)
    gpn = np.maximum(np.minimum(f["gpus_per_node"], f["num_gpus"]), 1.0)
    intra, inter = f["intra_node_bandwidth_GBps"] * 1e9, f["inter_node_bandwidth_Gbps"] * 1e9 / 8
    tokens = b * s / cp / np.where(f["sequence_parallel"] > 0, t, 1.0)  # a rank's MoE tokens
    expert_dp = np.maximum(1.0, t * cp * d / (etp * ep))
    per_gpu_experts = routed / p / (ep * etp)
    copies = token_copies(new)
    a2a_bytes = tokens * copies * h * 2.0 * (n_moe > 0)
    flex = _col(new, "moe_token_dispatcher") == CHOICES["moe_token_dispatcher"].index("flex")
    a2a_s = _alltoall_s(a2a_bytes, ep, etp, domain, intra, inter, gpn, hw, flex)
    kv = dims.kv_bytes(b * s / cp)  # K and V of a rank's chunk (`dims`: the true head sizes)
    exchange = _col(new, "cp_comm_type")
    ring = exchange == CHOICES["cp_comm_type"].index("p2p")
    a2a_cp = exchange == CHOICES["cp_comm_type"].index("a2a")
    cp_bytes = np.where(a2a_cp, dims.qkv_out_bytes(b * s / cp), kv * (cp - 1)) * (cp > 1)
    link_Bps = np.where(t * cp <= domain, intra * hw["intra_eff"], inter / gpn * hw["inter_eff"])
    cp_s = np.where(a2a_cp, _alltoall_s(cp_bytes, cp, t, domain, intra, inter, gpn, hw, False),
                    cp_bytes / link_Bps)
    return {"tokens": tokens, "expert_dp": expert_dp, "per_gpu_experts": per_gpu_experts,
            "a2a_bytes": a2a_bytes, "a2a_s": a2a_s, "copies": copies, "kv_s": kv / link_Bps,
            "cp_bytes": cp_bytes, "cp_s": cp_s, "ring": ring}


def extended_values(c: Mapping[str, Any], fields: np.ndarray, new: np.ndarray, models: np.ndarray,
                    dense: Mapping[str, np.ndarray], hw: Mapping[str, Any],
                    hardware: Mapping[str, HardwareSpec] | None) -> dict[str, np.ndarray]:
    """`EXTENDED_PHYSICS` of each row plus the corrected ``est_log_time_s`` and
    ``est_log_memory_bytes``. `dense`: the dense physics features of the effective rows (by
    name), `hw`: the dense physics' hardware numbers per row (`surrogate.physics.Hardware`)."""
    f = {name: fields[j] for name, j in _F.items()}
    n_moe, active_ffn, _, params_all, params_active, forward, _ = models
    t, p, d, b, s, h = (f[k] for k in ("tp", "pp", "dp", "micro_batch_size", "seq_length", "hidden_size"))
    L = f["num_layers"]
    dims = heads(f, new)  # the true head sizes (surrogate.attention_terms)
    comm = _comm_terms(f, new, models, hw, dims)
    tokens, expert_dp, per_gpu_experts = comm["tokens"], comm["expert_dp"], comm["per_gpu_experts"]
    a2a_bytes, a2a_s, cp_bytes, cp_s, ring = (comm[k] for k in ("a2a_bytes", "a2a_s", "cp_bytes",
                                                                 "cp_s", "ring"))
    peak_lp, lp_eff, element, copies = _hardware_lp(c, hardware, new)
    speedup = peak_lp * lp_eff / np.maximum(hw["peak_bf16"], 1.0)
    low = f["precision"] >= 2
    level = _sharding_level(new, f)
    stage = dense["stage_params"]
    slots = f["global_batch_size"] / (d * b) + (p - 1) / f["virtual_stages"]
    layers = L / p * slots  # layer-micro-batch steps on the critical path
    gain = 1 - 1 / np.maximum(speedup, 1e-9)
    # the recomputed forward (full recompute) runs its GEMMs in the recipe too
    gemm_time = dense["time_layer_compute_s"] + dense["time_recompute_s"]
    lowp = np.where(low, gemm_time * _GEMM_SHARE * gain, 0.0)
    graphs = np.where(_col(new, "cuda_graphs") > 0, dense["time_host_excess_s"], 0.0)
    overlap = np.where(_col(new, "tp_comm_overlap") > 0, dense["time_tp_overlap_saving_s"], 0.0)
    # a MoE layer's dispatch and combine (their combined-1F1B overlap), its experts' extra GPU
    # time and its extra host launches (surrogate.moe_terms.moe_layer_terms)
    moe_layer_comm, moe_layer_gpu, moe_layer_host = moe_layer_terms(
        c, f, new, comm, hw, dense["time_layer_compute_s"])
    moe_comm = moe_layer_comm * n_moe / L
    attention_s = attention_extra_s(f, new, dims, models[6], dense, hw)
    cp_comm = np.where(ring, ring_exposed_s(_col(new, "cp"), comm["kv_s"], dense["time_attention_s"]),
                       2 * cp_s)
    est = np.exp(dense["est_log_time_s"])
    tree = dp_tree_correction(fields, dense, hw)
    # a layer's windows take max(GPU + blocking comm, host dispatch) (surrogate.timing._window):
    # what the recipe, the tp overlap and CUDA graphs save on the GPU stops at the host's floor
    # (cp's exchange and a MoE layer's dispatch and experts are GPU time and blocking comm in
    # the same windows; a MoE layer's host launches more: surrogate.moe_terms)
    busy = (dense["time_layer_s"] - dense["time_host_excess_s"] - lowp - overlap + cp_comm
            + attention_s)
    floor = np.where(_col(new, "cuda_graphs") > 0, 0.0, dense["time_layer_host_s"])
    experts_s = moe_layer_gpu * n_moe / L
    moe_layer = np.maximum(busy + moe_layer_comm + moe_layer_gpu, floor + moe_layer_host)
    mean_layer = (n_moe * moe_layer + (L - n_moe) * np.maximum(busy, floor)) / L
    per_layer = mean_layer - dense["time_layer_s"]
    split = stage_split(f, new)
    head_s = np.maximum(dense["time_stage_mb_s"] - L / p * dense["time_layer_s"], 0.0)
    uneven_s = uneven_time_s(f, split, dense["time_layer_s"] + per_layer, head_s)
    experts_tail = expert_tail_s(f, new, per_gpu_experts, expert_dp, level, dense, hw)
    # a feature, not a term of the estimate: the trees' held-out MAPE was 5.74% with it as a term,
    # 5.29% with it as this feature (bench/bench_surrogate.py, runs/samples/moe-cp-40k-s11)
    gather_shift = param_gather_shift_s(fields, hw, _col(new, "overlap_param_gather") > 0, dense)
    time = np.maximum(est + tree + layers * per_layer + uneven_s + experts_tail, 0.2 * est)
    # Megatron shards the optimizer over the data-parallel group with context parallelism (dp x
    # cp, simulator.graph.params.optimizer_shards) and the routed experts' over expert_dp; the
    # dense form's rows shard it over dp where `distributed_optimizer` is set and nothing else
    ranks = d * _col(new, "cp")
    sharded = level >= DataParallelSharding.OPTIM.level
    dense_shard = np.where(f["distributed_optimizer"] > 0, d, 1.0)
    optimizer_shard = np.where(sharded, ranks, 1.0)
    # a MoE row's MLP: the dense form's dense-equivalent one out, the dense layers' MLPs and the
    # GPU's routed experts in, each at its group's bytes per parameter
    kernel_mlp = 3 * h * active_ffn / t  # what the dense form counted per layer
    dense_mlp = (L - n_moe) * 3 * h * f["ffn_hidden_size"] / t / L
    experts_layer = per_gpu_experts * p / L
    moe_delta = np.where(n_moe > 0, L / p * (
        dense_mlp * (6 + 12 / optimizer_shard) + experts_layer * (6 + 12 / np.where(sharded, expert_dp, 1.0))
        - kernel_mlp * (6 + 12 / dense_shard)), 0.0)
    moe_delta = moe_delta + saved_activations_bytes(f, new, tokens, comm["copies"], dense) * n_moe / L
    shard_delta = (stage - np.where(n_moe > 0, L / p * kernel_mlp, 0.0)) * (
        OPTIMIZER_BYTES_PER_PARAM * (1 / optimizer_shard - 1 / dense_shard)
        - np.where(level >= 3, 6.0, np.where(level >= 2, 4.0, 0.0)) * (1 - 1 / ranks))
    # 16-bit gradients / Adam moments; the main-gradient copy only where the optimizer moment
    # (the dense form's copy: fp16 only) outgrows the activations (physics.memory's moments)
    held, main = state_bytes_delta(f, new, level)
    dense_copy = np.where(f["precision"] == PRECISIONS.index("fp16"), 4.0, 0.0) * stage / dense_shard
    act = dense["activation_bytes"]
    states = held * stage + (np.maximum(act, dense_copy + main * stage) - np.maximum(act, dense_copy))
    quantized = low & (element > 0)
    weight_copies = np.where(quantized, element * copies, low) * stage
    memory_delta = (moe_delta + shard_delta + weight_copies + states
                    + quantized_activations_delta(f, new, dense, element, quantized, active_ffn))
    # the uneven split's largest stage: its layers' states (per parameter as the stage's) and
    # their saved activations (surrogate.pipeline_terms)
    per_param = (dense["weight_state_bytes"] + shard_delta + weight_copies + held * stage) / stage
    layer_params = layer_params_per_gpu({**f, "ffn_hidden_size": np.where(n_moe > 0, active_ffn,
                                                                         f["ffn_hidden_size"])})
    edge = per_param * np.maximum(stage - split.mean * layer_params, 0.0)  # the embedding's
    memory_delta = memory_delta + uneven_memory_bytes(
        f, split, layer_params * per_param + moe_delta / split.mean, act, edge)
    mem = np.exp(dense["est_log_memory_bytes"])
    memory = np.maximum(mem + memory_delta, 0.3 * mem)
    values = {
        "moe_layers": n_moe, "active_ffn": active_ffn, "expert_params_per_gpu": per_gpu_experts,
        "model_params_all": params_all, "model_params_active": params_active,
        "forward_flops_per_token": forward,
        "flops_per_gpu_all": 3 * forward * f["global_batch_size"] * s / f["num_gpus"],
        "expert_dp": expert_dp, "a2a_bytes_layer": a2a_bytes, "a2a_s_layer": a2a_s,
        "cp_bytes_layer": cp_bytes, "cp_s_layer": cp_s, "lp_speedup": speedup,
        "quantize_bytes_layer": low * tokens * (2 * h + active_ffn / t) * 3.0,
        "fsdp_gather_bytes": np.where(level >= 3, 2 * 2.0 * stage, 0.0), "sharding_level": level,
        "time_moe_comm_s": moe_comm, "time_cp_comm_s": cp_comm, "time_lowp_saving_s": lowp,
        "time_graph_saving_s": graphs, "time_overlap_saving_s": overlap,
        "dense_est_log_time_s": dense["est_log_time_s"],
        "dense_est_log_memory_bytes": dense["est_log_memory_bytes"],
        "memory_delta_bytes": memory_delta, "time_dp_tree_s": tree, "hw_peak_lp": peak_lp,
        "state_bytes_delta": states, "time_expert_gemm_s": experts_s,
        "time_param_gather_shift_s": gather_shift,
        "hw_lp_efficiency": lp_eff,
        # a row without a correction keeps its dense baseline to the bit
        "est_log_time_s": np.where(time == est, dense["est_log_time_s"], np.log(time)),
        "est_log_memory_bytes": np.where(memory == mem, dense["est_log_memory_bytes"], np.log(memory)),
    }
    return values


def is_plain(new: np.ndarray, fields: np.ndarray, general: np.ndarray) -> bool:
    """Whether no row of a table uses a dimension past the dense surrogate (a dense 16-bit
    table: `plain_values` gives its `extended_values`, without their cost)."""
    defaults = {"cp": 1.0, "ep": 1.0, "cuda_graphs": 0.0, "tp_comm_overlap": 0.0, "moe_overlap_ep_comm": 0.0,
                "data_parallel_sharding": 0.0, "fp8_recipe": 0.0, "fp4_recipe": 0.0,
                "grad_reduce_in_fp32": 0.0, "exp_avg_dtype": 0.0, "exp_avg_sq_dtype": 0.0,
                "first_stage_layers": 0.0, "last_stage_layers": 0.0, "overlap_param_gather": 0.0}
    return (not general.any() and bool((fields[_F["precision"]] < 2).all())
            and all(bool((_col(new, k) == v).all()) for k, v in defaults.items())
            and bool((_col(new, "expert_tp") == fields[_F["tp"]]).all())
            # an NVLink domain beyond the node (NVL72) maps onto `effective_fields`' "node"
            and bool((_col(new, "nvlink_domain") <= fields[_F["gpus_per_node"]]).all()))


def plain_values(fields: np.ndarray, new: np.ndarray, models: np.ndarray,
                 dense: Mapping[str, np.ndarray], hw: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """`extended_values` of a plain table (`is_plain`), the same expressions where they are not
    zero (tests/surrogate_tests/test_records.py compares the two)."""
    f = {name: fields[j] for name, j in _F.items()}
    zero = np.zeros(fields.shape[1])
    t, d, s = f["tp"], f["dp"], f["seq_length"]
    forward = models[5]
    values = {name: zero for name in EXTENDED_PHYSICS}
    values.update({
        "active_ffn": models[1], "model_params_all": models[3], "model_params_active": models[4],
        "forward_flops_per_token": forward,
        "flops_per_gpu_all": 3 * forward * f["global_batch_size"] * s / f["num_gpus"],
        "expert_dp": np.maximum(1.0, t * 1.0 * d / (t * 1.0)), "lp_speedup": zero + 1.0,
        "sharding_level": _sharding_level(new, f),
        "dense_est_log_time_s": dense["est_log_time_s"],
        "dense_est_log_memory_bytes": dense["est_log_memory_bytes"],
        "hw_peak_lp": dense["hw_peak_bf16"], "hw_lp_efficiency": zero + 1.0,
        "est_log_memory_bytes": dense["est_log_memory_bytes"]})
    tree = dp_tree_correction(fields, dense, hw)
    est = np.exp(dense["est_log_time_s"])
    time = np.maximum(est + tree + 0.0, 0.2 * est)
    values["time_dp_tree_s"] = tree
    values["est_log_time_s"] = np.where(time == est, dense["est_log_time_s"], np.log(time))
    return values


def _sharding_level(new: np.ndarray, f: Mapping[str, np.ndarray]) -> np.ndarray:
    """`DataParallelSharding.level` of each row (`Job.sharding`: the column, else the
    distributed optimizer's ZeRO-1 or none)."""
    code = _col(new, "data_parallel_sharding")  # 0: none, then the enum's order
    levels = np.array([-1.0, *(s.level for s in DataParallelSharding)])
    chosen = levels[code.astype(np.intp)]
    fallback = np.where(f["distributed_optimizer"] > 0, float(DataParallelSharding.OPTIM.level),
                        float(DataParallelSharding.NO_SHARD.level))
    return np.where(chosen >= 0, chosen, fallback)


def dp_tree_correction(fields: np.ndarray, dense: Mapping[str, np.ndarray],
                       hw: Mapping[str, Any]) -> np.ndarray:
    """Seconds to add to the dense estimate because NCCL reduces a bucket over nodes with the
    double binary tree where that is faster than the ring (simulator.network.algorithms.tree:
    2 log2(k) network hops instead of the ring's 2 (k - 1), at 0.92 of the bus bandwidth), which
    the dense form's ring (`surrogate.timing._ring_s`) does not choose: per bucket min(ring,
    tree) - ring, on the data-parallel gradient reduction, less what overlapping still hides."""
    f = {name: fields[j] for name, j in _F.items()}
    t, d, v = f["tp"], f["dp"], f["virtual_stages"]
    gpn = np.maximum(np.minimum(f["gpus_per_node"], f["num_gpus"]), 1.0)
    per_node = np.where(t < gpn, np.maximum(1.0, np.minimum(d, np.floor(gpn / t))), 1.0)
    k = np.ceil(d / per_node)
    grad = dense["stage_params"] * np.where(f["precision"] > 0, 4.0, 2.0)
    overlap = f["overlap_grad_reduce"] > 0
    buckets = grad_buckets(grad, d, v, np.where(f["precision"] > 0, 4.0, 2.0), overlap)
    per_call = grad / buckets
    inter = 2 * (k - 1) / k * per_call * (gpn / per_node) / (f["inter_node_bandwidth_Gbps"] * 1e9 / 8
                                                               * hw["inter_eff"])
    ring_hops = 2 * (k - 1) * hw["inter_lat_s"]
    tree_hops = 2 * np.floor(np.log2(np.maximum(k, 1.0))) * hw["inter_lat_s"]
    saving = np.maximum(0.0, (inter + ring_hops) - (inter / 0.92 + tree_hops))
    saving = np.where(k > 1, saving * buckets * np.where(f["distributed_optimizer"] > 0, 0.5, 1.0), 0.0)
    old = dense["time_dp_comm_s"]
    new = np.maximum(old - saving, 0.0)
    backward = dense["time_stage_mb_s"] / v * (2 / 3)
    hidden_old = np.where(overlap, np.minimum(old * 0.9, backward), 0.0)
    hidden_new = np.where(overlap, np.minimum(new * 0.9, backward), 0.0)
    slow = hw["comm_slowdown"]  # the dense form's exposure (surrogate.timing.iteration)
    return (np.maximum(slow * hidden_new, new - hidden_new)
            - np.maximum(slow * hidden_old, old - hidden_old))
