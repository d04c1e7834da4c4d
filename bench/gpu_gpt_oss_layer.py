"""Time one GPT-OSS-120B decoder layer, and its output layer with the loss, on one GPU at the
per-GPU shapes of NVIDIA's H100 row (micro-batch 1, 4,096 tokens, tp 1, ep 8: 16 local experts
of 1,024 tokens each under NVIDIA's forced load balancing).

    python bench/gpu_gpt_oss_layer.py OUTDIR            (on the GPU; a few minutes)
    python bench/gpu_gpt_oss_layer.py OUTDIR --smoke    (tiny shapes on the CPU: plumbing only)

Why: the simulator predicts NVIDIA's published GPT-OSS-120B runs 24-118% faster than measured
(bench/bench_moe_cp.py section 3; the H100 row +45%), and NOTES.md blamed software the
simulator does not model without a measurement of the layer itself. This measures the
computation of one GPU's layer (no all-to-all: one GPU) in plain PyTorch with the kernels
Megatron-Core would reach on Hopper -- cuDNN's fused attention, CUTLASS's grouped GEMM
(`torch._grouped_mm`; bench/gpu_hopper_kernels.py compared it with cuBLAS per expert), gathers
for the permutation both ways (as Transformer Engine's fused permute), the clamped quick-GELU GLU
eager or compiled into one kernel, Megatron's cross-entropy -- so that
bench/compare_gpt_oss_layer.py can set each kernel beside the simulator's op for the same shape.
Attention sinks are not in these kernels (PyTorch's SDPA has none); the sliding-window layers
run either FlexAttention's block-sparse kernel or a dense masked SDPA (what a stack without a
windowed kernel pays).

Every layer variant is timed three ways: `wall_s`, the time per call of 10 calls back to back
(the host can run ahead; a host-bound layer shows here), `kernel_s`, the sum of its kernels'
device times from the profiler (CUPTI), and the launches per call. OUTDIR/layer.csv holds them,
OUTDIR/kernels.csv every kernel of each variant (name, calls, device time per layer call),
OUTDIR/env.txt the machine.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_hopper_kernels import environment


@dataclass(frozen=True)
class Shape:
    """One GPU's share of a GPT-OSS-120B layer (data/models/gpt-oss-120b.yaml)."""

    seq: int = 4096
    hidden: int = 2880
    heads: int = 64
    kv_heads: int = 8
    head_dim: int = 64
    local_experts: int = 16  # 128 experts over ep 8
    topk: int = 4
    ep: int = 8
    moe_ffn: int = 2880
    vocab: int = 201088
    window: int = 128
    clamp: float = 7.0

    @property
    def expert_rows(self) -> int:
        """Rows the local experts compute: every GPU of the ep group sends its seq x topk
        assignments, 1/ep of them here (balanced)."""
        return self.seq * self.topk


SMOKE = Shape(seq=64, hidden=32, heads=4, kv_heads=2, head_dim=8, local_experts=4, topk=2, ep=2,
              moe_ffn=16, vocab=96, window=8)


def quick_geglu(x: torch.Tensor, probs: torch.Tensor, clamp: float) -> torch.Tensor:
    """GPT-OSS's activation as Megatron-Core runs it (`quick_gelu` GLU with
    `glu_linear_offset=1.0`, `activation_func_clamp_value=7.0`), weighted by the router's
    probability: interleaved gate / linear halves."""
    gate, lin = x[..., ::2], x[..., 1::2]
    gate = gate.clamp(max=clamp)
    lin = lin.clamp(-clamp, clamp)
    return (gate * torch.sigmoid(1.702 * gate) * (lin + 1.0) * probs.unsqueeze(-1)).to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Gather(torch.autograd.Function):
    """Permute: the rows of x (tokens, h) that the experts compute, token_of_row[r] each (every
    token top-k times); its gradient sums a token's k rows, a gather through row_of_token."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, token_of_row: torch.Tensor,
                row_of_token: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(row_of_token)
        return x.index_select(0, token_of_row)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (row_of_token,) = ctx.saved_tensors
        t, k = row_of_token.shape
        return g.index_select(0, row_of_token.reshape(-1)).view(t, k, -1).sum(1), None, None


class Combine(torch.autograd.Function):
    """Unpermute: each token's k expert rows summed (the router's weights are already in the
    rows); its gradient is the token's gradient gathered to each of its rows."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, token_of_row: torch.Tensor,
                row_of_token: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(token_of_row)
        t, k = row_of_token.shape
        return y.index_select(0, row_of_token.reshape(-1)).view(t, k, -1).sum(1)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (token_of_row,) = ctx.saved_tensors
        return g.index_select(0, token_of_row), None, None


class Layer(torch.nn.Module):
    """Norm -> QKV (bias) -> RoPE -> attention -> proj (bias) -> residual -> norm -> router ->
    top-k -> permute -> fc1 (bias) -> clamped GLU -> fc2 (bias) -> unpermute -> residual."""

    def __init__(self, s: Shape, attention: str, experts: str, activation: Callable[..., Any],
                 device: str) -> None:
        super().__init__()
        dt = torch.bfloat16
        self.s, self.attention, self.experts, self.activation = s, attention, experts, activation
        qkv_out = (s.heads + 2 * s.kv_heads) * s.head_dim
        kw = {"device": device, "dtype": dt}
        self.norm1 = torch.nn.RMSNorm(s.hidden, **kw)
        self.qkv = torch.nn.Linear(s.hidden, qkv_out, bias=True, **kw)
        self.proj = torch.nn.Linear(s.heads * s.head_dim, s.hidden, bias=True, **kw)
        self.norm2 = torch.nn.RMSNorm(s.hidden, **kw)
        self.router = torch.nn.Linear(s.hidden, s.local_experts * s.ep, bias=True, **kw)
        e = s.local_experts
        self.w1 = torch.nn.Parameter(torch.randn(e, 2 * s.moe_ffn, s.hidden, **kw) * 0.02)
        self.b1 = torch.nn.Parameter(torch.zeros(e, 2 * s.moe_ffn, **kw))
        self.w2 = torch.nn.Parameter(torch.randn(e, s.hidden, s.moe_ffn, **kw) * 0.02)
        self.b2 = torch.nn.Parameter(torch.zeros(e, s.hidden, **kw))
        pos = torch.arange(s.seq, device=device, dtype=torch.float32)
        freq = 1.0 / (150000.0 ** (torch.arange(0, s.head_dim, 2, device=device) / s.head_dim))
        ang = torch.outer(pos, freq)
        self.cos, self.sin = ang.cos().to(dt)[None, None], ang.sin().to(dt)[None, None]
        # balanced routing (NVIDIA's `moe_router_force_load_balancing`): the rows this GPU
        # computes, expert by expert, each a token of this micro-batch
        rows = s.expert_rows
        self.token_of_row = (torch.arange(rows, device=device) * 7919) % s.seq
        self.row_of_token = torch.argsort(self.token_of_row, stable=True).view(s.seq, s.topk)
        self.offs = torch.arange(rows // e, rows + 1, rows // e, device=device, dtype=torch.int32)
        self.block_mask = None
        if attention == "window_flex":
            from torch.nn.attention.flex_attention import create_block_mask

            w = s.window

            def sliding(b: Any, h: Any, q: Any, k: Any) -> Any:
                return (q >= k) & (q - k <= w)

            self.block_mask = create_block_mask(sliding, None, None, s.seq, s.seq, device=device)
            from torch.nn.attention.flex_attention import flex_attention

            self.flex = torch.compile(flex_attention, dynamic=False)
        if attention == "window_mask":
            i = torch.arange(s.seq, device=device)
            self.mask = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] <= s.window)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = self.s
        if self.attention == "window_flex":
            return self.flex(q, k, v, block_mask=self.block_mask, enable_gqa=True)
        rep = s.heads // s.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if self.attention == "window_mask":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION] if q.is_cuda \
            else [SDPBackend.MATH]
        with sdpa_kernel(backends):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def expert_mm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x (rows, in) through each local expert's w (out, in)."""
        if self.experts == "grouped_mm" and x.is_cuda:
            return torch._grouped_mm(x, w.transpose(-2, -1), offs=self.offs)
        e = w.shape[0]
        return torch.cat([c @ w[i].t() for i, c in enumerate(x.chunk(e))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.s
        hd = s.head_dim
        qkv = self.qkv(self.norm1(x))  # (seq, qkv_out)
        q, k, v = qkv.split([s.heads * hd, s.kv_heads * hd, s.kv_heads * hd], dim=-1)
        q = q.view(s.seq, s.heads, hd).transpose(0, 1)[None]
        k = k.view(s.seq, s.kv_heads, hd).transpose(0, 1)[None]
        v = v.view(s.seq, s.kv_heads, hd).transpose(0, 1)[None]
        q, k = rope(q, self.cos, self.sin), rope(k, self.cos, self.sin)
        a = self.attend(q, k, v)[0].transpose(0, 1).reshape(s.seq, s.heads * hd)
        x = x + self.proj(a)
        h = self.norm2(x)
        scores = torch.softmax(self.router(h).float(), dim=-1)
        probs, _ = scores.topk(s.topk, dim=-1)
        row_probs = probs.reshape(-1)[: s.expert_rows]
        # permute (and what the all-to-all delivers) and unpermute are gathers both ways, as
        # Transformer Engine's fused permutation kernels are (no atomics)
        xp = Gather.apply(h, self.token_of_row, self.row_of_token)
        y = self.bias(self.expert_mm(xp, self.w1), self.b1)
        y = self.activation(y, row_probs, s.clamp)
        y = self.bias(self.expert_mm(y, self.w2), self.b2)
        return x + Combine.apply(y, self.token_of_row, self.row_of_token)

    def bias(self, y: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Each expert's bias on its rows (its gradient a sum over the rows, per expert)."""
        e = b.shape[0]
        return (y.view(e, -1, y.shape[-1]) + b[:, None, :]).view_as(y)


class MegatronCrossEntropy(torch.autograd.Function):
    """Megatron-Core's `_VocabParallelCrossEntropy` on one rank (tensor_parallel/cross_entropy.py):
    fp32 logits, max, subtract, exp and sum in place, log; the softmax is kept for the backward,
    which subtracts one at each label and scales by the loss's gradient in place."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        lf = logits.to(torch.float32, copy=True)
        lf -= lf.max(dim=-1, keepdim=True).values
        pred = lf.gather(-1, labels[:, None]).squeeze(-1)
        lf.exp_()
        total = lf.sum(dim=-1)
        lf.div_(total[:, None])
        ctx.save_for_backward(lf, labels)
        return total.log() - pred

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        softmax, labels = ctx.saved_tensors
        rows = torch.arange(softmax.shape[0], device=softmax.device)
        softmax[rows, labels] -= 1.0
        softmax.mul_(g[:, None])
        return softmax, None


def head_loss(x: torch.Tensor, w: torch.Tensor, labels: torch.Tensor, fused: bool) -> torch.Tensor:
    """The output layer and the loss: Megatron's cross-entropy or PyTorch's fused one."""
    logits = x @ w.t()
    if fused:
        return F.cross_entropy(logits.float(), labels)
    return MegatronCrossEntropy.apply(logits, labels).mean()


def kernel_table(fn: Callable[[], Any], reps: int) -> tuple[dict[str, tuple[int, float]], float]:
    """Per kernel name: (calls, device seconds) per call of `fn`, from the profiler (CUPTI)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CUDA] if torch.cuda.is_available() else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        for _ in range(reps):
            fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    table: dict[str, tuple[int, float]] = {}
    for e in prof.key_averages():
        dev = getattr(e, "self_device_time_total", 0.0) or 0.0
        if dev <= 0:
            continue
        table[e.key] = (e.count // reps, dev * 1e-6 / reps)
    return table, sum(t for _, t in table.values())


def wall_seconds(fn: Callable[[], Any], reps: int, sync: Callable[[], None]) -> float:
    for _ in range(2):
        fn()
    sync()
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    args = ap.parse_args()
    dev = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    s = SMOKE if dev == "cpu" else Shape()
    args.outdir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    environment(args.outdir, dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    reps = 10 if dev == "cuda" else 2
    fused_act = torch.compile(quick_geglu, dynamic=False) if dev == "cuda" else quick_geglu
    layers = [("full", "grouped_mm", "eager"), ("full", "grouped_mm", "compiled"),
              ("window_flex", "grouped_mm", "compiled"),
              ("window_mask", "grouped_mm", "compiled")]
    lf = (args.outdir / "layer.csv").open("w", newline="")
    kf = (args.outdir / "kernels.csv").open("w", newline="")
    lw = csv.writer(lf)
    kw = csv.writer(kf)
    lw.writerow(["variant", "direction", "wall_s", "kernel_s", "launches", "note"])
    kw.writerow(["variant", "direction", "kernel", "calls", "device_s"])
    x0 = torch.randn(s.seq, s.hidden, device=dev, dtype=torch.bfloat16)
    dy = torch.randn_like(x0)

    def record(variant: str, direction: str, fn: Callable[[], Any]) -> None:
        try:
            wall = wall_seconds(fn, reps, sync)
            table, ksum = kernel_table(fn, reps)
            launches = sum(c for c, _ in table.values())
            note = ""
        except Exception as exc:  # a variant this machine cannot run is a row that says why
            wall = ksum = float("nan")
            table, launches, note = {}, 0, f"{type(exc).__name__}: {str(exc)[:200]}"
        lw.writerow([variant, direction, wall, ksum, launches, note])
        for name, (calls, t) in sorted(table.items(), key=lambda kv: -kv[1][1]):
            kw.writerow([variant, direction, name, calls, t])
        lf.flush()
        kf.flush()
        print(f"{variant:34s} {direction:8s} wall {wall * 1e3:8.3f} ms  kernels {ksum * 1e3:8.3f} ms"
              f"  launches {launches:5d} {note}", flush=True)

    for attention, experts, act in layers:
        variant = f"layer:{attention}:{experts}:{act}"
        try:
            layer = Layer(s, attention, experts, fused_act if act == "compiled" else quick_geglu, dev)
        except Exception as exc:
            lw.writerow([variant, "build", "", "", "", f"{type(exc).__name__}: {str(exc)[:200]}"])
            print(variant, "build failed", exc, flush=True)
            continue
        x = x0.clone().requires_grad_()

        def fwd(layer: Layer = layer) -> None:
            with torch.no_grad():
                layer(x0)

        def both(layer: Layer = layer, x: torch.Tensor = x) -> None:
            # fresh gradients each call: Megatron accumulates weight gradients inside the
            # GEMMs (gradient_accumulation_fusion), not with a separate add per weight
            layer.zero_grad(set_to_none=True)
            x.grad = None
            layer(x).backward(dy)

        record(variant, "fwd", fwd)
        record(variant, "fwd+bwd", both)
        del layer
        if dev == "cuda":
            torch.cuda.empty_cache()

    w = (torch.randn(s.vocab, s.hidden, device=dev, dtype=torch.bfloat16) * 0.02).requires_grad_()
    labels = torch.randint(0, s.vocab, (s.seq,), device=dev)
    xh = x0.clone().requires_grad_()
    for fused in (False, True):
        variant = f"head:{'fused_ce' if fused else 'megatron_ce'}"

        def hfwd(fused: bool = fused) -> None:
            with torch.no_grad():
                head_loss(x0, w, labels, fused)

        def hboth(fused: bool = fused) -> None:
            w.grad = xh.grad = None
            head_loss(xh, w, labels, fused).backward()

        record(variant, "fwd", hfwd)
        record(variant, "fwd+bwd", hboth)
    lf.close()
    kf.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
