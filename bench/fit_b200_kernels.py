"""Fit the B200 hardware file's kernel parameters to SimuMax's published B200 microbenchmarks.

Why: the hardware files' default efficiencies come from kernel measurements, never from the
iteration times we validate against (bench/fit_kernel_defaults.py does the same for A100/H100
with Vidur's GEMMs). For the B200 the only kernel measurements at hand are SimuMax's
(`data/kernels/b200_simumax_system.json`, README there): per-shape efficiencies of dense bf16
GEMMs, of MoE grouped GEMMs and of TE's fused attention, and an HBM bandwidth efficiency.

- gemm_max_efficiency: robust least squares on log time over the 514 dense GEMMs, with
  memory_efficiency at SimuMax's measured HBM efficiency, the H100 launch gap and the H100 depth
  parameter gemm_k_half = 70 (the measured shapes, K >= 160, do not identify it: fitting it too
  moves the MAPE from 14.8% to 14.6% with k_half at its lower bound);
- attention_max_efficiency: the same over the 64 fused-attention kernels (forward and backward);
- grouped GEMMs: NOT fitted; the analytic model (local experts as the GEMM's batch, its tiles,
  waves and the weight traffic that dominates as tokens per expert shrink) is checked against
  the 108 measurements, and its MAPE printed by tokens per expert.

Run: python bench/fit_b200_kernels.py   (prints the fit; the values go into data/hardware/b200.yaml)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from simulator.costs.analytic import AnalyticKernelModel  # noqa: E402
from simulator.graph.fused_attention import HeadDims, causal_pairs, flash_pair  # noqa: E402
from simulator.graph.moe.dispatch import aligned_tokens  # noqa: E402
from simulator.graph.ops import Op  # noqa: E402
from simulator.graph.primitives import ShapeContext, gemm  # noqa: E402
from simulator.job.catalog import resolve_hardware  # noqa: E402
from simulator.job.enums import Precision  # noqa: E402
from simulator.job.framework import FRAMEWORKS, Framework  # noqa: E402

SYSTEM = ROOT / "data" / "kernels" / "b200_simumax_system.json"
PEAK = 2250e12


def _fields(key: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in key.split(", "))


def dense_gemms(table: dict[str, float]) -> pd.DataFrame:
    """(op, seconds) of SimuMax's dense GEMMs: C[m,n] = A[m,k] B[k,n] at its efficiency; an
    accumulating fp32 output (the weight gradient into the main gradient) reads and writes it."""
    rows = []
    for key, eff in table.items():
        f = _fields(key)
        m, n, k = int(f["m"]), int(f["n"]), int(f["k"])
        acc = 4 if f["accumulate"] == "True" else 0
        op = gemm("gemm", m, n, k, 2, 0.0, accumulate_bytes=acc)[1][1] if acc else \
            gemm("gemm", m, n, k, 2, 0.0)[0]
        rows.append({"op": op, "seconds": 2.0 * m * n * k / (eff * PEAK), "tokens": m})
    return pd.DataFrame(rows)


def grouped_gemms(table: dict[str, float]) -> pd.DataFrame:
    """SimuMax's grouped GEMMs as our grouped ops: `ng` experts of M tokens, N x K weights;
    forward, input gradient and (accumulating) weight gradient."""
    rows = []
    for key, eff in table.items():
        f = _fields(key)
        ng, m, n, k = int(f["ng"]), int(f["M"]), int(f["N"]), int(f["K"])
        # as the simulator sizes them (simulator.graph.moe.dispatch.routed_tokens)
        fwd, (dgrad, wgrad) = gemm("grouped", aligned_tokens(m), n, k, 2, 0.0, batch=ng,
                                   accumulate_bytes=4)
        op = {"fwd": fwd, "bwd_grad_act": dgrad, "bwd_grad_w": wgrad}[f["stage"]]
        op = Op(op.name, op.kind, op.phase, op.shape, op.dtype_bytes, op.flops, op.bytes,
                kernels=ng, host_launches=1)  # one GEMM kernel per expert (moe.experts)
        rows.append({"op": op, "seconds": 2.0 * ng * m * n * k / (eff * PEAK), "tokens": m,
                     "stage": f["stage"]})
    return pd.DataFrame(rows)


def attention(fwd: dict[str, float], bwd: dict[str, float]) -> pd.DataFrame:
    """SimuMax's fused-attention kernels (causal, TE) as our flash-attention ops."""
    fw = FRAMEWORKS[Framework.MEGATRON_LM]
    rows = []
    for table, index in ((fwd, 0), (bwd, 1)):
        for key, eff in table.items():
            f = _fields(key)
            b, s = int(f["batch"]), int(f["seq_len"])
            dims = HeadDims(int(f["head_num"]), int(f["kv_head_num"]), int(f["qk_head_dim"]),
                            int(f["v_head_dim"]))
            c = ShapeContext(b, s, 0, 1, False, 2, False, False, True, 4, fw)
            op = flash_pair("attn", c, dims, s, s, causal_pairs(s), 0.0)[index]
            # SimuMax counts the whole s x s square (2 b s^2 heads (dqk + dv) forward, 2.5x that
            # backward; simu_tools/efficency_test/test_fa_efficiency.py): twice our causal count
            rows.append({"op": op, "seconds": 2 * op.flops / (eff * PEAK), "tokens": s})
    return pd.DataFrame(rows)


def seconds(ops: list[Op], values: dict[str, float]) -> np.ndarray:
    hw = resolve_hardware("b200")
    tuned = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update=values)})
    model = AnalyticKernelModel(tuned, Precision.BF16)
    return np.array([model.seconds(op) for op in ops])


def fit(data: pd.DataFrame, names: tuple[str, ...], bounds: tuple[tuple[float, float], ...],
        fixed: dict[str, float]) -> dict[str, float]:
    lo, hi = np.log([b[0] for b in bounds]), np.log([b[1] for b in bounds])

    def values(u: np.ndarray) -> dict[str, float]:
        return {**fixed, **{n: float(np.exp(lo[i] + u[i] * (hi[i] - lo[i])))
                            for i, n in enumerate(names)}}

    target = np.log(data.seconds.to_numpy())
    res = least_squares(lambda u: np.log(seconds(list(data.op), values(u))) - target,
                        np.full(len(names), 0.5), bounds=(0, 1), loss="soft_l1", f_scale=0.1,
                        diff_step=1e-3)
    return values(res.x)


def _mape(data: pd.DataFrame, values: dict[str, float]) -> float:
    pred = seconds(list(data.op), values)
    return float(np.mean(np.abs(pred - data.seconds) / data.seconds))


def main() -> None:
    system = json.loads(SYSTEM.read_text())
    ops, bandwidth = system["accelerator"]["op"], system["accelerator"]["bandwidth"]
    base = {"memory_efficiency": float(bandwidth["default"]["efficient_factor"]),
            "kernel_launch_s": 3.6e-6}
    dense = dense_gemms(ops["matmul"]["accurate_efficient_factor"])
    gemm_fit = fit(dense, ("gemm_max_efficiency",), ((0.2, 1.0),), {**base, "gemm_k_half": 70.0})
    print(f"dense GEMMs ({len(dense)}): " + ", ".join(f"{k}={v:.4g}" for k, v in gemm_fit.items())
          + f"; MAPE {_mape(dense, gemm_fit):.1%}")
    attn = attention(ops["sdp_fwd"]["accurate_efficient_factor"],
                     ops["sdp_bwd"]["accurate_efficient_factor"])
    attn_fit = fit(attn, ("attention_max_efficiency",), ((0.2, 1.0),), gemm_fit)
    print(f"fused attention ({len(attn)}): attention_max_efficiency="
          f"{attn_fit['attention_max_efficiency']:.4g}; MAPE {_mape(attn, attn_fit):.1%} "
          f"(with the GEMM's maximum instead: "
          f"{_mape(attn, {**gemm_fit, 'attention_max_efficiency': None}):.1%})")
    grouped = grouped_gemms(ops["group_matmul"]["accurate_efficient_factor"])
    pred = seconds(list(grouped.op), gemm_fit)
    grouped["ape"] = np.abs(pred - grouped.seconds) / grouped.seconds
    grouped["signed"] = pred / grouped.seconds - 1
    print(f"grouped GEMMs ({len(grouped)}, not fitted): MAPE {grouped.ape.mean():.1%}; "
          f"by tokens per expert and stage (mean signed error):")
    table = grouped.pivot_table(index="tokens", columns="stage", values="signed", aggfunc="mean")
    print(table.map(lambda x: f"{x:+.0%}").to_string())


if __name__ == "__main__":
    main()
