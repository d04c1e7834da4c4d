"""Op -> a runnable PyTorch call of that op on a device, with fresh random inputs.

One builder per `OpKind`, dispatched through `BUILDERS`. Forward ops call the PyTorch op the
Megatron layer uses; backward ops run only the backward kernels (autograd on a retained graph, or
the explicit gradient GEMM): a linear layer's data gradient ``dX = dY W`` and weight gradient
``dW = dY^T X`` are timed as separate GEMMs with the operand layouts autograd uses, because the
simulator costs them separately. Inputs are drawn from a seeded generator (never zeros: sparse or
constant data can take fast paths). The attention core is measured both unfused (bmm, softmax,
dropout, bmm) and as `scaled_dot_product_attention` (the graph has one or the other).

Pointwise ops are keyed by element count only; `row` (from `profiler.selection.row_hint`) gives
the innermost dimension so that reductions (norm, softmax) run over the real row length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from simulator.graph.ops import Op, OpKind, Phase

Kernel = Callable[[], Any]
DROPOUT_P = 0.1


class Inputs:
    """Seeded random tensors on one device."""

    def __init__(self, device: torch.device, dtype: torch.dtype, seed: int) -> None:
        self.device, self.dtype = device, dtype
        self.gen = torch.Generator(device=device).manual_seed(seed)

    def randn(self, *shape: int, dtype: torch.dtype | None = None, grad: bool = False) -> torch.Tensor:
        t = torch.randn(tuple(shape), generator=self.gen, device=self.device, dtype=dtype or self.dtype)
        return t.requires_grad_(grad)

    def rows(self, numel: int, row: int, grad: bool = False) -> torch.Tensor:
        row = row if row and numel % row == 0 else _pow2_divisor(numel)
        return self.randn(numel // row, row, grad=grad)


def _pow2_divisor(n: int, cap: int = 8192) -> int:
    d = 1
    while d < cap and n % (2 * d) == 0:
        d *= 2
    return d


def _backward(out: torch.Tensor, wrt: tuple[torch.Tensor, ...], x: Inputs) -> Kernel:
    """Time only the backward kernels of `out` with respect to `wrt` (graph kept for repeats)."""
    grad = x.randn(*out.shape, dtype=out.dtype)
    return lambda: torch.autograd.grad(out, wrt, grad, retain_graph=True)


def gemm(op: Op, row: int, x: Inputs) -> Kernel:
    batch, m, n, k = op.shape
    if op.kind is OpKind.BMM or batch > 1:
        a = x.randn(batch, m, k)
        b = x.randn(batch, n, k).transpose(1, 2) if op.phase is Phase.FORWARD else x.randn(batch, k, n)
        return lambda: torch.bmm(a, b)
    if op.phase is Phase.FORWARD:  # Y = X W^T (torch.nn.functional.linear, weight [N, K])
        a, w = x.randn(m, k), x.randn(n, k)
        return lambda: F.linear(a, w)
    if op.phase is Phase.BACKWARD_WEIGHT:  # dW[M=out, N=in] = dY^T X, dY stored [K=tokens, M]
        dy, a = x.randn(k, m), x.randn(k, n)
        return lambda: torch.mm(dy.t(), a)
    dy, w = x.randn(m, k), x.randn(k, n)  # dX[M, N=in] = dY[M, K=out] W[K, N]
    return lambda: torch.mm(dy, w)


def flash_attention(op: Op, row: int, x: Inputs) -> Kernel:
    bh, s, _, d = op.shape
    q, k, v = (x.randn(1, bh, s, d, grad=op.phase is not Phase.FORWARD) for _ in range(3))
    if op.phase is Phase.FORWARD:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return _backward(out, (q, k, v), x)


def softmax(op: Op, row: int, x: Inputs) -> Kernel:
    """Megatron's fused scale-mask-softmax is one kernel; torch.softmax is its closest single op.
    Its unfused fallback runs as Megatron writes it: fp32 cast, scale, masked fill, softmax, cast."""
    if op.variant == "unfused_fp32":
        bwd = op.phase is not Phase.FORWARD
        scores = x.rows(op.shape[0], row, grad=bwd)
        mask = torch.rand(scores.shape, generator=x.gen, device=x.device) > 0.5

        def unfused() -> torch.Tensor:
            return (scores.float() * 0.125).masked_fill(mask, -10000.0).softmax(-1).to(scores.dtype)
        return unfused if not bwd else _backward(unfused(), (scores,), x)
    t = x.rows(op.shape[0], row)
    if op.phase is Phase.FORWARD:
        return lambda: torch.softmax(t, dim=-1)
    y = torch.softmax(t, dim=-1)
    g = x.randn(*y.shape)
    return lambda: torch.ops.aten._softmax_backward_data(g, y, -1, y.dtype)


def dropout(op: Op, row: int, x: Inputs) -> Kernel:
    t = x.rows(op.shape[0], row)
    if op.phase is Phase.FORWARD:
        if op.variant == "bias_dropout_add":
            residual = x.randn(*t.shape)
            return lambda: torch.add(residual, F.dropout(t, DROPOUT_P, training=True))
        return lambda: F.dropout(t, DROPOUT_P, training=True)
    mask = torch.rand(t.shape, generator=x.gen, device=x.device) > DROPOUT_P
    return lambda: torch.ops.aten.native_dropout_backward(t, mask, 1 / (1 - DROPOUT_P))


def norm(op: Op, row: int, x: Inputs) -> Kernel:
    if op.variant.endswith("_wgrad"):  # weight (and bias) gradient: reductions over the tokens
        xhat, g = x.rows(op.shape[0], row), x.rows(op.shape[0], row)
        with_bias = op.variant.startswith("layernorm")
        return lambda: ((xhat * g).sum(0), g.sum(0) if with_bias else None)
    bwd = op.phase is not Phase.FORWARD
    t = x.rows(op.shape[0], row, grad=bwd)
    h = t.shape[-1]
    w = x.randn(h, grad=bwd)
    if op.variant == "rmsnorm":
        def fwd() -> torch.Tensor:
            return F.rms_norm(t, (h,), w, 1e-5)
        wrt: tuple[torch.Tensor, ...] = (t, w)
    else:
        b = x.randn(h, grad=bwd)

        def fwd() -> torch.Tensor:
            return F.layer_norm(t, (h,), w, b, 1e-5)
        wrt = (t, w, b)
    return fwd if not bwd else _backward(fwd(), wrt, x)


def activation(op: Op, row: int, x: Inputs) -> Kernel:
    bwd = op.phase is not Phase.FORWARD
    t = x.rows(op.shape[0], row, grad=bwd)

    def fwd() -> torch.Tensor:
        if op.variant == "swiglu":
            gate, up = t.chunk(2, dim=-1)
            return F.silu(gate) * up
        return F.gelu(t, approximate="tanh")
    return fwd if not bwd else _backward(fwd(), (t,), x)


def rope(op: Op, row: int, x: Inputs) -> Kernel:
    bwd = op.phase is not Phase.FORWARD
    t = x.rows(op.shape[0], row, grad=bwd)
    cos, sin = x.randn(t.shape[-1]), x.randn(t.shape[-1])

    def fwd() -> torch.Tensor:
        a, b = t.chunk(2, dim=-1)
        return t * cos + torch.cat((-b, a), dim=-1) * sin
    return fwd if not bwd else _backward(fwd(), (t,), x)


def embedding(op: Op, row: int, x: Inputs) -> Kernel:
    tokens, h = op.shape
    vocab = row or 32768
    table = x.randn(vocab, h, grad=op.phase is not Phase.FORWARD)
    ids = torch.randint(0, vocab, (tokens,), generator=x.gen, device=x.device)
    if op.phase is Phase.FORWARD:
        return lambda: F.embedding(ids, table)
    return _backward(F.embedding(ids, table), (table,), x)


def cross_entropy(op: Op, row: int, x: Inputs) -> Kernel:
    """Loss in fp32 over the (tokens, vocab shard) logits, as Megatron computes it."""
    tokens, vocab = op.shape
    logits = x.randn(tokens, vocab, grad=op.phase is not Phase.FORWARD)
    target = torch.randint(0, vocab, (tokens,), generator=x.gen, device=x.device)
    if op.phase is Phase.FORWARD:
        return lambda: F.cross_entropy(logits.float(), target)
    return _backward(F.cross_entropy(logits.float(), target), (logits,), x)


def adam(op: Op, row: int, x: Inputs) -> Kernel:
    """One Adam step over fp32 master weights (fused kernel on CUDA, foreach on CPU)."""
    param = torch.nn.Parameter(x.randn(op.shape[0], dtype=torch.float32))
    param.grad = x.randn(op.shape[0], dtype=torch.float32)
    fused = x.device.type == "cuda"
    opt = torch.optim.Adam([param], lr=1e-4, fused=fused, foreach=None if fused else True)
    return opt.step


def elementwise(op: Op, row: int, x: Inputs) -> Kernel:
    if op.variant == "rope":
        return rope(op, row, x)
    if op.variant == "grad_accum":  # accumulated gradient += this micro-batch's gradient
        dtype = torch.float32 if op.dtype_bytes == 4 else x.dtype
        acc, grad = x.randn(op.shape[0], dtype=dtype), x.randn(op.shape[0], dtype=dtype)
        return lambda: acc.add_(grad)
    if op.variant == "small":  # a burst of tiny index/mask kernels: `kernels` launches
        ids = torch.randint(0, 1 << 16, (op.shape[0],), generator=x.gen, device=x.device)
        return lambda: [ids.add_(1) for _ in range(round(op.kernels))]
    a = x.rows(op.shape[0], row)
    if op.variant == "bias_grad":  # column sums of the output gradient
        return lambda: a.sum(0)
    if op.variant == "copy":  # a transpose made contiguous
        return lambda: a.t().contiguous()
    if op.variant == "masked_fill":
        rows_mask = torch.rand(a.shape[0], 1, generator=x.gen, device=x.device) > 0.5
        return lambda: a.masked_fill(rows_mask, 0.0)
    b = x.randn(*a.shape)
    return lambda: torch.add(a, b)


def quantize(op: Op, row: int, x: Inputs) -> Kernel:
    """A low-precision recipe's quantize kernel (simulator.graph.quantize): the tensor's amax
    and its cast to FP8 (a transpose variant: the quantized tensor made contiguous transposed).
    PyTorch's own ops stand in for Transformer Engine's fused kernels."""
    a = x.rows(op.shape[0], row)
    if op.variant.endswith("_transpose"):
        q = a.to(torch.float8_e4m3fn)
        return lambda: q.t().contiguous()
    return lambda: (a * (448.0 / a.abs().amax().clamp(min=1e-12))).to(torch.float8_e4m3fn)


BUILDERS: dict[OpKind, Callable[[Op, int, Inputs], Kernel]] = {
    OpKind.GEMM: gemm,
    OpKind.BMM: gemm,
    OpKind.FLASH_ATTENTION: flash_attention,
    OpKind.SOFTMAX: softmax,
    OpKind.DROPOUT: dropout,
    OpKind.NORM: norm,
    OpKind.ACTIVATION: activation,
    OpKind.ELEMENTWISE: elementwise,
    OpKind.EMBEDDING: embedding,
    OpKind.CROSS_ENTROPY: cross_entropy,
    OpKind.OPTIMIZER: adam,
    OpKind.QUANTIZE: quantize,
}


def make_kernel(op: Op, row: int, inputs: Inputs) -> Kernel:
    return BUILDERS[op.kind](op, row, inputs)
