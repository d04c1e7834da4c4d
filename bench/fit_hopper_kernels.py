"""Check the Hopper hardware files against kernels measured on an H200, and fit what they lack.

    python bench/fit_hopper_kernels.py      (prints; the fitted value goes into the Hopper files)

Why: the H100 / H200 / H800 files took their GEMM parameters from Vidur's measured H100 GEMMs
(bench/fit_kernel_defaults.py) and had no measurement of fused attention, so attention ran at the
GEMM ceiling (0.80 of peak). `bench/gpu_hopper_kernels.py` measured on a lent H200 (2026-11-27,
data/kernels/h200-measured/, README there): cuDNN's fused attention through PyTorch's SDPA (the
kernels Transformer Engine calls), the expert shapes' grouped GEMMs in four implementations, dense
bf16 and per-tensor FP8 GEMMs, and a GEMM beside a copy kernel that holds k SMs. Kernel timings,
never iteration times: fitting a default to them is what bench/fit_b200_kernels.py does with
SimuMax's B200 kernels. The H200's compute (SMs, clocks, tensor cores) is the H100's; its HBM is
faster, which these compute-bound kernels barely see (the model's memory side uses each file's
own bandwidth).

1. attention_max_efficiency: least squares on log time over the cuDNN forward and backward
   kernels (backward = forward+backward - forward), each weighted by its share of the time.
2. dense GEMMs: the file's gemm_max_efficiency / gemm_k_half against the bf16 measurements, and
   the measured per-tensor FP8 efficiency relative to bf16 beside the file's 0.952.
3. grouped GEMMs (not fitted): the model (local experts as the GEMM's batch, simulator.graph.moe
   .experts) against each implementation, mean signed error by tokens per expert.
4. contention: the measured slowdown of a GEMM beside k held SMs against k / (num_sms - k)
   (simulator.timeline.contention).
"""

from __future__ import annotations

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
from simulator.timeline.contention import compute_slowdown  # noqa: E402

MEASURED = ROOT / "data" / "kernels" / "h200-measured"
HARDWARE = "h200-141gb"
TRACES = ROOT.parent / "shared" / "data" / "traces" / "h100"


def measurements() -> pd.DataFrame:
    """Every timing of both runs; a kernel measured in both keeps the median of the two."""
    frames = [pd.read_csv(p) for p in sorted(MEASURED.glob("run*.csv"))]
    data = pd.concat(frames, ignore_index=True)
    keys = ["part", "variant", "case", "op", "batch", "m", "n", "k"]
    return (data.dropna(subset=["median_s"])
            .groupby(keys, as_index=False, dropna=False)
            .agg(median_s=("median_s", "median"), flops=("flops", "first"), note=("note", "first")))


def seconds(ops: list[Op], values: dict[str, float | None]) -> np.ndarray:
    """The analytic model's time of each op on the H200 file with `values` changed."""
    hw = resolve_hardware(HARDWARE)
    tuned = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update=values)})
    model = AnalyticKernelModel(tuned, Precision.BF16)
    return np.array([model.seconds(op) for op in ops])


def attention(data: pd.DataFrame, check: bool = False) -> pd.DataFrame:
    """cuDNN's causal fused attention (K/V heads = query heads) as the simulator's ops: the
    forward kernel, and the backward as forward+backward less forward. Kernel times from the
    profiler's device events (part `attention_kernels`, run3): the first runs' event timer of a
    lone call also counted the host's launch latency (3-34% of these kernels). `check`: the
    small shapes (micro-batch b in the note), else the fitted ones (batch 1)."""
    fw = FRAMEWORKS[Framework.MEGATRON_LM]
    rows = []
    measured = data[(data.part == "attention_kernels") & (data.variant == "cudnn")]
    measured = measured[measured.case.str.startswith("b") == check]
    for case, g in measured.groupby("case"):
        t = dict(zip(g.op, g.median_s, strict=True))
        if "fwd" not in t or "fwd+bwd" not in t:
            continue
        r = g.iloc[0]
        heads, s, dv, dqk = int(r.batch), int(r.m), int(r.n), int(r.k)
        b = int(str(r.note).split(";")[0].removeprefix("b=")) if check else 1
        c = ShapeContext(b, s, 0, 1, False, 2, False, False, True, 4, fw)
        fwd, bwd = flash_pair("attn", c, HeadDims(heads, heads, dqk, dv), s, s, causal_pairs(s), 0.0)
        rows.append({"case": case, "dir": "fwd", "op": fwd, "seconds": t["fwd"]})
        rows.append({"case": case, "dir": "bwd", "op": bwd, "seconds": t["fwd+bwd"] - t["fwd"]})
    return pd.DataFrame(rows)


def fit_attention(rows: pd.DataFrame) -> dict[str, float]:
    """attention_max_efficiency and attention_k_half, by time-weighted least squares on log time
    (as bench/fit_b200_kernels.py), rounded as the files carry them."""
    measured = rows.seconds.to_numpy()
    weight = np.sqrt(measured / measured.sum())

    def values(u: np.ndarray) -> dict[str, float]:
        return {"attention_max_efficiency": float(u[0]), "attention_k_half": float(u[1])}

    def residual(u: np.ndarray) -> np.ndarray:
        pred = seconds(list(rows.op), values(u))
        return weight * (np.log(pred) - np.log(measured))

    u = least_squares(residual, [0.6, 100.0], bounds=([0.2, 1.0], [1.0, 20000.0]),
                      x_scale=[0.1, 100.0], diff_step=1e-3).x
    return {"attention_max_efficiency": round(float(u[0]), 3), "attention_k_half": round(float(u[1]))}


def fit_ceiling_only(rows: pd.DataFrame) -> float:
    """The ceiling alone at the GEMMs' depth (the first fit, kept for comparison)."""
    measured = rows.seconds.to_numpy()
    weight = np.sqrt(measured / measured.sum())

    def residual(u: np.ndarray) -> np.ndarray:
        pred = seconds(list(rows.op), {"attention_max_efficiency": float(u[0]),
                                       "attention_k_half": None})
        return weight * (np.log(pred) - np.log(measured))

    return float(least_squares(residual, [0.6], bounds=(0.2, 1.0), diff_step=1e-3).x[0])


def _errors(pred: np.ndarray, measured: np.ndarray) -> str:
    err = pred / measured - 1
    return (f"MAPE {np.mean(np.abs(err)):.1%}, total time {pred.sum() / measured.sum():.3f}x "
            f"(predicted / measured)")


GEMM_CEILING: dict[str, float | None] = {"attention_max_efficiency": None, "attention_k_half": None}


def attention_section(data: pd.DataFrame) -> dict[str, float]:
    rows = attention(data)
    before = seconds(list(rows.op), GEMM_CEILING)
    best = fit_attention(rows)
    ceiling_only = fit_ceiling_only(rows)
    after = seconds(list(rows.op), dict(best))
    print(f"## 1. fused attention (cuDNN via SDPA, {len(rows)} kernels)")
    print(f"at the GEMM ceiling (0.80; the files before 2026-11-27): "
          f"{_errors(before, rows.seconds.to_numpy())}")
    alone = seconds(list(rows.op), {"attention_max_efficiency": ceiling_only, "attention_k_half": None})
    print(f"fitted the ceiling alone (depth as the GEMMs', 70): attention_max_efficiency = "
          f"{ceiling_only:.3f}: {_errors(alone, rows.seconds.to_numpy())}")
    print("fitted both (shipped in the Hopper files): "
          + ", ".join(f"{k} = {v:g}" for k, v in best.items())
          + f": {_errors(after, rows.seconds.to_numpy())}")
    table = rows.assign(before=before / rows.seconds - 1, after=after / rows.seconds - 1,
                        tflops=[op.flops / t / 1e12 for op, t in zip(rows.op, rows.seconds, strict=True)])
    print(table[["case", "dir", "seconds", "tflops", "before", "after"]].to_string(
        index=False, formatters={"seconds": "{:.3e}".format, "tflops": "{:.0f}".format,
                                 "before": "{:+.0%}".format, "after": "{:+.0%}".format}))
    small = attention(data, check=True)
    if len(small):
        m = small.seconds.to_numpy()
        shipped = seconds(list(small.op), dict(best))
        alone_small = seconds(list(small.op), {"attention_max_efficiency": ceiling_only,
                                               "attention_k_half": None})
        print(f"check, not fitted: {len(small)} kernels of small problems (1-8 sequences of 1K-8K "
              f"tokens, 8-64 heads; the H100 traces' regime): {_errors(shipped, m)}; the ceiling "
              f"alone: {_errors(alone_small, m)}")
    flash = data[(data.part == "attention") & (data.variant == "flash") & (data.op == "fwd+bwd")]
    cud = data[(data.part == "attention") & (data.variant == "cudnn") & (data.op == "fwd+bwd")]
    both = flash.merge(cud, on="case", suffixes=("_flash", "_cudnn"))
    print("SDPA's flash backend (FlashAttention-2) takes "
          + ", ".join(f"{r.case} {r.median_s_flash / r.median_s_cudnn:.2f}x"
                      for r in both.itertuples()) + " cuDNN's time (forward+backward); not"
          " modelled apart: every stack on Hopper runs cuDNN's (Transformer Engine; PyTorch's SDPA"
          " too, as the H100 traces of ../shared/data/traces/h100 show)")
    return best


def dense_section(data: pd.DataFrame) -> None:
    d = data[data.part == "dense_gemm"]
    bf = d[d.variant == "bf16"]
    ops = [gemm("g", int(r.m), int(r.n), int(r.k), 2, 0.0)[0] for r in bf.itertuples()]
    pred = seconds(ops, {})
    print(f"\n## 2. dense GEMMs ({len(bf)} bf16 shapes), file's gemm_max_efficiency 0.80, "
          f"gemm_k_half 70: {_errors(pred, bf.median_s.to_numpy())}")
    hw = resolve_hardware(HARDWARE)
    fp8 = d[d.variant == "fp8_tensor"].merge(bf, on="case", suffixes=("_fp8", "_bf16"))
    rel = ((fp8.flops_fp8 / fp8.median_s_fp8 / (hw.peak_tflops["fp8"] * 1e12))
           / (fp8.flops_bf16 / fp8.median_s_bf16 / (hw.peak_tflops["bf16"] * 1e12)))
    weighted = float(np.average(rel, weights=fp8.median_s_bf16))
    print("per-tensor FP8 (torch._scaled_mm, e4m3) efficiency relative to bf16's: "
          + ", ".join(f"{c} {x:.2f}" for c, x in zip(fp8.case, rel, strict=True))
          + f"; time-weighted {weighted:.3f} (the file: 0.952, Transformer Engine's benchmark)")


def grouped_section(data: pd.DataFrame) -> None:
    g = data[data.part == "grouped_gemm"].copy()
    ops = []
    for r in g.itertuples():
        e, direction = int(r.batch), r.op.split(".")[1]
        # measured (m, n, k) per direction; back to the layer's (tokens, out, in)
        t, n_out, k_in = {"fwd": (r.m, r.n, r.k), "dgrad": (r.m, r.k, r.n),
                          "wgrad": (r.k, r.m, r.n)}[direction]
        fwd, (dgrad, wgrad) = gemm("grouped", aligned_tokens(int(t)), int(n_out), int(k_in), 2,
                                   0.0, batch=e)
        op = {"fwd": fwd, "dgrad": dgrad, "wgrad": wgrad}[direction]
        ops.append(Op(op.name, op.kind, op.phase, op.shape, op.dtype_bytes, op.flops, op.bytes,
                      kernels=e, host_launches=1))
        g.loc[r.Index, "tokens"] = int(t)
    g["signed"] = seconds(ops, {}) / g.median_s.to_numpy() - 1
    print(f"\n## 3. grouped GEMMs of the MoE presets' experts ({len(g) // 4} problems x 4 "
          "implementations; the model is not fitted): predicted / measured - 1")
    print("mean signed error by tokens per expert (rows) and implementation; MAPE last row")
    table = g.pivot_table(index="tokens", columns="variant", values="signed", aggfunc="mean")
    table.loc["MAPE"] = g.assign(a=g.signed.abs()).pivot_table(columns="variant", values="a",
                                                               aggfunc="mean").iloc[0]
    print(table.map(lambda x: f"{x:+.0%}").to_string())
    total = g.groupby("variant").apply(
        lambda x: (x.median_s * (1 + x.signed)).sum() / x.median_s.sum(), include_groups=False)
    print("total time predicted / measured: "
          + ", ".join(f"{v} {x:.3f}x" for v, x in total.items()))


def contention_section(data: pd.DataFrame) -> None:
    c = data[data.part == "contention"].copy()
    print("\n## 4. compute beside a kernel holding k SMs (measured slowdown; model k/(132-k))")
    hw = resolve_hardware(HARDWARE)
    for heavy, label in (("heavy_", "copy kernel holding its SMs (200 KiB shared memory: no "
                                    "GEMM CTA beside it, as beside NCCL's)"),
                         ("", "light Triton copy (a GEMM CTA fits beside it)")):
        print(f"{label}:")
        for case, g in c[c.variant.str.startswith(heavy) if heavy else
                         ~c.variant.str.startswith("heavy_")].groupby("case"):
            alone = float(g[g.variant == f"{heavy}alone"].median_s.iloc[0])
            cells = []
            for r in g.itertuples():
                if r.variant.endswith("alone"):
                    continue
                k = int(r.batch)
                with_k = hw.model_copy(update={"efficiency": hw.efficiency.model_copy(
                    update={"overlap_comm_sms": k})})
                model = compute_slowdown(with_k)
                cells.append(f"k={k} {r.median_s / alone - 1:+.0%} (model {model:+.0%})")
            print(f"  {case:12s} " + ", ".join(cells))


def h100_trace_attention() -> pd.DataFrame:
    """cuDNN's attention kernels in the real H100 iterations of ../shared/data/traces/h100 (Hugging
    Face Llama, PyTorch's SDPA: head size 128, batch = micro-batch): the median duration of the
    forward and backward kernel per trace, as the simulator's ops."""
    import gzip
    import json

    fw = FRAMEWORKS[Framework.MEGATRON_LM]
    rows = []
    for path in sorted(TRACES.glob("llama_*.json.gz")):
        parts = dict((p[:2] if p[:2] in ("mb",) else p[0], p) for p in path.name.split("_"))
        h, s, mb = int(parts["h"][1:]), int(parts["s"][1:]), int(parts["mb"][2:])
        with gzip.open(path, "rt") as f:
            events = json.load(f)["traceEvents"]
        kernels = [e for e in events if e.get("cat") == "kernel" and "native_sdpa" in e["name"]]
        c = ShapeContext(mb, s, 0, 1, False, 2, False, False, True, 4, fw)
        heads = h // 128
        fwd, bwd = flash_pair("attn", c, HeadDims(heads, heads, 128, 128), s, s, causal_pairs(s), 0.0)
        for direction, op in (("fprop", fwd), ("bprop", bwd)):
            durations = [e["dur"] * 1e-6 for e in kernels if direction in e["name"]]
            if durations:
                rows.append({"case": path.name.removesuffix(".json.gz"), "dir": direction,
                             "op": op, "seconds": float(np.median(durations))})
    return pd.DataFrame(rows)


def trace_section(best: dict[str, float]) -> None:
    if not TRACES.is_dir():
        print(f"\n## 5. (skipped: {TRACES} not found)")
        return
    rows = h100_trace_attention()
    h100 = resolve_hardware("h100-sxm-80gb")
    model = AnalyticKernelModel(h100, Precision.BF16)
    pred = np.array([model.seconds(op) for op in rows.op])
    def on(values: dict[str, float | None]) -> np.ndarray:
        tuned = AnalyticKernelModel(h100.model_copy(update={"efficiency": h100.efficiency.model_copy(
            update=values)}), Precision.BF16)
        return np.array([tuned.seconds(op) for op in rows.op])

    before = on(GEMM_CEILING)
    ceiling_only = on({"attention_max_efficiency": fit_ceiling_only(attention(measurements())),
                       "attention_k_half": None})
    print(f"\n## 5. check on real H100 iterations: cuDNN's attention kernels of "
          f"{rows.case.nunique()} Llama traces ({len(rows)} kernels, ../shared/data/traces/h100)")
    m = rows.seconds.to_numpy()
    print(f"H100 file (attention_max_efficiency {h100.efficiency.attention_max_efficiency}, "
          f"attention_k_half {h100.efficiency.attention_k_half}; fitted on the H200: {best}): "
          f"{_errors(pred, m)}")
    print(f"  the ceiling alone: {_errors(ceiling_only, m)}; at the GEMM ceiling: {_errors(before, m)}")


def main() -> None:
    data = measurements()
    best = attention_section(data)
    dense_section(data)
    grouped_section(data)
    contention_section(data)
    trace_section(best)


if __name__ == "__main__":
    main()
