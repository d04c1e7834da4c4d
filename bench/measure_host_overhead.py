"""Measure the framework (host) cost per operator of an eager PyTorch transformer layer.

Why: on small layers, Megatron-style training is bound by the host dispatching kernels, not by the
GPU. The analytic model's default `host_overhead_s` (a floor per graph op) comes from this
measurement -- a Megatron-like GPT layer (unfused attention, LayerNorm, GeLU MLP, dropouts) with
tiny tensors, so compute is negligible and what remains is Python + dispatcher + autograd time --
not from the validation data. The per-op figure divides the time of forward + recompute +
backward by the number of ops the simulator's graph counts for the same layer.

Run: python bench/measure_host_overhead.py   (needs torch)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from simulator.graph import build_layer
from tests.conftest import make_job


class Layer(nn.Module):
    """Megatron's ParallelTransformerLayer structure (tp = 1), eager PyTorch."""

    def __init__(self, h: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.up, self.down = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(s, b * self.heads, 3 * h // self.heads).chunk(3, dim=-1)
        scores = torch.baddbmm(torch.empty(b * self.heads, s, s), q.transpose(0, 1),
                               k.transpose(0, 1).transpose(1, 2), beta=0.0, alpha=0.125)
        causal = torch.ones(s, s, dtype=torch.bool).triu(1)
        probs = self.drop(torch.softmax(scores.masked_fill(causal, -1e4), -1))
        ctx = torch.bmm(probs, v.transpose(0, 1)).transpose(0, 1).contiguous().view(s, b, h)
        x = x + self.drop(self.proj(ctx))
        return x + self.drop(self.down(nn.functional.gelu(self.up(self.ln2(x)))))


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layer = Layer(64, 4)
    x = torch.randn(16, 1, 64, requires_grad=True)
    for _ in range(50):
        layer(x).sum().backward()
    reps, blocks = 100, 7
    timings = []
    for _ in range(blocks):  # the fastest block: the machine is shared, contention only adds time
        start = time.perf_counter()
        for _ in range(reps):
            with torch.no_grad():
                layer(x)  # the recompute pass of full activation recomputation
            layer(x).sum().backward()
        timings.append((time.perf_counter() - start) / reps)
    per_layer = min(timings)
    block = build_layer(make_job(training={"recompute": "full"}))
    ops = len(block.forward) + len(block.recompute) + len(block.backward)
    print(f"eager layer fwd + recompute + bwd: {per_layer * 1e6:.0f} us over {ops} graph ops "
          f"-> {per_layer / ops * 1e6:.1f} us host time per graph op (torch {torch.__version__}, CPU)")


if __name__ == "__main__":
    main()
