"""Measure the framework (host) cost per kernel of a Megatron-style transformer layer.

Why: on small layers, Megatron training is bound by the host dispatching kernels, not by the GPU.
The analytic model's default `host_overhead_s` (host time per kernel, see simulator/lowering.py)
comes from this measurement, not from the validation data. The layer follows Megatron-LM's
Python structure, because that structure is what costs host time: linear layers as custom
autograd Functions (LinearWithGradAccumulationAndAsyncCommunication), TorchScript-fused bias-GeLU
and bias-dropout-add, a fused scale-mask-softmax Function, the layer wrapped in reentrant
activation checkpointing (full recompute), gradients accumulated into `main_grad` buffers.
Tensors are tiny, so compute is negligible and what remains is Python + dispatcher + autograd.
The per-kernel figure divides the time of forward + recompute + backward by the number of
kernels the simulator's graph counts for the same layer. On CPU it omits the CUDA launch call
itself (a few microseconds per kernel on the GPU host), so it is a lower bound there; on a GPU
host (`--device cuda`, fp16, e.g. through the device tool) it includes the launch path and the
caching allocator, and the tiny tensors keep the GPU idle, so the time is the host's.

Run: python bench/measure_host_overhead.py [--device cuda]   (needs torch; best of several blocks)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from simulator.graph import build_layer
from tests.conftest import make_job


class LinearFunction(torch.autograd.Function):
    """Megatron's linear: explicit data- and weight-gradient GEMMs, weight gradient accumulated
    into `main_grad` (no bias here: Megatron returns it for fusion, skip_bias_add)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return torch.matmul(x, weight.t())

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        x, weight = ctx.saved_tensors
        grad_input = grad.matmul(weight)
        g2, x2 = grad.reshape(-1, grad.shape[-1]), x.reshape(-1, x.shape[-1])
        weight.main_grad.add_(g2.t().matmul(x2))  # type: ignore[attr-defined]
        return grad_input, None


class Linear(nn.Module):
    def __init__(self, n_in: int, n_out: int, **where: Any) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in, **where) * 0.02)
        self.bias = nn.Parameter(torch.zeros(n_out, **where))
        self.weight.main_grad = torch.zeros_like(self.weight)  # type: ignore[attr-defined]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return LinearFunction.apply(x, self.weight), self.bias


@torch.jit.script
def bias_gelu(bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


@torch.jit.script
def bias_dropout_add(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor,
                     prob: float) -> torch.Tensor:
    return residual + F.dropout(x + bias, p=prob, training=True)


class ScaleMaskSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, scores: torch.Tensor, scale: float) -> torch.Tensor:
        s = scores.shape[-1]
        mask = torch.ones(s, s, dtype=torch.bool, device=scores.device).triu(1)
        probs = torch.softmax((scores * scale).masked_fill(mask, -10000.0), dim=-1)
        ctx.save_for_backward(probs)
        ctx.scale = scale
        return probs

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (probs,) = ctx.saved_tensors
        return torch.ops.aten._softmax_backward_data(grad, probs, -1, probs.dtype) * ctx.scale, None


class Layer(nn.Module):
    """Megatron's ParallelTransformerLayer (tp = 1) with its Python structure."""

    def __init__(self, h: int, heads: int, **where: Any) -> None:
        super().__init__()
        self.heads, self.p = heads, 0.1
        self.ln1, self.ln2 = nn.LayerNorm(h, **where), nn.LayerNorm(h, **where)
        self.qkv, self.proj = Linear(h, 3 * h, **where), Linear(h, h, **where)
        self.up, self.down = Linear(h, 4 * h, **where), Linear(4 * h, h, **where)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        mixed, qkv_bias = self.qkv(self.ln1(x))
        mixed = (mixed + qkv_bias).view(s, b * self.heads, 3 * h // self.heads)
        q, k, v = torch.split(mixed, h // self.heads, dim=-1)
        scores = torch.baddbmm(q.new_empty(b * self.heads, s, s), q.transpose(0, 1),
                               k.transpose(0, 1).transpose(1, 2), beta=0.0, alpha=1.0)
        probs = F.dropout(ScaleMaskSoftmax.apply(scores, 0.125), self.p, training=True)
        context = torch.bmm(probs, v.transpose(0, 1)).permute(1, 0, 2).contiguous().view(s, b, h)
        out, bias = self.proj(context)
        x = bias_dropout_add(out, bias, x, self.p)
        hidden, bias = self.up(self.ln2(x))
        out, bias2 = self.down(bias_gelu(bias, hidden))
        return bias_dropout_add(out, bias2, x, self.p)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", help="cpu or cuda (a GPU host: fp16, like the runs)")
    args = ap.parse_args()
    device = torch.device(args.device)
    where: dict[str, Any] = {"device": device,
                             "dtype": torch.float16 if device.type == "cuda" else torch.float32}
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layer = Layer(64, 4, **where)
    x = torch.randn(16, 1, 64, requires_grad=True, **where)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def step() -> None:
        checkpoint(layer, x, use_reentrant=True).sum().backward()

    for _ in range(50):
        step()
    reps, blocks = 100, 9
    timings = []
    for _ in range(blocks):  # the fastest block: the machine is shared, contention only adds time
        sync()
        start = time.perf_counter()
        for _ in range(reps):
            step()
        sync()
        timings.append((time.perf_counter() - start) / reps)
    per_layer = min(timings)
    block = build_layer(make_job(training={"recompute": "full"}))
    kernels = sum(op.kernels for op in (*block.forward, *block.recompute, *block.backward))
    print(f"Megatron-style layer, fwd + recompute + bwd: {per_layer * 1e6:.0f} us over {kernels} "
          f"graph kernels -> {per_layer / kernels * 1e6:.1f} us host time per kernel "
          f"(torch {torch.__version__}, {device.type}, best of {blocks} blocks of {reps})")


if __name__ == "__main__":
    main()
