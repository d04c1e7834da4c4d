"""Vidur's published operator timings (github.com/microsoft/vidur, data/profiling, MIT) as ops.

Vidur's ``compute/<gpu>/<model>/mlp.csv`` holds forward (inference) times, CUDA events, in
milliseconds, of a Llama/GPT layer's operators for many token counts and tensor-parallel
shardings, measured on one GPU. Mapped onto the simulator's ops (same shapes, FLOPs and bytes as
`simulator.graph.blocks` counts them) they are real GPU measurements to check the analytic model against
and to test the interpolation on, without a GPU at hand. Residual adds are left out (the simulator
fuses them into bias-dropout-add).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.graph.ops import Op, OpKind, Phase

DT = 2  # fp16 activations


def _gemm(name: str, m: int, n: int, k: int) -> Op:
    return Op(name, OpKind.GEMM, Phase.FORWARD, (1, m, n, k), DT, 2.0 * m * n * k,
              float((m * k + k * n + m * n) * DT))


def _pointwise(name: str, kind: OpKind, numel: int, reads: float, writes: float, flops: float,
               variant: str) -> Op:
    return Op(name, kind, Phase.FORWARD, (numel,), DT, flops * numel, (reads + writes) * numel * DT,
              variant=variant)


def row_ops(r: dict[str, object]) -> list[tuple[Op, str]]:
    """(op, vidur column) pairs of one mlp.csv row."""
    def num(key: str) -> int:
        return int(str(r[key]))

    t, tokens, h = num("num_tensor_parallel_workers"), num("num_tokens"), num("n_embd")
    heads, kv = num("n_head") // t, max(1, num("n_kv_head") // t)
    d = h // num("n_head")
    gated = str(r["use_gated_mlp"]).lower() == "true"
    f = num("n_expanded_embd") // t
    up = 2 * f if gated else f
    norm = "rmsnorm" if gated else "layernorm"
    act = "swiglu" if gated else "gelu"
    return [
        (_gemm("qkv", tokens, (heads + 2 * kv) * d, h), "attn_pre_proj"),
        (_gemm("attn.proj", tokens, h, heads * d), "attn_post_proj"),
        (_gemm("mlp.up", tokens, up, h), "mlp_up_proj"),
        (_gemm("mlp.down", tokens, h, f), "mlp_down_proj"),
        (_pointwise("input_norm", OpKind.NORM, tokens * h, 1, 1, 5.0, norm), "input_layernorm"),
        (_pointwise("post_attn_norm", OpKind.NORM, tokens * h, 1, 1, 5.0, norm),
         "post_attention_layernorm"),
        (_pointwise(f"mlp.{act}", OpKind.ACTIVATION, tokens * up, 1, 0.5 if gated else 1, 8.0, act),
         "mlp_act"),
        (Op("embedding", OpKind.EMBEDDING, Phase.FORWARD, (tokens, h), DT, float(tokens * h),
            float(2 * tokens * h * DT)), "emb"),
    ]


def read_vidur_mlp(path: Path) -> list[tuple[Op, float]]:
    """(op, median seconds) of every row and operator of one Vidur mlp.csv."""
    frame = pd.read_csv(path)
    out: list[tuple[Op, float]] = []
    records: list[dict[str, object]] = frame.to_dict("records")  # type: ignore[assignment]
    for r in records:
        for op, column in row_ops(r):
            ms = float(str(r.get(f"time_stats.{column}.median", "nan")))
            if ms > 0:  # NaN (a column the row lacks) compares False
                out.append((op, ms * 1e-3))
    return out


def read_vidur_gpu(root: Path, gpu: str) -> dict[str, list[tuple[Op, float]]]:
    """Measurements per model (``org/model``) under ``root/compute/<gpu>``."""
    base = root / "compute" / gpu
    return {str(p.parent.relative_to(base)): read_vidur_mlp(p) for p in sorted(base.glob("*/*/mlp.csv"))}
