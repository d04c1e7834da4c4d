"""Memory terms of the surrogate's closed form (`surrogate.extended`) that today's recipes
change: the bytes per parameter of the memory settings (a 16-bit gradient buffer, 16-bit Adam
moments; simulator.job.param_bytes, the one place they come from) and the saved activations a
low-precision recipe keeps quantized (simulator.graph.quantize)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from simulator.jit import njit
from simulator.job.enums import DataParallelSharding, StateDtype
from simulator.job.param_bytes import training_param_bytes
from simulator.job.specs import TrainingSpec
from surrogate.columns import small_unique
from surrogate.compiled_ops import Vec, maximum, where
from surrogate.physics import PRECISIONS, RECOMPUTE
from surrogate.records import CHOICES, NEW_COLUMNS, NONE
from surrogate.records import new_column as _col
from surrogate.slots import (
    CP,
    D_ACTIVATIONS,
    D_LAYER_SAVED,
    DP,
    HIDDEN_SIZE,
    MICRO_BATCH_SIZE,
    PRECISION,
    RECOMPUTE_CODE,
    SEQ_LENGTH,
    SEQUENCE_PARALLEL,
    TP,
)

_FULL = float(RECOMPUTE.index("full"))


@njit(inline=True)
def quantized_activations_delta(f: Any, new: Any, dense: Any, element: Vec, quantized: Any,
                                ffn: Vec) -> Vec:
    """Bytes a low-precision recipe changes in the saved activations at the peak
    (simulator.graph.quantize.linear): each linear keeps its quantized input (`element` bytes
    each) for the weight gradient instead of the 16-bit one -- QKV's and the MLP up
    projection's norm outputs (the sequence-parallel shard), the down projection's input -- and
    the attention projection keeps a quantized copy beside the 16-bit attention output; per
    layer and micro-batch, times the layer-micro-batches the dense form holds at its peak (full
    recompute saves only each layer's input: no change). `f`, `new`, `dense`: `surrogate.slots`."""
    t, b, s, h = f[TP], f[MICRO_BATCH_SIZE], f[SEQ_LENGTH], f[HIDDEN_SIZE]
    tokens = b * s / new[CP]
    shard = where((f[SEQUENCE_PARALLEL] > 0) & (t > 1), 1 / t, 1.0)
    per_layer = (element - 2) * (2 * tokens * h * shard + tokens * ffn / t) + element * tokens * h / t
    layers = dense[D_ACTIVATIONS] / maximum(dense[D_LAYER_SAVED], 1.0)
    not_full = f[RECOMPUTE_CODE] != _FULL
    return where(quantized & not_full, layers * per_layer, 0.0)


_MEMORY_COLUMNS = ("grad_reduce_in_fp32", "exp_avg_dtype", "exp_avg_sq_dtype", "fp8_recipe", "fp4_recipe")
_MEMORY_ROWS = tuple(NEW_COLUMNS.index(c) for c in _MEMORY_COLUMNS)
_CP_ROW = NEW_COLUMNS.index("cp")
# the gradient buffer's and the moments' codes that change nothing (the framework's defaults)
_DEFAULT_MEMORY_CODES = (CHOICES["grad_reduce_in_fp32"].index(NONE), CHOICES["exp_avg_dtype"].index("fp32"),
                         CHOICES["exp_avg_sq_dtype"].index("fp32"))


def _role_deltas(precision: str, recipe: str | None, grad: str, m1: str,
                 m2: str) -> tuple[float, float, float]:
    """(replicated, sharded held throughout, fp32 main-gradient copy) bytes per parameter that
    the memory settings add to the framework's defaults (simulator.job.param_bytes.
    training_param_bytes; Megatron-LM, as every record). The main-gradient copy exists only
    while the optimizer steps (simulator.memory.stages: the optimizer moment), not beside the
    activations."""
    base = TrainingSpec(global_batch_size=1, precision=precision)
    settings = base.model_copy(update={
        "grad_reduce_in_fp32": None if grad == NONE else grad == "true",
        "exp_avg_dtype": StateDtype(m1), "exp_avg_sq_dtype": StateDtype(m2)})
    a, b = training_param_bytes(settings, recipe), training_param_bytes(base, recipe)
    main = float(a.main_gradients - b.main_gradients)
    return float(a.replicated - b.replicated), float(a.sharded - b.sharded) - main, main


@lru_cache(maxsize=512)
def _deltas_of_codes(p: int, g: int, m1: int, m2: int, r8: int, r4: int) -> tuple[float, float, float]:
    """`_role_deltas` of the memory settings' codes (precision, then `_MEMORY_COLUMNS`)."""
    recipe = CHOICES["fp8_recipe"][r8] if PRECISIONS[p] == "fp8" else (
        CHOICES["fp4_recipe"][r4] if PRECISIONS[p] == "fp4" else NONE)
    return _role_deltas(PRECISIONS[p], None if recipe == NONE else recipe,
                        CHOICES["grad_reduce_in_fp32"][g], CHOICES["exp_avg_dtype"][m1],
                        CHOICES["exp_avg_sq_dtype"][m2])


StateBytes = tuple[np.ndarray, np.ndarray, np.ndarray]


def state_bytes_of_record(f: np.ndarray, new: np.ndarray, level: np.ndarray) -> StateBytes:
    """`state_bytes_delta` of one record's (rows, 1) matrices, without a table's grouping."""
    codes = (int(f[PRECISION, 0]), *(int(new[i, 0]) for i in _MEMORY_ROWS))
    if codes[1:4] == _DEFAULT_MEMORY_CODES:
        return np.zeros(1), np.zeros(1), np.zeros(1)
    repl, sharded, copy = _deltas_of_codes(*codes)
    held, main = _per_rank(repl, sharded, copy, float(level[0]), float(f[DP, 0]),
                           float(new[_CP_ROW, 0]))
    return np.array([held]), np.array([main]), np.array([sharded])


def _per_rank(repl: Vec, sharded: Vec, copy: Vec, level: Vec, dp: Vec, cp: Vec) -> tuple[Vec, Vec]:
    """(held throughout, main-gradient copy) bytes per parameter of a rank from the settings'
    deltas: the sharded roles over dp x cp where the optimizer is sharded, the replicated ones
    (the gradient buffer's dtype: the weights' bytes do not change) where the gradients are too
    (ZeRO-2 and 3; rows, or one row's numbers: the same operations)."""
    shards = where(level >= DataParallelSharding.OPTIM.level, dp * cp, 1.0)
    grad_shards = where(level >= DataParallelSharding.OPTIM_GRADS.level, dp * cp, 1.0)
    return repl / grad_shards + sharded / shards, copy / shards


def state_bytes_delta(f: np.ndarray, new: np.ndarray, level: np.ndarray) -> StateBytes:
    """Bytes per parameter of a stage that a row's gradient-buffer and Adam-moment dtypes add
    (negative: saved): (held throughout, the main-gradient copy of the optimizer moment, the
    held bytes' sharded part before sharding), the sharded roles over dp x cp with the
    distributed optimizer. The routed experts shard theirs over expert_dp instead
    (`surrogate.extended_terms`: held - sharded / (dp cp) + sharded / expert_dp)."""
    codes = np.stack([f[PRECISION], *(_col(new, c) for c in _MEMORY_COLUMNS)]).astype(np.intp)
    set_ = ((codes[1] != CHOICES["grad_reduce_in_fp32"].index(NONE))
            | (codes[2] != CHOICES["exp_avg_dtype"].index("fp32"))
            | (codes[3] != CHOICES["exp_avg_sq_dtype"].index("fp32")))
    held, main, raw = np.zeros(codes.shape[1]), np.zeros(codes.shape[1]), np.zeros(codes.shape[1])
    if not set_.any():
        return held, main, raw
    # one integer per combination, grouped by a table of the few that occur (np.unique over
    # columns is ~50x slower than over one integer, and its sort ~10x slower than the table)
    dims = (len(PRECISIONS), *(len(CHOICES[c]) for c in _MEMORY_COLUMNS))
    flat, inverse = small_unique(np.ravel_multi_index(tuple(codes[:, set_]), dims), int(np.prod(dims)))
    deltas = np.zeros((3, len(flat)))
    for j, combination in enumerate(zip(*np.unravel_index(flat, dims), strict=True)):
        deltas[:, j] = _deltas_of_codes(*(int(c) for c in combination))
    repl, sharded, copy = deltas[:, inverse.ravel()]
    held[set_], main[set_] = _per_rank(repl, sharded, copy, level[set_], f[DP][set_], _col(new, "cp")[set_])
    raw[set_] = sharded
    return held, main, raw
