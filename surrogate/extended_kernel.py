"""The compiled loop that fills a table's extended features (`surrogate.extended`) row by row.

`surrogate.extended_terms.extended_row` is written once over vectors indexed by `surrogate.slots`;
numpy runs it on a table's matrices (one array operation per term, each allocating a
temporary per row), this loop (numba, `simulator.jit`) on one row's columns at a time with
every intermediate in registers. What a row takes from tables keyed by a few of its columns
(`surrogate.extended.lookups`: per GPU and recipe, per MoE launch key, per memory setting) is
looked up with numpy before, and the two baselines' logarithms are taken with numpy after, so
that both paths share those numbers to the bit (numba's `math.exp` and numpy's differ in the
last bit on ~5% of arguments on AVX-512 machines). tests/surrogate_tests/test_extended_kernel.py
checks that both paths give the same matrix.
"""

from __future__ import annotations

import numpy as np

from simulator.jit import njit
from surrogate.extended import EXTENDED_PHYSICS
from surrogate.extended_terms import extended_row
from surrogate.gemm_shapes import NAN_EFFS, effs_at
from surrogate.kernel import _row
from surrogate.physics import Hardware

_N_PHYSICS = len(EXTENDED_PHYSICS)


@njit
def _hardware(hw: np.ndarray) -> Hardware:
    return Hardware(hw[0], hw[1], hw[2], hw[3], hw[4], hw[5], hw[6], hw[7], hw[8], hw[9], hw[10],
                    hw[11], hw[12], hw[13], hw[14], hw[15], hw[16], hw[17], hw[18], hw[19], hw[20],
                    hw[21])


@njit
def extended_kernel(fields: np.ndarray, effective: np.ndarray, new: np.ndarray, models: np.ndarray,
                    aux: np.ndarray, dense: np.ndarray, hw_table: np.ndarray, gpu: np.ndarray,
                    effs: np.ndarray, out: np.ndarray, first: int, estimates: np.ndarray) -> None:
    """Row i of `out` from column `first` on: its new columns (`new[:, i]`), then its
    `EXTENDED_PHYSICS`; `estimates[:, i]`: its corrected time and memory estimates. `fields`,
    `effective`: the rows' own and effective `ROW_FIELDS` (surrogate.extended.effective_fields);
    `effs`: the effective rows' `surrogate.gemm_shapes.effs_table`, or `NO_TABLE` (the physics
    prices GEMMs on the effective rows only, so the own rows carry `NAN_EFFS`)."""
    width = new.shape[0]
    for i in range(fields.shape[1]):
        hw_row = hw_table[gpu[i]]
        for j in range(width):
            out[i, first + j] = new[j, i]
        values = extended_row(fields[:, i], new[:, i], models[:, i], aux[:, i], dense[:, i],
                              _hardware(hw_row), _row(fields, hw_row, NAN_EFFS, i),
                              _row(effective, hw_row, effs_at(effs, effective, hw_row, i), i))
        for j in range(_N_PHYSICS):
            out[i, first + width + j] = values[j]
        estimates[0, i] = values[_N_PHYSICS]
        estimates[1, i] = values[_N_PHYSICS + 1]
