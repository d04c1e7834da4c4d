"""The physics features of a row, and the compiled loop that fills them in for a whole table.

`physics_values` is the one definition of the features (`PHYSICS_FEATURES`, in order) in terms
of `surrogate.physics` and `surrogate.timing`. It runs on numpy arrays of n rows (vectorized:
one array operation per formula term, each allocating n floats) and, with numba installed
(`simulator.jit`), compiled inside `_physics_kernel`, which walks the rows one by one with
every intermediate in registers: on 100k rows the array version spends most of its time
writing and reading temporaries much larger than the CPU caches. Both give the same numbers
(tests/surrogate_tests/test_kernel.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from simulator.jit import HAVE_NUMBA, njit
from simulator.specs import HardwareSpec
from surrogate.physics import (
    Hardware,
    Rows,
    Vec,
    flops,
    hardware_arrays,
    hardware_table,
    log,
    make_rows,
    maximum,
    memory,
    row_field_arrays,
    rows_of_fields,
    stage_params,
    where,
)
from surrogate.timing import gemm_efficiency, iteration

# Parts of the iteration estimate that become a log-seconds and a share-of-total feature each.
_PARTS = ("pipeline", "stage_mb", "layer", "layer_compute", "tp_comm", "recompute", "host_excess",
          "attention", "p2p", "pp_comm", "dp_comm", "dp_exposed", "embedding_sync", "optimizer")
_HW_FEATURES = ("peak_bf16", "hbm_Bps", "num_sms", "host_s", "coll_s", "mb_s")

PHYSICS_FEATURES: tuple[str, ...] = (
    "est_log_time_s", "est_log_memory_bytes", "log_params", "log_stage_params", "log_model_flops",
    "log_flops_per_gpu", "log_compute_bound_s", "microbatches", "log_microbatches",
    "layers_per_stage", "layers_per_chunk", "tokens_per_microbatch", "bubble_fraction",
    "arithmetic_intensity", "gemm_efficiency", "head_dim", "schedule_code", "recompute_code",
    "memory_ratio", "memory_capacity_bytes", "log_activation_bytes", "log_weight_state_bytes",
    "log_layer_saved_bytes", "log_layer_working_bytes", "log_mem_first", "log_mem_last",
    "log_tp_bytes", "log_dp_bytes", "log_p2p_bytes",
    *(f"{kind}_{part}{'_s' if kind == 'log' else ''}" for part in _PARTS for kind in ("log", "share")),
    *(f"hw_{key}" for key in _HW_FEATURES))


@njit
def _log(x: Vec) -> Vec:
    return log(maximum(x, 1e-30))


@njit
def physics_values(r: Rows) -> tuple[Vec, ...]:
    """The `PHYSICS_FEATURES` of rows `r`, in that order. ``est_log_time_s`` and
    ``est_log_memory_bytes`` are the closed-form baselines the model's residual targets are taken
    against (see surrogate.model)."""
    params = stage_params(r)
    fl = flops(r)
    mem = memory(r, params)
    stage = maximum(params.first, params.last)
    it = iteration(r, stage, params.vocab_p)
    T = r.b * r.s
    main_k = r.h
    intensity = 2 * T * r.f / r.t * main_k / ((T * main_k + main_k * r.f / r.t + T * r.f / r.t) * 2)
    return (
        _log(it.total), _log(mem.peak), _log(params.total), _log(stage), _log(fl.model),
        _log(fl.hardware / r.N), _log(fl.hardware / r.N / r.peak), r.m, _log(r.m), r.L / r.p,
        r.L / (r.p * r.v), T, it.bubble, intensity, gemm_efficiency(r, 1.0, T, r.f / r.t, r.h),
        r.h / r.a, r.schedule, r.recompute, mem.peak / r.hw.memory_bytes, r.hw.memory_bytes,
        _log(mem.activations), _log(mem.weights_states), _log(mem.layer_saved),
        _log(mem.layer_working + 1), _log(mem.first), _log(mem.last),
        _log(T * r.h * 2.0 * (r.t > 1) + 1),
        _log(stage * where(r.bf16 > 0, 4.0, 2.0) * (r.d > 1) + 1),
        _log(T * r.h * 2.0 / where(r.sp > 0, r.t, 1.0) * (r.p > 1) + 1),
        _log(it.pipeline + 1e-9), it.pipeline / it.total,
        _log(it.stage_mb + 1e-9), it.stage_mb / it.total,
        _log(it.layer + 1e-9), it.layer / it.total,
        _log(it.layer_compute + 1e-9), it.layer_compute / it.total,
        _log(it.tp_comm + 1e-9), it.tp_comm / it.total,
        _log(it.recompute + 1e-9), it.recompute / it.total,
        _log(it.host_excess + 1e-9), it.host_excess / it.total,
        _log(it.attention + 1e-9), it.attention / it.total,
        _log(it.p2p + 1e-9), it.p2p / it.total,
        _log(it.pp_comm + 1e-9), it.pp_comm / it.total,
        _log(it.dp_comm + 1e-9), it.dp_comm / it.total,
        _log(it.dp_exposed + 1e-9), it.dp_exposed / it.total,
        _log(it.embedding_sync + 1e-9), it.embedding_sync / it.total,
        _log(it.optimizer + 1e-9), it.optimizer / it.total,
        r.hw.peak_bf16, r.hw.hbm_Bps, r.hw.num_sms, r.hw.host_s, r.hw.coll_s, r.hw.mb_s)


@njit
def _row(fields: np.ndarray, hw: np.ndarray, i: int) -> Rows:
    """Row `i` of a (`ROW_FIELDS`, rows) matrix on the hardware numbers `hw` (`HW_FIELDS`)."""
    c = fields[:, i]
    return make_rows(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11],
                     c[12], c[13], c[14], c[15], c[16], c[17], c[18], c[19], c[20], c[21], c[22],
                     c[23], c[24],
                     Hardware(hw[0], hw[1], hw[2], hw[3], hw[4], hw[5], hw[6], hw[7], hw[8],
                              hw[9], hw[10], hw[11], hw[12], hw[13], hw[14], hw[15], hw[16]))


@njit
def _feature_kernel(fields: np.ndarray, hw_table: np.ndarray, gpu: np.ndarray,
                    out: np.ndarray) -> None:
    """Row i of `out` = the fields of row i (its raw features), then its `physics_values`."""
    raw = fields.shape[0]
    for i in range(fields.shape[1]):
        for j in range(raw):
            out[i, j] = fields[j, i]
        values = physics_values(_row(fields, hw_table[gpu[i]], i))
        for j in range(len(values)):
            out[i, raw + j] = values[j]


def row_filler(fields: list[np.ndarray], gpu: Any, hardware: Mapping[str, HardwareSpec] | None,
               out: np.ndarray) -> Callable[[int, int], None]:
    """`fill(a, b)`: the compiled `fill_features` of rows a to b, the inputs prepared once."""
    table, codes = hardware_table(gpu, hardware)
    stacked = np.stack(fields)

    def fill(a: int, b: int) -> None:
        _feature_kernel(stacked[:, a:b], table, codes[a:b], out[a:b])

    return fill


def fill_features(fields: list[np.ndarray], gpu: Any, hardware: Mapping[str, HardwareSpec] | None,
                  out: np.ndarray, compiled: bool = HAVE_NUMBA) -> None:
    """Fill `out` (rows x (`ROW_FIELDS` + `PHYSICS_FEATURES`), any memory order) with the row
    fields (`surrogate.physics.row_field_arrays`) followed by the physics features: compiled
    row by row where numba is installed, else vectorized with numpy."""
    width = len(fields)
    if compiled:
        row_filler(fields, gpu, hardware, out)(0, len(out))
        return
    for j, values in enumerate(fields):
        out[:, j] = values
    for j, values in enumerate(physics_values(rows_of_fields(fields, hardware_arrays(gpu, hardware))),
                               start=width):
        out[:, j] = values


def physics_matrix(columns: Mapping[str, Any],
                   hardware: Mapping[str, HardwareSpec] | None = None) -> np.ndarray:
    """float64 (rows, `PHYSICS_FEATURES`) matrix of a table of `JOB_COLUMNS`."""
    fields = row_field_arrays(columns)
    out = np.empty((len(columns["num_layers"]), len(fields) + len(PHYSICS_FEATURES)))
    fill_features(fields, columns["gpu"], hardware, out)
    return out[:, len(fields):]


def features_of_values(values: list[float], hw: np.ndarray, out: np.ndarray) -> None:
    """One job: `out[0]` = its raw and physics features from its `ROW_FIELDS` values and its
    GPU's `HW_FIELDS` numbers (the single-prediction path, compiled where numba is installed)."""
    if HAVE_NUMBA:
        _feature_kernel(np.array(values).reshape(-1, 1), hw.reshape(1, -1), _ZERO, out)
        return
    out[0, :len(values)] = values
    out[0, len(values):] = physics_values(rows_of_fields(values, Hardware(*hw.tolist())))


_ZERO = np.zeros(1, dtype=np.intp)
