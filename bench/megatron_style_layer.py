"""A transformer layer with Megatron-LM's Python structure (tp = 1), for bench/measure_host_overhead.py.

What costs host time is the structure, not the arithmetic: Megatron's linear layers are custom
autograd Functions with explicit data- and weight-gradient GEMMs whose weight gradient is added
into `main_grad` (`core/tensor_parallel/layers.py`, `LinearWithGradAccumulationAndAsyncCommunication`),
bias-GeLU and bias-dropout-add are TorchScript functions (`fused_bias_gelu.py`,
`fused_bias_dropout.py`), and the softmax is a scale-mask-softmax Function
(`fused_softmax.py`; at sequence 16 Megatron's own shape rule takes the unfused path too).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


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


