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

from collections.abc import Mapping
from typing import Any

import numpy as np

from simulator.jit import HAVE_NUMBA, njit
from simulator.job.specs import HardwareSpec
from surrogate.compiled_ops import Vec, log, maximum, where
from surrogate.gemm_shapes import NO_TABLE, GemmEffs, effs_at, effs_table
from surrogate.physics import (
    Hardware,
    Rows,
    flops,
    hardware_of_table,
    hardware_table,
    make_rows,
    memory,
    row_field_matrix,
    rows_of_fields,
    stage_params,
)
from surrogate.timing import iteration

# Parts of the iteration estimate that become a seconds feature and a share-of-total feature each.
_PARTS = ("pipeline", "stage_mb", "layer", "layer_compute", "tp_comm", "recompute", "host_excess",
          "layer_host", "tp_overlap_saving", "attention", "p2p", "pp_comm", "dp_comm", "dp_exposed",
          "embedding_sync", "optimizer")
_HW_FEATURES = ("peak_bf16", "hbm_Bps", "num_sms", "host_s", "coll_s", "mb_s")

# Only the two baselines are logarithms (the residual targets are taken against them). The trees
# split on every other feature by its rank (hist bins are quantiles), which a monotone transform
# does not change: a log per feature would cost ~45 libm calls per row (~0.3 us of ~1.9) and
# teach the trees nothing (docs/speed.md, "Surrogate prediction"). The schedule and recompute
# codes are raw features already (`ROW_FIELDS`).
PHYSICS_FEATURES: tuple[str, ...] = (
    "est_log_time_s", "est_log_memory_bytes", "params", "stage_params", "model_flops",
    "flops_per_gpu", "compute_bound_s", "microbatches", "layers_per_stage", "layers_per_chunk",
    "tokens_per_microbatch", "bubble_fraction", "arithmetic_intensity", "gemm_efficiency",
    "head_dim", "memory_ratio", "memory_capacity_bytes",
    "activation_bytes", "weight_state_bytes", "layer_saved_bytes", "layer_working_bytes",
    "mem_first_bytes", "mem_last_bytes", "tp_bytes", "dp_bytes", "p2p_bytes",
    *(f"{kind}_{part}{'_s' if kind == 'time' else ''}" for part in _PARTS
      for kind in ("time", "share")),
    *(f"hw_{key}" for key in _HW_FEATURES))


@njit
def _log(x: Vec) -> Vec:
    return log(maximum(x, 1e-30))


@njit(inline=True)
def physics_values(r: Rows) -> tuple[Vec, ...]:
    """The `PHYSICS_FEATURES` of rows `r`, in that order. ``est_log_time_s`` and
    ``est_log_memory_bytes`` are the closed-form baselines the model's residual targets are taken
    against (see surrogate.model); the shares multiply by one reciprocal of the total."""
    params = stage_params(r)
    fl = flops(r)
    mem = memory(r, params)
    stage = maximum(params.first, params.last)
    it = iteration(r, stage, params.vocab_p)
    T = r.b * r.s
    main_k = r.h
    intensity = 2 * T * r.f / r.t * main_k / ((T * main_k + main_k * r.f / r.t + T * r.f / r.t) * 2)
    per_total = 1.0 / it.total
    return (
        _log(it.total), _log(mem.peak), params.total, stage, fl.model, fl.hardware / r.N,
        fl.hardware / r.N / r.peak, r.m, r.L / r.p, r.L / (r.p * r.v), T, it.bubble, intensity,
        r.eff.mlp, r.h / r.a, mem.peak / r.hw.memory_bytes,
        r.hw.memory_bytes, mem.activations, mem.weights_states, mem.layer_saved, mem.layer_working,
        mem.first, mem.last, T * r.h * 2.0 * (r.t > 1),
        stage * where(r.bf16 > 0, 4.0, 2.0) * (r.d > 1),
        T * r.h * 2.0 / where(r.sp > 0, r.t, 1.0) * (r.p > 1),
        it.pipeline, it.pipeline * per_total, it.stage_mb, it.stage_mb * per_total,
        it.layer, it.layer * per_total, it.layer_compute, it.layer_compute * per_total,
        it.tp_comm, it.tp_comm * per_total, it.recompute, it.recompute * per_total,
        it.host_excess, it.host_excess * per_total, it.layer_host, it.layer_host * per_total,
        it.tp_overlap_saving, it.tp_overlap_saving * per_total,
        it.attention, it.attention * per_total,
        it.p2p, it.p2p * per_total, it.pp_comm, it.pp_comm * per_total,
        it.dp_comm, it.dp_comm * per_total, it.dp_exposed, it.dp_exposed * per_total,
        it.embedding_sync, it.embedding_sync * per_total, it.optimizer, it.optimizer * per_total,
        r.hw.peak_bf16, r.hw.hbm_Bps, r.hw.num_sms, r.hw.host_s, r.hw.coll_s, r.hw.mb_s)


@njit(inline=True)
def _row(fields: np.ndarray, hw: np.ndarray, eff: GemmEffs, i: int) -> Rows:
    """Row `i` of a (`ROW_FIELDS`, rows) matrix on the hardware numbers `hw` (`HW_FIELDS`), its
    GEMM efficiencies `eff`."""
    c = fields[:, i]
    return make_rows(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11],
                     c[12], c[13], c[14], c[15], c[16], c[17], c[18], c[19], c[20], c[21], c[22],
                     c[23], c[24],
                     Hardware(hw[0], hw[1], hw[2], hw[3], hw[4], hw[5], hw[6], hw[7], hw[8],
                              hw[9], hw[10], hw[11], hw[12], hw[13], hw[14], hw[15], hw[16],
                              hw[17], hw[18], hw[19], hw[20], hw[21]), eff)


@njit
def _feature_kernel(fields: np.ndarray, hw_table: np.ndarray, gpu: np.ndarray, effs: np.ndarray,
                    out: np.ndarray) -> None:
    """Row i of `out` = the fields of row i (its raw features), then its `physics_values`;
    `effs`: the rows' `surrogate.gemm_shapes.effs_table`, or `NO_TABLE`."""
    raw = fields.shape[0]
    for i in range(fields.shape[1]):
        for j in range(raw):
            out[i, j] = fields[j, i]
        hw = hw_table[gpu[i]]
        values = physics_values(_row(fields, hw, effs_at(effs, fields, hw, i), i))
        for j in range(len(values)):
            out[i, raw + j] = values[j]


def fill_features(fields: np.ndarray | list[np.ndarray], gpu: Any,
                  hardware: Mapping[str, HardwareSpec] | None, out: np.ndarray,
                  compiled: bool = HAVE_NUMBA,
                  table: tuple[np.ndarray, np.ndarray] | None = None,
                  effs: np.ndarray | None = None) -> None:
    """Fill `out` (rows x (`ROW_FIELDS` + `PHYSICS_FEATURES`), any memory order) with the row
    fields (`surrogate.physics.row_field_matrix`, or its rows) followed by the physics features:
    compiled row by row where numba is installed, else vectorized with numpy. `table`: the
    rows' `hardware_table`, `effs`: their `effs_table` (compiled), where the caller has them."""
    width = len(fields)
    numbers, codes = table if table is not None else hardware_table(gpu, hardware)
    if compiled:
        matrix = fields if isinstance(fields, np.ndarray) else np.stack(fields)
        _feature_kernel(matrix, numbers, codes,
                        effs_table(matrix, numbers, codes) if effs is None else effs, out)
        return
    for j, values in enumerate(fields):
        out[:, j] = values
    rows = rows_of_fields(list(fields), hardware_of_table(numbers, codes))
    for j, values in enumerate(physics_values(rows), start=width):
        out[:, j] = values


def physics_matrix(columns: Mapping[str, Any],
                   hardware: Mapping[str, HardwareSpec] | None = None) -> np.ndarray:
    """float64 (rows, `PHYSICS_FEATURES`) matrix of a table of `JOB_COLUMNS`."""
    fields = row_field_matrix(columns)
    out = np.empty((len(columns["num_layers"]), len(fields) + len(PHYSICS_FEATURES)))
    fill_features(fields, columns["gpu"], hardware, out)
    return out[:, len(fields):]


def features_of_values(values: list[float], hw: np.ndarray, out: np.ndarray) -> None:
    """One job: `out[0]` = its raw and physics features from its `ROW_FIELDS` values and its
    GPU's `HW_FIELDS` numbers (the single-prediction path, compiled where numba is installed)."""
    if HAVE_NUMBA:
        _feature_kernel(np.array(values).reshape(-1, 1), hw.reshape(1, -1), _ZERO, NO_TABLE, out)
        return
    out[0, :len(values)] = values
    out[0, len(values):len(values) + len(PHYSICS_FEATURES)] = \
        physics_values(rows_of_fields(values, Hardware(*hw.tolist())))


_ZERO = np.zeros(1, dtype=np.intp)



def physics_columns(columns: Mapping[str, Any],
                    hardware: Mapping[str, HardwareSpec] | None = None) -> dict[str, np.ndarray]:
    """Physics features of n rows (arrays of `JOB_COLUMNS` values), as name -> array.

    ``est_log_time_s`` and ``est_log_memory_bytes`` are the closed-form baselines the model's
    residual targets are taken against (see surrogate.model).
    """
    values = physics_matrix(columns, hardware)
    return {name: values[:, j] for j, name in enumerate(PHYSICS_FEATURES)}


def physics_of_rows(r: Rows) -> dict[str, Any]:
    """`physics_columns` of prepared rows (numpy arrays, or one job's floats), name -> value."""
    return dict(zip(PHYSICS_FEATURES, physics_values(r), strict=True))
