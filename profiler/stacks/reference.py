"""The reference stack: our own Megatron-structured PyTorch GPT, one rank's shard.

The layer follows Megatron-LM's ParallelTransformerLayer (megatron/core/transformer/
transformer_layer.py) as plain PyTorch, the way `../shared/data/traces/h100/what_ran.py`
(`mgpt_`) ran it: pre-norm (LayerNorm or RMSNorm), fused QKV projection (column-parallel: the
rank's heads and query groups), attention by `scaled_dot_product_attention` (flash) or bmm +
masked softmax + dropout + bmm (unfused), output projection (row-parallel), dropout + residual,
norm, MLP (GeLU, or SwiGLU when gated), dropout + residual; word embeddings (the rank's vocabulary
shard), learned positions or rotary embeddings, final norm, logits (tied or not) and the loss on
fp32 logits. Full recompute is `torch.utils.checkpoint` per layer (non-reentrant), selective
recompute checkpoints the attention core.

Tensor-parallel communication is not run: with sequence parallelism the all-gather before and the
reduce-scatter after each parallel region are kernel-free stand-ins that only give tensors their
per-rank shapes (`_Gather`, `_Scatter`); the simulator's network model costs the collectives.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from profiler.stacks.shard import Shard
from simulator.job.enums import Norm, PositionEmbedding, Recompute


class _Gather(torch.autograd.Function):
    """Sequence-parallel all-gather stand-in: [b, s/tp, h] -> [b, s, h] without a kernel."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tp: int) -> torch.Tensor:
        ctx.tp = tp
        b, s, h = x.shape
        return x.new_empty(b, s * tp, h)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad.narrow(1, 0, grad.shape[1] // ctx.tp), None


class _Scatter(torch.autograd.Function):
    """Sequence-parallel reduce-scatter stand-in: [b, s, h] -> [b, s/tp, h] without a kernel."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tp: int) -> torch.Tensor:
        ctx.tp = tp
        return x.narrow(1, 0, x.shape[1] // tp)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        b, s, h = grad.shape
        return grad.new_empty(b, s * ctx.tp, h), None


def _norm(shard: Shard) -> nn.Module:
    if shard.norm is Norm.RMSNORM:
        return nn.RMSNorm(shard.hidden)
    return nn.LayerNorm(shard.hidden, bias=shard.use_bias)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021), the rotate-half form Megatron and Llama use."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Layer(nn.Module):
    def __init__(self, shard: Shard) -> None:
        super().__init__()
        c = self.c = shard
        d, bias = c.head_dim, c.use_bias
        self.norm1, self.norm2 = _norm(c), _norm(c)
        self.qkv = nn.Linear(c.hidden, (c.heads + 2 * c.groups) * d, bias=bias)
        self.proj = nn.Linear(c.heads * d, c.hidden, bias=bias)
        self.fc1 = nn.Linear(c.hidden, c.ffn * (2 if c.gated_mlp else 1), bias=bias)
        self.fc2 = nn.Linear(c.ffn, c.hidden, bias=bias)
        self.drop = nn.Dropout(c.hidden_dropout)

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        c = self.c
        if c.groups != c.heads:
            k = k.repeat_interleave(c.heads // c.groups, dim=1)
            v = v.repeat_interleave(c.heads // c.groups, dim=1)
        p = c.attention_dropout if self.training else 0.0
        if c.flash:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        t = q.shape[2]
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(c.head_dim))
        mask = torch.ones(t, t, device=q.device, dtype=torch.bool).triu(1)
        probs = F.dropout(torch.softmax(scores.masked_fill(mask, float("-inf")), -1), p,
                          self.training)
        return probs @ v

    def attention(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None
                  ) -> torch.Tensor:
        c = self.c
        b, t, _ = x.shape
        mixed = self.qkv(x)
        if c.groups == c.heads:  # what_ran.py's mgpt_ layout
            q, k, v = mixed.view(b, t, 3, c.heads, c.head_dim).permute(2, 0, 3, 1, 4)
        else:
            q, k, v = mixed.split([c.heads * c.head_dim, c.groups * c.head_dim,
                                   c.groups * c.head_dim], dim=-1)
            q = q.view(b, t, c.heads, c.head_dim).transpose(1, 2)
            k = k.view(b, t, c.groups, c.head_dim).transpose(1, 2)
            v = v.view(b, t, c.groups, c.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        if c.recompute is Recompute.SELECTIVE and self.training:
            y = checkpoint(self.core, q, k, v, use_reentrant=False)
        else:
            y = self.core(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, c.heads * c.head_dim))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        if self.c.gated_mlp:
            gate, up = self.fc1(x).chunk(2, dim=-1)
            return self.fc2(F.silu(gate) * up)
        return self.fc2(F.gelu(self.fc1(x)))

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> torch.Tensor:
        sp, tp = self.c.sequence_parallel, self.c.tp
        h = self.norm1(x)
        a = self.attention(_Gather.apply(h, tp) if sp else h, rope)
        x = x + self.drop(_Scatter.apply(a, tp) if sp else a)
        h = self.norm2(x)
        m = self.mlp(_Gather.apply(h, tp) if sp else h)
        return x + self.drop(_Scatter.apply(m, tp) if sp else m)


class ReferenceGPT(nn.Module):
    """Embedding, `shard.layers` layers, final norm, logits and loss of one rank."""

    def __init__(self, shard: Shard) -> None:
        super().__init__()
        c = self.c = shard
        self.wte = nn.Embedding(c.vocab, c.hidden)
        self.wpe = nn.Embedding(c.seq, c.hidden) if c.position is PositionEmbedding.LEARNED else None
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.norm = _norm(c)
        self.head = None if c.tied else nn.Linear(c.hidden, c.vocab, bias=False)
        self.drop = nn.Dropout(c.hidden_dropout)
        if c.position is PositionEmbedding.ROPE:
            inv = 1.0 / (10000 ** (torch.arange(0, c.head_dim, 2).float() / c.head_dim))
            angles = torch.outer(torch.arange(c.seq).float(), inv)
            emb = torch.cat((angles, angles), dim=-1)
            self.register_buffer("cos", emb.cos(), persistent=False)
            self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        c = self.c
        x = self.wte(ids)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        x = self.drop(x)
        if c.sequence_parallel:
            x = _Scatter.apply(x, c.tp)
        rope = (self.cos, self.sin) if c.position is PositionEmbedding.ROPE else None
        for layer in self.layers:
            if c.recompute is Recompute.FULL and self.training:
                x = checkpoint(layer, x, rope, use_reentrant=False)
            else:
                x = layer(x, rope)
        x = self.norm(x)
        if c.sequence_parallel:
            x = _Gather.apply(x, c.tp)
        logits = self.head(x) if self.head is not None else x @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), ids.view(-1))


def build(shard: Shard) -> tuple[nn.Module, Any]:
    """The model and its loss function of (model, input ids)."""
    model = ReferenceGPT(shard)
    return model, lambda m, ids: m(ids)
