"""The simulator's GPT-OSS-120B layer and output layer beside the kernels measured on an H100.

    python bench/compare_gpt_oss_layer.py [MEASURED_DIR]   (default data/kernels/h100-gpt-oss-layer)

The measurements (bench/gpu_gpt_oss_layer.py, one H100, PyTorch 2.11) are one GPU's work of
NVIDIA's published H100 GPT-OSS-120B layout (data/published: tp 1, pp 4, ep 8, micro-batch 1,
4,096 tokens; bench/bench_moe_cp.py predicts that row +45% fast). The simulator's side is the job
bench_moe_cp builds for that row, its layer blocks (the full-attention and the sliding-window
kind) and its head, priced by the shipped H100 hardware file. Both sides are grouped the same
way: attention, the experts' grouped GEMMs, the other GEMMs, the GLU activation, and the rest
(norms, RoPE, router, permutation, residuals, biases); forward and forward + backward, without
recompute (the measurement recomputes nothing). Kernel sums only: the host is not in it.
Nothing is fitted here: this is a check of the kernel model on shapes it was never fitted to.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_moe_cp import _published_rows, published_job  # noqa: E402

from simulator import job_from_dict  # noqa: E402
from simulator.graph.blocks import build_graph  # noqa: E402
from simulator.graph.ops import Block, Op, OpKind  # noqa: E402
from simulator.simulate import default_kernels  # noqa: E402

MEASURED = ROOT / "data" / "kernels" / "h100-gpt-oss-layer"
GROUPS = ("attention", "grouped_gemm", "gemm", "activation", "other")
# measured variant -> the simulator's layer block of the same kind
LAYERS = {"layer:full:grouped_mm:compiled": "moe", "layer:window_flex:grouped_mm:compiled": "moe+swa"}
HEAD = "head:megatron_ce"


def kernel_group(name: str) -> str:
    """The group of a measured kernel, from its name."""
    n = name.lower()
    if "sdpa" in n or "flex_attention" in n or "cudnn::fusion" in n:
        return "attention"
    if "groupproblemshape" in n or "grouped_gemm" in n:
        return "grouped_gemm"
    if n.startswith("nvjet") or "gemm" in n or "cutlass" in n:
        return "gemm"
    if n.startswith("triton_") and "sigmoid" in n and "clamp" in n:
        return "activation"
    return "other"


def op_group(op: Op) -> str:
    if op.kind is OpKind.FLASH_ATTENTION:
        return "attention"
    if op.kind is OpKind.GEMM:
        return "grouped_gemm" if op.shape[0] > 1 else "gemm"
    if op.kind is OpKind.ACTIVATION:
        return "activation"
    return "other"


def measured_groups(kernels: pd.DataFrame, variant: str, direction: str) -> dict[str, float]:
    rows = kernels[(kernels.variant == variant) & (kernels.direction == direction)]
    out = dict.fromkeys(GROUPS, 0.0)
    for name, seconds in zip(rows.kernel, rows.device_s, strict=True):
        out[kernel_group(str(name))] += float(seconds)
    return out


def simulated_groups(block: Block, kernels, backward: bool) -> dict[str, float]:
    out = dict.fromkeys(GROUPS, 0.0)
    for op in block.forward + (block.backward if backward else ()):
        out[op_group(op)] += kernels.cost(op).seconds
    return out


def h100_row_job() -> dict:
    rows = _published_rows(ROOT / "data" / "published")
    pick = rows[rows.model.str.contains("GPT OSS") & rows.gpu.str.contains("H100")]
    job, why = published_job(pick.iloc[0])
    if job is None:
        raise SystemExit(f"the H100 GPT-OSS row is not expressible: {why}")
    return job


def table(title: str, measured: dict[str, float], simulated: dict[str, float]) -> None:
    print(f"\n{title}")
    print(f"  {'group':14s} {'measured ms':>12s} {'simulated':>10s} {'sim/meas':>9s}")
    for g in (*GROUPS, "total"):
        m = sum(measured.values()) if g == "total" else measured[g]
        s = sum(simulated.values()) if g == "total" else simulated[g]
        ratio = f"{s / m:9.2f}" if m > 0 else f"{'-':>9s}"
        print(f"  {g:14s} {m * 1e3:12.3f} {s * 1e3:10.3f} {ratio}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measured", type=Path, nargs="?", default=MEASURED)
    args = ap.parse_args()
    kernels = pd.read_csv(args.measured / "kernels.csv")
    print((args.measured / "env.txt").read_text().strip())
    job = job_from_dict(h100_row_job())
    graph = build_graph(job)
    model = default_kernels(job)
    blocks = dict(zip(graph.labels, graph.layer_blocks, strict=True))
    print(f"\njob: {job.model.name}, {job.cluster.gpu}, tp {job.parallel.tp} ep {job.parallel.ep}, "
          f"micro-batch {job.training.micro_batch_size} x {job.model.seq_length} tokens")
    for variant, label in [*LAYERS.items(), (HEAD, "head")]:
        block = graph.head if label == "head" else blocks[label]
        for direction, backward in (("fwd", False), ("fwd+bwd", True)):
            table(f"{variant} vs simulator block '{label}', {direction}",
                  measured_groups(kernels, variant, direction),
                  simulated_groups(block, model, backward))
    return 0


if __name__ == "__main__":
    sys.exit(main())
