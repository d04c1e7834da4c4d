"""Fit the analytic kernel model's GEMM and memory parameters to Vidur's measured A100/H100 ops.

Why: the hardware files' default efficiencies (the "uncalibrated" model) should come from kernel
measurements, not from the iteration times we validate against. Vidur (github.com/microsoft/vidur,
MIT) measured forward GEMMs (QKV, output, MLP up/down projections), norms, activations and
embeddings with CUDA events on A100 and H100 for many token counts and tensor-parallel shards
(read by `profiler.vidur`).
This script fits gemm_max_efficiency, gemm_k_half, kernel_launch_s and memory_efficiency by robust
least squares on log time, with 5-fold cross-validation by model, and prints the per-op-kind MAPE
of the shipped hardware file and of the cross-validated fit. The hardware files take the GEMM
parameters from the fit on all models; not its memory efficiency, which these small inference
tensors (launch-bound, 0.3-0.4) would set far below what training-sized pointwise kernels reach,
so the files keep the typical 0.8.

Run: python bench/fit_kernel_defaults.py [--shared ../shared/data/profiles/vidur]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from profiler.vidur import read_vidur_gpu
from simulator.costs.analytic import AnalyticKernelModel
from simulator.job.catalog import resolve_hardware
from simulator.job.enums import Precision

GEMM_PARAMS = (("gemm_max_efficiency", 0.3, 1.0), ("gemm_k_half", 1.0, 2048.0),
               ("kernel_launch_s", 1e-7, 3e-5))
MEMORY_PARAMS = (("memory_efficiency", 0.2, 1.0),)


def load(root: Path, gpu: str) -> pd.DataFrame:
    """Vidur's measurements as our ops (profiler.vidur maps the shapes, FLOPs and bytes)."""
    records = [{"model": model, "op": op.name, "obj": op, "seconds": seconds}
               for model, ops in read_vidur_gpu(root, gpu).items() for op, seconds in ops]
    return pd.DataFrame(records)


def predict(data: pd.DataFrame, hw, values: dict[str, float]) -> np.ndarray:  # type: ignore[no-untyped-def]
    tuned = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update=values)})
    model = AnalyticKernelModel(tuned, Precision.FP16)
    return np.array([model.seconds(op) for op in data.obj])


def _fit(data: pd.DataFrame, hw, params, fixed) -> dict[str, float]:  # type: ignore[no-untyped-def]
    lo = np.array([np.log(p[1]) for p in params])
    hi = np.array([np.log(p[2]) for p in params])

    def values(u: np.ndarray) -> dict[str, float]:
        return {**fixed, **{p[0]: float(np.exp(lo[i] + u[i] * (hi[i] - lo[i])))
                            for i, p in enumerate(params)}}

    target = np.log(data.seconds.to_numpy())
    res = least_squares(lambda u: np.log(predict(data, hw, values(u))) - target,
                        np.full(len(params), 0.5), bounds=(0, 1), loss="soft_l1", f_scale=0.1,
                        diff_step=1e-3)
    return values(res.x)


def fit(data: pd.DataFrame, hw) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """All four parameters jointly on every op (the hardware files take the GEMM ones)."""
    return _fit(data, hw, GEMM_PARAMS + MEMORY_PARAMS, {})


def mape_by_op(data: pd.DataFrame, pred: np.ndarray) -> pd.Series:
    ape = np.abs(pred - data.seconds.to_numpy()) / data.seconds.to_numpy()
    return pd.Series(ape, index=data.index).groupby(data.op).mean()


def main() -> None:
    ap = argparse.ArgumentParser()
    default = Path(__file__).resolve().parents[2] / "shared/data/profiles/vidur"
    ap.add_argument("--shared", default=str(default))
    args = ap.parse_args()
    for gpu, hw_name in (("a100", "a100-80gb"), ("h100", "h100-sxm-80gb")):
        data = load(Path(args.shared), gpu)
        data = data[data.seconds > 0].reset_index(drop=True)
        hw = resolve_hardware(hw_name)
        models = sorted(data.model.unique())
        cv_pred = np.empty(len(data))
        for k in range(min(5, len(models))):
            held = models[k::5]
            test = data.model.isin(held).to_numpy()
            params = fit(data[~test], hw)
            cv_pred[test] = predict(data[test], hw, params)
        params = fit(data, hw)
        table = pd.DataFrame({"shipped hardware file": mape_by_op(data, predict(data, hw, {})),
                              "fitted (CV by model)": mape_by_op(data, cv_pred)})
        print(f"\n{hw_name} vs Vidur {gpu} ({len(data)} op timings from {len(models)} models)")
        print(table.map(lambda x: f"{x:.1%}").to_string())
        overall = np.mean(np.abs(cv_pred - data.seconds) / data.seconds)
        print("fitted on all: " + ", ".join(f"{k}={v:.4g}" for k, v in params.items())
              + f"; cross-validated MAPE {overall:.1%}")


if __name__ == "__main__":
    main()
