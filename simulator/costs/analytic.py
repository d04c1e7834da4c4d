"""Op -> seconds. The `KernelModel` interface and the analytic (roofline) kernel model.

The analytic model gives GPU time: max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth)
+ launch gap (host dispatch time is accounted per window of kernels in `lowering`). GEMM
efficiency depends on the shape: tile
quantization (partial output tiles), wave quantization on the GPU's SMs, and reduction depth
(short K cannot amortize the tile's prologue/epilogue), and alignment (a dimension that is not a
multiple of 8 elements forces cuBLAS's align-1 fallback kernels). A profiled model (from measured kernels)
implements the same interface and reports where each cost came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

import numpy as np

from simulator.graph.ops import MATMUL_KINDS, Op, OpKind
from simulator.job.enums import Precision
from simulator.job.precision import GEMM_KERNELS
from simulator.job.specs import HardwareSpec

# Output tiles cuBLAS/CUTLASS choose among for large GEMMs, with their relative throughput
# (smaller tiles re-read operands more often per FLOP from shared memory / L2).
TILES: tuple[tuple[int, int, float], ...] = ((256, 128, 1.0), (128, 128, 0.92), (128, 64, 0.8),
                                             (64, 64, 0.6))


# cuBLAS's tensor-core kernels need every leading dimension 16-byte aligned: 8 elements of a
# 16-bit GEMM; otherwise it falls back to slow align-1 kernels (Efficiency.unaligned_gemm_efficiency).
ALIGN = 8


class CostSource(StrEnum):
    MEASURED = "measured"
    INTERPOLATED = "interpolated"
    ANALYTIC = "analytic"


@dataclass(frozen=True, slots=True)
class OpCost:
    seconds: float
    source: CostSource


class KernelModel(Protocol):
    """Maps one op to its duration on one GPU."""

    def cost(self, op: Op) -> OpCost: ...


def maximum(a: Any, b: Any) -> Any:
    """`np.maximum`, but for two numbers (one row, the simulator's ops) a plain comparison: a
    numpy call on scalars costs about a microsecond (and numba's compiled code, see
    `gemm_efficiency`, takes the same branch). Equal results but for NaN, which the cost
    formulas never produce."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a if a >= b else b
    return np.maximum(a, b)


def minimum(a: Any, b: Any) -> Any:
    """`np.minimum` (see `maximum`)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a if a <= b else b
    return np.minimum(a, b)


def ceil(a: Any) -> Any:
    """`np.ceil`; for one number `math.ceil` as a float (see `maximum`)."""
    if isinstance(a, (int, float)):
        return float(math.ceil(a))
    return np.ceil(a)


def gemm_efficiency(batch: Any, m: Any, n: Any, k: Any, num_sms: Any, max_eff: Any,
                    k_half: Any) -> Any:
    """Achievable fraction of peak for a (batch, M, N, K) GEMM on `num_sms` SMs.

    One function for every caller: scalars (the simulator's ops), numpy arrays of shapes
    elementwise (the surrogate's features of a table), and compiled per row by the surrogate
    (`surrogate.physics.compiled`: this code with its helpers compiled by `simulator.jit.njit`;
    the simulator itself stays plain Python and never loads numba). It uses only IEEE operations
    that numpy and numba evaluate alike (true division, ceil, products, maximum) in one fixed
    order, so all paths agree to the bit: integer-valued products (tile counts, covered extents)
    are exact in float64 below 2**53. The hardware numbers may be scalars or per-element arrays."""
    mn = m * n
    best = 0.0 * mn
    for tm, tn, rel in TILES:
        tiles_m, tiles_n = ceil(m / tm), ceil(n / tn)
        tiles = batch * tiles_m * tiles_n
        wave_eff = tiles / (ceil(tiles / num_sms) * num_sms)  # partial last wave on the SMs
        tile_eff = mn / (tiles_m * tm * tiles_n * tn)  # partial tiles at the edges
        best = maximum(best, rel * wave_eff * tile_eff)
    depth = k / (k + k_half)
    return max_eff * best * depth


@dataclass(frozen=True)
class AnalyticKernelModel:
    """Roofline with shape-dependent GEMM efficiency. `precision` is the job's 16-bit dtype;
    a matmul the recipe runs low (`op.precision`) uses that precision's peak and its kernel
    family's efficiency relative to the 16-bit GEMMs (`Efficiency.low_precision_gemm_efficiency`,
    from public micro-benchmarks cited in the hardware file). Quantize kernels are memory-bound
    ops like any other (their bytes come from the graph, simulator.graph.quantize)."""

    hardware: HardwareSpec
    precision: Precision

    def cost(self, op: Op) -> OpCost:
        return OpCost(self.seconds(op), CostSource.ANALYTIC)

    def seconds(self, op: Op) -> float:
        hw, eff = self.hardware, self.hardware.efficiency
        mem_time = op.bytes / (hw.hbm_bandwidth_GBps * 1e9 * eff.memory_efficiency)
        if op.kind in MATMUL_KINDS:
            peak = hw.peak_flops(op.precision or self.precision)
            low = 1.0 if op.precision is None else eff.low_precision_gemm_efficiency[
                GEMM_KERNELS[op.variant]]
            if op.kind is OpKind.FLASH_ATTENTION:  # (batch*heads, queries, keys, head_dim)
                batch, sq, skv, d = op.shape
                top = eff.attention_max_efficiency or eff.gemm_max_efficiency
                frac = float(gemm_efficiency(batch, sq, d, skv, hw.num_sms, top,
                                             eff.attention_k_half or eff.gemm_k_half))
            else:
                batch, m, n, k = op.shape
                frac = float(gemm_efficiency(batch, m, n, k, hw.num_sms, eff.gemm_max_efficiency,
                                             eff.gemm_k_half))
                if (m % ALIGN or n % ALIGN or k % ALIGN) and op.kind is OpKind.GEMM:
                    frac = min(frac, eff.unaligned_gemm_efficiency)
            gpu = max(op.flops / (peak * frac * low), mem_time)
        elif op.kind is OpKind.OPTIMIZER:
            gpu = mem_time
        elif op.kind is OpKind.QUANTIZE and eff.quantize_memory_efficiency is not None:
            gpu = op.bytes / (hw.hbm_bandwidth_GBps * 1e9 * eff.quantize_memory_efficiency)
        else:
            gpu = max(mem_time, op.flops / (hw.peak_flops(self.precision) / 16))  # CUDA cores
        return gpu + eff.kernel_launch_s * op.kernels
