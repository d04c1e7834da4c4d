"""Physics of the dimensions past the dense surrogate: MoE, MLA, MTP, context and expert
parallelism, low-precision recipes, data-parallel sharding, CUDA graphs, tp comm overlap and
NVLink domains (the columns of `surrogate.records`): what a table's rows look up, and the
formulas of `surrogate.extended_terms` run with numpy over the table (compiled per row where
numba is installed: `surrogate.extended_kernel`).

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

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from simulator.errors import DataError
from simulator.graph.flops import attention_matmul_weights, kind_forward_flops_per_token
from simulator.graph.params import expert_params, layers_params, total_params
from simulator.job.enums import DataParallelSharding
from simulator.job.layer_pattern import layer_kinds
from simulator.job.specs import HardwareSpec
from surrogate.columns import factorize, row_groups, small_unique, value_at
from surrogate.compiled_ops import maximum, where
from surrogate.dp_terms import plain_tree_correction
from surrogate.extended_terms import extended_row
from surrogate.features import MODEL_COLUMNS, NEW_MODEL_COLUMNS, model_of_record
from surrogate.gemm_shapes import NAN_EFFS
from surrogate.memory_terms import StateBytes, state_bytes_delta, state_bytes_of_record
from surrogate.moe_terms import (
    moe_host_of_record,
    moe_host_table_s,
    token_copies,
    token_copies_of_record,
)
from surrogate.physics import ROW_FIELDS, Hardware, rows_of_fields
from surrogate.records import CHOICES, NEW_COLUMNS
from surrogate.records import new_column as _col
from surrogate.slots import (
    A_EST_MEMORY,
    A_EST_TIME,
    A_HELD,
    A_HELD_SHARDED,
    A_LEVEL,
    A_MAIN,
    A_MOE_HOST,
    A_PEAK_LP,
    A_TOKEN_COPIES,
    CP,
    D_EST_LOG_MEMORY,
    D_EST_LOG_TIME,
    D_MODEL_FLOPS,
    D_PARAMS,
    D_PEAK_BF16,
    DATA_PARALLEL_SHARDING,
    DISTRIBUTED_OPTIMIZER,
    DP,
    FP8_RECIPE,
    GLOBAL_BATCH_SIZE,
    LOOKUPS,
    M_ACTIVE_FFN,
    M_FORWARD,
    M_PARAMS_ACTIVE,
    M_PARAMS_ALL,
    NUM_EXPERTS,
    NUM_GPUS,
    NVLINK_DOMAIN,
    RECOMPUTE_CODE,
    SEQ_LENGTH,
    TP,
)

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


def model_values_of_record(record: Mapping[str, Any]) -> tuple[float, ...]:
    """`_model_values` of one record's model (a row of `model_values` of a MoE, MLA, MTP or
    own-head-size model)."""
    return _model_values(tuple(record[k] for k in _MODEL_KEY))


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
                          dense: np.ndarray) -> None:
    """Dense models' parameters and forward FLOPs per token from the dense physics, in place."""
    if general.all():
        return
    tokens = fields[_F["global_batch_size"]] * fields[_F["seq_length"]]
    plain: Any = True if not general.any() else ~general  # `where` of True: no numpy call
    models[M_PARAMS_ALL] = where(plain, dense[D_PARAMS], models[M_PARAMS_ALL])
    models[M_PARAMS_ACTIVE] = where(plain, dense[D_PARAMS], models[M_PARAMS_ACTIVE])
    models[M_FORWARD] = where(plain, dense[D_MODEL_FLOPS] / (3 * tokens), models[M_FORWARD])


def effective_fields(fields: np.ndarray, new: np.ndarray, models: np.ndarray) -> np.ndarray:
    """The dense `ROW_FIELDS` matrix each row maps onto (see the module docstring); `fields`
    itself when no row uses MoE, cp, a domain beyond the node or a `data_parallel_sharding`
    that overrides its `distributed_optimizer` flag."""
    cp = new[CP]
    moe = new[NUM_EXPERTS] > 0
    domain = new[NVLINK_DOMAIN]
    gpn = fields[_F["gpus_per_node"]]
    dopt = fields[_F["distributed_optimizer"]]
    if fields.shape[1] == 1:  # one record (`Surrogate.predict_one`): its numbers, not arrays
        one = fields[:, 0].tolist()
        sharded = float(_level(float(new[DATA_PARALLEL_SHARDING, 0]), float(dopt[0])) >= _OPTIM_LEVEL)
        args = (bool(moe[0]), float(cp[0]), float(domain[0]), float(gpn[0]), float(models[1, 0]), sharded)
        if not (args[0] or args[1] > 1 or args[2] > args[3] or sharded != float(dopt[0])):
            return fields
        return np.array(_effective(list(one), one, *args)).reshape(-1, 1)
    sharded = (_level(new[DATA_PARALLEL_SHARDING], dopt) >= _OPTIM_LEVEL).astype(float)
    if not (moe.any() or (cp > 1).any() or (domain > gpn).any() or (sharded != dopt).any()):
        return fields
    return _effective(fields.copy(), fields, moe, cp, domain, gpn, models[1], sharded)


def _effective(eff: Any, fields: Any, moe: Any, cp: Any, domain: Any, gpn: Any, active_ffn: Any,
               sharded: Any) -> Any:
    """`eff` (a copy of `fields`: rows of a matrix, or one record's list) made effective: the
    experts' FFN of a MoE row, cp's share of the batch and GPUs, the domain as the node, and
    the distributed optimizer where `data_parallel_sharding` shards the optimizer (the
    simulator's `Job.sharding`: until schema 24 the dense form reduced such rows' gradients
    with an all-reduce when their `distributed_optimizer` flag was off, 2.3x fast at dp 512)."""
    eff[_F["ffn_hidden_size"]] = where(moe, active_ffn, fields[_F["ffn_hidden_size"]])
    for name in ("micro_batch_size", "global_batch_size", "num_gpus"):
        eff[_F[name]] = fields[_F[name]] / cp
    node = maximum(gpn, domain)
    eff[_F["gpus_per_node"]] = node
    # the domain's "node" has the NICs of all its GPUs (each GB200 has its own)
    inter = _F["inter_node_bandwidth_Gbps"]
    eff[inter] = fields[inter] * node / gpn
    eff[_F["distributed_optimizer"]] = sharded
    return eff


def _hardware_lp(c: Mapping[str, Any], hardware: Mapping[str, HardwareSpec] | None,
                 new: np.ndarray) -> np.ndarray:
    """(`LP_NUMBERS`, rows) `_lp_numbers` of each row, asked once per distinct (GPU, precision,
    fp8 recipe)."""
    gpu = factorize(c["gpu"])
    precision = factorize(c["precision"])
    recipe8 = new[NEW_COLUMNS.index("fp8_recipe")].astype(np.intp)
    key = (gpu.codes * len(precision.uniques) + precision.codes) * 8 + recipe8
    keys, inverse = small_unique(key, len(gpu.uniques) * len(precision.uniques) * 8)
    table = np.empty((LP_NUMBERS, len(keys)))
    for i, k in enumerate(keys.tolist()):
        g, rest = divmod(k, len(precision.uniques) * 8)
        prec, r8 = divmod(rest, 8)
        table[:, i] = _lp_numbers(_spec(str(gpu.uniques[g]), hardware), str(precision.uniques[prec]), r8)
    return table[:, inverse]


def _spec(name: str, hardware: Mapping[str, HardwareSpec] | None) -> HardwareSpec:
    from surrogate.hardware import catalog_hardware

    return hardware[name] if hardware and name in hardware else catalog_hardware(name)


LP_NUMBERS = 7  # what `_lp_numbers` gives: the LOOKUPS from A_PEAK_LP to A_QUANTIZE_BPS


def _lp_numbers(spec: HardwareSpec, p: str, r8: int) -> tuple[float, ...]:
    """(GEMM peak FLOP/s of precision `p`, the recipe's measured GEMM efficiency over the 16-bit
    one, the format's bytes per element with its scales, its quantized copies of an operand used
    both ways, whether its scale needs an amax pass, a transposed copy, and the bytes per second
    its quantize and transpose kernels move: the measured `quantize_memory_efficiency` of the HBM,
    else the generic one, as the simulator's kernel model costs them) on `spec`
    (simulator.job.precision: the recipe's format, its gemm kernel's
    `low_precision_gemm_efficiency`; `r8`: the fp8 recipe's code); 16-bit: the bf16 peak, 1,
    zeros, and the generic bandwidth."""
    from simulator.job.precision import FORMATS

    bf16 = spec.peak_tflops.get("bf16", spec.peak_tflops.get("fp16", 0.0))  # type: ignore[call-overload]
    recipe = CHOICES["fp8_recipe"][r8] if p == "fp8" else "nvfp4"
    arch = spec.architecture
    fmt = FORMATS.get((recipe, arch)) if p in ("fp8", "fp4") and arch is not None else None
    eff = spec.efficiency
    quantize_Bps = spec.hbm_bandwidth_GBps * 1e9 * (eff.quantize_memory_efficiency or eff.memory_efficiency)
    if fmt is None or p not in spec.peak_tflops:
        return bf16 * 1e12, 1.0, 0.0, 0.0, 0.0, 0.0, quantize_Bps
    return (spec.peak_tflops[p] * 1e12,  # type: ignore[index]
            eff.low_precision_gemm_efficiency.get(fmt.gemm_kernel, 1.0),
            fmt.bytes_per_element, fmt.copies, float(fmt.amax_pass), float(fmt.transposes),
            quantize_Bps)


def lookups(c: Mapping[str, Any], fields: np.ndarray, new: np.ndarray, dense: np.ndarray,
            hw: Hardware, hardware: Mapping[str, HardwareSpec] | None) -> np.ndarray:
    """(`LOOKUPS`, rows) of a table: what its rows take from tables keyed by a few columns
    (the recipe's GEMM numbers per GPU and recipe, a MoE layer's host launches per launch key,
    the memory settings' bytes per parameter, the flex dispatcher's distinct ranks), and the
    dense baselines' exponentials (numpy's, the same in both paths)."""
    out = np.empty((len(LOOKUPS), new.shape[1]))
    out[A_PEAK_LP:A_PEAK_LP + LP_NUMBERS] = _hardware_lp(c, hardware, new)
    out[A_TOKEN_COPIES] = token_copies(new)
    out[A_MOE_HOST] = moe_host_table_s(c, new, fields[RECOMPUTE_CODE], hw)
    return _with_states(out, fields, new, dense, state_bytes_delta, _sharding_level(new, fields))


def _with_states(out: np.ndarray, fields: np.ndarray, new: np.ndarray, dense: np.ndarray,
                 state_bytes: Callable[[np.ndarray, np.ndarray, np.ndarray], StateBytes],
                 level: np.ndarray) -> np.ndarray:
    """`out` with the lookups a table and a record share: the sharding `level`, the memory
    settings' bytes per parameter (`state_bytes`: a table's grouping or one record's) and the
    dense baselines' exponentials."""
    out[A_HELD], out[A_MAIN], out[A_HELD_SHARDED] = state_bytes(fields, new, level)
    out[A_LEVEL] = level
    out[A_EST_TIME] = np.exp(dense[D_EST_LOG_TIME])
    out[A_EST_MEMORY] = np.exp(dense[D_EST_LOG_MEMORY])
    return out


def record_lookups(record: Mapping[str, Any], fields: np.ndarray, new: np.ndarray,
                   dense: np.ndarray, hw: Hardware,
                   hardware: Mapping[str, HardwareSpec] | None) -> np.ndarray:
    """`lookups` of one record (its (rows, 1) matrices and one-element hardware numbers) from
    its own values: the same tables, without a table's grouping (`Surrogate.predict_one`)."""
    out = np.empty((len(LOOKUPS), 1))
    out[A_PEAK_LP:A_PEAK_LP + LP_NUMBERS, 0] = _lp_numbers(
        _spec(str(record["gpu"]), hardware), str(record["precision"]), int(new[FP8_RECIPE, 0]))
    out[A_TOKEN_COPIES] = token_copies_of_record(new)
    out[A_MOE_HOST] = moe_host_of_record(record, new, fields[RECOMPUTE_CODE], hw)
    return _with_states(out, fields, new, dense, state_bytes_of_record, _sharding_level(new, fields))


def extended_values(c: Mapping[str, Any], fields: np.ndarray, effective: np.ndarray, new: np.ndarray,
                    models: np.ndarray, dense: np.ndarray, hw: Hardware,
                    hardware: Mapping[str, HardwareSpec] | None) -> dict[str, np.ndarray]:
    """`EXTENDED_PHYSICS` of each row plus the corrected ``est_log_time_s`` and
    ``est_log_memory_bytes``, with numpy over the table (`extended_row` on matrices; the
    compiled loop is `surrogate.extended_kernel`). `dense`: the (`DENSE_READ`, rows) dense
    physics features of the effective rows, `hw`: the dense physics' hardware numbers per row."""
    aux = lookups(c, fields, new, dense, hw, hardware)
    with np.errstate(all="ignore"):  # dense rows' MoE terms divide by 0 experts; `where` drops them
        values = extended_row(fields, new, models, aux, dense, hw,
                              rows_of_fields(list(fields), hw, NAN_EFFS), rows_of_fields(list(effective), hw))
    out = {name: np.broadcast_to(np.asarray(v, dtype=np.float64), (new.shape[1],))
           for name, v in zip(EXTENDED_PHYSICS, values, strict=False)}
    out.update(baselines(values[-2], values[-1], aux, dense))
    return out


def baselines(time: np.ndarray, memory: np.ndarray, aux: np.ndarray,
              dense: np.ndarray) -> dict[str, np.ndarray]:
    """The corrected ``est_log_time_s`` and ``est_log_memory_bytes`` of the estimates (a row
    without a correction keeps its dense baseline to the bit)."""
    return {"est_log_time_s": np.where(time == aux[A_EST_TIME], dense[D_EST_LOG_TIME], np.log(time)),
            "est_log_memory_bytes": np.where(memory == aux[A_EST_MEMORY], dense[D_EST_LOG_MEMORY],
                                             np.log(memory))}


# The new columns' values of a plain row (`is_plain`): their rows of `NEW_COLUMNS`, the values.
_PLAIN = {"cp": 1.0, "ep": 1.0, "cuda_graphs": 0.0, "tp_comm_overlap": 0.0, "moe_overlap_ep_comm": 0.0,
          "data_parallel_sharding": 0.0, "fp8_recipe": 0.0, "fp4_recipe": 0.0,
          "grad_reduce_in_fp32": 0.0, "exp_avg_dtype": 0.0, "exp_avg_sq_dtype": 0.0,
          "first_stage_layers": 0.0, "last_stage_layers": 0.0, "overlap_param_gather": 0.0}
_PLAIN_ROWS = np.array([NEW_COLUMNS.index(k) for k in _PLAIN], dtype=np.intp)
_PLAIN_VALUES = np.array(list(_PLAIN.values()))[:, None]
_EXPERT_TP_ROW = NEW_COLUMNS.index("expert_tp")


def is_plain(new: np.ndarray, fields: np.ndarray, general: np.ndarray) -> bool:
    """Whether no row of a table uses a dimension past the dense surrogate (a dense 16-bit
    table: `plain_values` gives its `extended_values`, without their cost)."""
    if fields.shape[1] == 1:  # one record: its numbers (a numpy reduction per test costs more)
        return (not general[0] and fields[_F["precision"], 0] < 2
                and bool((new[_PLAIN_ROWS, 0] == _PLAIN_VALUES[:, 0]).all())
                and new[_EXPERT_TP_ROW, 0] == fields[_F["tp"], 0]
                and new[NVLINK_DOMAIN, 0] <= fields[_F["gpus_per_node"], 0])
    # one comparison per column, stopping at the first that fails (the whole block compared at
    # once cost ~1.5 ms per 20,000 rows, ~5% of a dense batch)
    return (not general.any() and bool((fields[_F["precision"]] < 2).all())
            and all(bool((new[r] == v).all()) for r, v in zip(_PLAIN_ROWS, _PLAIN_VALUES[:, 0], strict=True))
            and bool((_col(new, "expert_tp") == fields[_F["tp"]]).all())
            # an NVLink domain beyond the node (NVL72) maps onto `effective_fields`' "node"
            and bool((_col(new, "nvlink_domain") <= fields[_F["gpus_per_node"]]).all()))


def plain_values(fields: np.ndarray, new: np.ndarray, models: np.ndarray, dense: np.ndarray,
                 hw: Hardware) -> dict[str, np.ndarray]:
    """`extended_values` of a plain table (`is_plain`), the same expressions where they are not
    zero (tests/surrogate_tests/test_records.py compares the two)."""
    f = fields
    zero = np.zeros(fields.shape[1])
    t, d, s = f[TP], f[DP], f[SEQ_LENGTH]
    forward = models[M_FORWARD]
    values = {name: zero for name in EXTENDED_PHYSICS}
    values.update({
        "active_ffn": models[M_ACTIVE_FFN], "model_params_all": models[M_PARAMS_ALL],
        "model_params_active": models[M_PARAMS_ACTIVE], "forward_flops_per_token": forward,
        "flops_per_gpu_all": 3 * forward * f[GLOBAL_BATCH_SIZE] * s / f[NUM_GPUS],
        "expert_dp": np.maximum(1.0, t * 1.0 * d / (t * 1.0)), "lp_speedup": zero + 1.0,
        "sharding_level": _sharding_level(new, f),
        "dense_est_log_time_s": dense[D_EST_LOG_TIME],
        "dense_est_log_memory_bytes": dense[D_EST_LOG_MEMORY],
        "hw_peak_lp": dense[D_PEAK_BF16], "hw_lp_efficiency": zero + 1.0,
        "est_log_memory_bytes": dense[D_EST_LOG_MEMORY]})
    tree = plain_tree_correction(fields, dense, hw)
    est = np.exp(dense[D_EST_LOG_TIME])
    time = np.maximum(est + tree + 0.0, 0.2 * est)
    values["time_dp_tree_s"] = tree
    values["est_log_time_s"] = np.where(time == est, dense[D_EST_LOG_TIME], np.log(time))
    return values


_LEVELS = np.array([-1.0, *(s.level for s in DataParallelSharding)])
_OPTIM_LEVEL = float(DataParallelSharding.OPTIM.level)
_NO_SHARD_LEVEL = float(DataParallelSharding.NO_SHARD.level)


def _sharding_level(new: np.ndarray, f: np.ndarray) -> np.ndarray:
    """`DataParallelSharding.level` of each row (`Job.sharding`: the column, else the
    distributed optimizer's ZeRO-1 or none). One row (a single prediction) is worked out on its
    numbers: the same result without a numpy call per step."""
    if f.shape[1] == 1:
        return np.array([_level(float(new[DATA_PARALLEL_SHARDING, 0]), float(f[DISTRIBUTED_OPTIMIZER, 0]))])
    return _level(new[DATA_PARALLEL_SHARDING], f[DISTRIBUTED_OPTIMIZER])


def _level(code: Any, distributed_optimizer: Any) -> Any:
    """`_sharding_level` of rows' codes (0: none, then the enum's order), or of one row's."""
    chosen = _LEVELS[code.astype(np.intp)] if isinstance(code, np.ndarray) else float(_LEVELS[int(code)])
    fallback = where(distributed_optimizer > 0, _OPTIM_LEVEL, _NO_SHARD_LEVEL)
    return where(chosen >= 0, chosen, fallback)
