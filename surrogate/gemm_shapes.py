"""The GEMM efficiencies a row's dense physics reads, computed for a whole table in one pass.

The dense physics prices a layer's projections, its attention core and the output layer at the
simulator's tile / wave / depth efficiency of each GEMM's shape
(`simulator.costs.analytic.gemm_efficiency`). Called inside the compiled row kernels
(`surrogate.kernel`, `surrogate.extended_kernel`), each call is scalar code with 13 divisions,
about a quarter of the kernels' time; called in one loop over a table's plain columns, LLVM
vectorizes it across rows (~4 ns a call against ~16). So `effs_table` computes every row's
`GemmEffs` first and the row kernels read them (`Rows.eff`); the numpy path and one job compute
the same `gemm_effs` on their arrays or floats (`effs_of_fields`). The shapes are written once,
here, in the order of operations the physics used before, so all paths give the same bits
(tests/surrogate_tests/test_kernel.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from simulator.jit import njit
from surrogate.compiled_ops import Vec, ceil, gemm_efficiency


class GemmEffs(NamedTuple):
    """A row's GEMM efficiencies: a forward of Y[m,n] = X[m,k] W[k,n] (m x n, depth k; its data
    gradient is given the same) and its weight gradient (n x k, depth m), per shape."""

    qkv: Vec  # the QKV projection, T x (heads + 2 groups) hd, depth h
    qkv_w: Vec
    proj: Vec  # the attention output projection, T x h, depth heads hd
    proj_w: Vec
    up: Vec  # MLP up (gated: both halves), T x up, depth h
    up_w: Vec
    down: Vec  # MLP down, T x h, depth ffn / tp
    down_w: Vec
    scores: Vec  # the unfused core's QK^T forward: batch b heads, s x s, depth hd
    s_hd_s: Vec  # (b heads, s, hd, s): QK^T's weight gradient and AV's forward
    av_w: Vec  # AV's weight gradient (b heads, hd, s, s)
    flash: Vec  # flash attention's GEMMs, (b heads, s, hd, s) at the fused kernel's own ceiling
    logits: Vec  # the output layer, T x padded vocab / tp, depth h
    logits_w: Vec
    mlp: Vec  # T x ffn / tp, depth h: the `gemm_efficiency` feature (surrogate.kernel)


N_EFFS = len(GemmEffs._fields)
# The `surrogate.physics.ROW_FIELDS` the shapes read, and the hardware numbers
# (`surrogate.physics.HW_FIELDS`): kept in step by tests/surrogate_tests/test_gemm_shapes.py.
SHAPE_FIELDS = (9, 7, 1, 2, 3, 4, 5, 6, 14)  # b, s, h, a, g, f, gated, V, t
HW_COLUMNS = (4, 5, 6, 18, 19)  # num_sms, gemm_max, k_half, attention_max, attention_k_half


@njit(inline=True)
def padded_vocab(V: Vec, t: Vec) -> Vec:
    """The vocabulary padded to a multiple of 128 x tp (Megatron's `make_vocab_size_divisible_by`)."""
    return ceil(V / (128 * t)) * 128 * t


class GemmDims(NamedTuple):
    """The GEMM dimensions a row's shapes are made of (`gemm_dims`; surrogate.timing prices the
    same GEMMs' FLOPs and bytes from them, so a shape and its efficiency cannot drift apart)."""

    T: Vec  # tokens of a micro-batch
    hd: Vec  # head dim
    heads: Vec  # attention heads per tp rank
    qkv_out: Vec  # QKV projection's outputs per tp rank
    up: Vec  # MLP up's outputs per tp rank (gated: both halves)
    bh: Vec  # batch x heads of the attention core's GEMMs
    vocab: Vec  # padded vocabulary per tp rank


@njit(inline=True)
def gemm_dims(b: Vec, s: Vec, h: Vec, a: Vec, g: Vec, f: Vec, gated: Vec, V: Vec, t: Vec) -> GemmDims:
    """`GemmDims` of rows' fields (arrays, or one row's floats)."""
    T, hd = b * s, h / a
    heads, groups = a / t, g / t
    return GemmDims(T, hd, heads, (heads + 2 * groups) * hd, f / t * (1 + gated), b * heads,
                 padded_vocab(V, t) / t)


@njit(inline=True)
def _projection_effs(d: GemmDims, h: Vec, f: Vec, t: Vec, num_sms: Vec, gemm_max: Vec,
                     k_half: Vec) -> tuple[Vec, Vec, Vec, Vec, Vec, Vec, Vec, Vec]:
    """`GemmEffs` 0-7 (the four projections)."""
    return (gemm_efficiency(1.0, d.T, d.qkv_out, h, num_sms, gemm_max, k_half),
            gemm_efficiency(1.0, d.qkv_out, h, d.T, num_sms, gemm_max, k_half),
            gemm_efficiency(1.0, d.T, h, d.heads * d.hd, num_sms, gemm_max, k_half),
            gemm_efficiency(1.0, h, d.heads * d.hd, d.T, num_sms, gemm_max, k_half),
            gemm_efficiency(1.0, d.T, d.up, h, num_sms, gemm_max, k_half),
            gemm_efficiency(1.0, d.up, h, d.T, num_sms, gemm_max, k_half),
            gemm_efficiency(1.0, d.T, h, f / t, num_sms, gemm_max, k_half),
            gemm_efficiency(1.0, h, f / t, d.T, num_sms, gemm_max, k_half))


@njit(inline=True)
def _other_effs(d: GemmDims, s: Vec, h: Vec, f: Vec, t: Vec, num_sms: Vec, gemm_max: Vec, k_half: Vec,
                attention_max: Vec, attention_k_half: Vec) -> tuple[Vec, Vec, Vec, Vec, Vec, Vec, Vec]:
    """`GemmEffs` 8-14 (the attention core, the output layer, the MLP feature's shape)."""
    return (gemm_efficiency(d.bh, s, s, d.hd, num_sms, gemm_max, k_half),
            gemm_efficiency(d.bh, s, d.hd, s, num_sms, gemm_max, k_half),
            gemm_efficiency(d.bh, d.hd, s, s, num_sms, gemm_max, k_half),
            gemm_efficiency(d.bh, s, d.hd, s, num_sms, attention_max, attention_k_half),
            gemm_efficiency(1.0, d.T, d.vocab, h, num_sms, gemm_max, k_half),
            gemm_efficiency(1.0, d.vocab, h, d.T, num_sms, gemm_max, k_half),
            gemm_efficiency(1.0, d.T, f / t, h, num_sms, gemm_max, k_half))


@njit(inline=True)
def gemm_effs(b: Vec, s: Vec, h: Vec, a: Vec, g: Vec, f: Vec, gated: Vec, V: Vec, t: Vec,
              num_sms: Vec, gemm_max: Vec, k_half: Vec, attention_max: Vec,
              attention_k_half: Vec) -> GemmEffs:
    """`GemmEffs` of rows' fields (arrays, or one row's floats) on their hardware numbers."""
    d = gemm_dims(b, s, h, a, g, f, gated, V, t)
    p0, p1, p2, p3, p4, p5, p6, p7 = _projection_effs(d, h, f, t, num_sms, gemm_max, k_half)
    o0, o1, o2, o3, o4, o5, o6 = _other_effs(d, s, h, f, t, num_sms, gemm_max, k_half, attention_max,
                                             attention_k_half)
    return GemmEffs(p0, p1, p2, p3, p4, p5, p6, p7, o0, o1, o2, o3, o4, o5, o6)


def effs_of_fields(fields: Sequence[Vec], hw: Any) -> GemmEffs:
    """`gemm_effs` of `ROW_FIELDS` values in order (arrays, or one row's floats) and a
    `surrogate.physics.Hardware` (the numpy path and one job)."""
    b, s, h, a, g, f, gated, V, t = (fields[j] for j in SHAPE_FIELDS)
    return gemm_effs(b, s, h, a, g, f, gated, V, t, hw.num_sms, hw.gemm_max, hw.k_half,
                     hw.attention_max, hw.attention_k_half)


@njit
def effs_table(fields: np.ndarray, hw_table: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """(`N_EFFS`, rows) matrix of the `GemmEffs` of a (`ROW_FIELDS`, rows) matrix whose row i
    runs on the GPU `hw_table[gpu[i]]`. The hardware numbers are gathered into plain columns
    first, and each loop over rows writes at most 8 outputs: LLVM vectorizes a loop only where
    its runtime checks that the outputs overlap no input stay few (a loop of all 15 ran scalar,
    ~19 ns an efficiency against ~4.4)."""
    n = fields.shape[1]
    hw = np.empty((len(HW_COLUMNS), n))
    for i in range(n):
        for j in range(len(HW_COLUMNS)):
            hw[j, i] = hw_table[gpu[i], HW_COLUMNS[j]]
    out = np.empty((N_EFFS, n))
    b, s, h = fields[SHAPE_FIELDS[0]], fields[SHAPE_FIELDS[1]], fields[SHAPE_FIELDS[2]]
    a, g, f = fields[SHAPE_FIELDS[3]], fields[SHAPE_FIELDS[4]], fields[SHAPE_FIELDS[5]]
    gated, V, t = fields[SHAPE_FIELDS[6]], fields[SHAPE_FIELDS[7]], fields[SHAPE_FIELDS[8]]
    sms, mx, kh, amx, akh = hw[0], hw[1], hw[2], hw[3], hw[4]
    for i in range(n):
        d = gemm_dims(b[i], s[i], h[i], a[i], g[i], f[i], gated[i], V[i], t[i])
        e = _projection_effs(d, h[i], f[i], t[i], sms[i], mx[i], kh[i])
        out[0, i], out[1, i], out[2, i], out[3, i] = e[0], e[1], e[2], e[3]
        out[4, i], out[5, i], out[6, i], out[7, i] = e[4], e[5], e[6], e[7]
    for i in range(n):
        d = gemm_dims(b[i], s[i], h[i], a[i], g[i], f[i], gated[i], V[i], t[i])
        o = _other_effs(d, s[i], h[i], f[i], t[i], sms[i], mx[i], kh[i], amx[i], akh[i])
        out[8, i], out[9, i], out[10, i], out[11, i] = o[0], o[1], o[2], o[3]
        out[12, i], out[13, i], out[14, i] = o[4], o[5], o[6]
    return out


@njit(inline=True)
def effs_at(effs: np.ndarray, fields: np.ndarray, hw: np.ndarray, i: int) -> GemmEffs:
    """Row i's `GemmEffs`: column i of an `effs_table` matrix, or, where `effs` has no columns
    (`NO_TABLE`: one job, for which a separate compiled call costs more than the scalar code),
    computed here from row i of `fields` and its GPU's `HW_FIELDS` numbers `hw`."""
    if effs.shape[1] == 0:
        return gemm_effs(fields[SHAPE_FIELDS[0], i], fields[SHAPE_FIELDS[1], i], fields[SHAPE_FIELDS[2], i],
                         fields[SHAPE_FIELDS[3], i], fields[SHAPE_FIELDS[4], i], fields[SHAPE_FIELDS[5], i],
                         fields[SHAPE_FIELDS[6], i], fields[SHAPE_FIELDS[7], i], fields[SHAPE_FIELDS[8], i],
                         hw[HW_COLUMNS[0]], hw[HW_COLUMNS[1]], hw[HW_COLUMNS[2]], hw[HW_COLUMNS[3]],
                         hw[HW_COLUMNS[4]])
    return GemmEffs(effs[0, i], effs[1, i], effs[2, i], effs[3, i], effs[4, i], effs[5, i],
                    effs[6, i], effs[7, i], effs[8, i], effs[9, i], effs[10, i], effs[11, i],
                    effs[12, i], effs[13, i], effs[14, i])


NO_TABLE = np.empty((N_EFFS, 0))  # `effs_at` computes each row's efficiencies itself
NAN_EFFS = GemmEffs(*([float("nan")] * N_EFFS))  # rows whose physics reads no GEMM efficiency
