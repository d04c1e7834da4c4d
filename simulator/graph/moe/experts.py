"""The routed experts of one rank (Megatron-Core `moe/experts.py::TEGroupedMLP`): fc1 (gate and
up with SwiGLU) of every local expert in one grouped GEMM, the activation, fc2 in one grouped
GEMM; each expert's FFN split over expert_tp. A grouped GEMM is costed as `local_experts`
independent (tokens_per_expert x N x K) problems sharing the GPU, each its own kernel (TE's
`general_grouped_gemm` issues one cuBLAS GEMM per expert over several streams from one host
call): what makes it slower per FLOP as the tokens per expert shrink is its tile and wave
quantization (simulator.costs.analytic.gemm_efficiency), the expert weights it must read whatever
the tokens (the roofline's memory side) and a launch gap per expert. Without
`moe_grouped_gemm` (SequentialMLP) every expert is its own pair of GEMM launches from Python.
Also the permutations around them (`moe_utils.py::permute`, `unpermute`, `sort_chunks_by_idxs`,
fused kernels with `--moe-permute-fusion`).
Check: bench/fit_b200_kernels.py compares these grouped GEMMs with 108 measured on a B200.
Both are Transformer Engine linears: in a low-precision recipe they quantize each expert's
input, weight and output gradient and run in the format (simulator.graph.quantize); a grouped
GEMM's quantize kernels are one launch over all local experts (TE's multi-tensor quantize)."""

from __future__ import annotations

from dataclasses import replace

from simulator.graph.layer_parts import LayerParts
from simulator.graph.moe.dispatch import RoutedTokens
from simulator.graph.ops import Op, OpKind
from simulator.graph.primitives import ShapeContext, pointwise
from simulator.graph.quantize import LinearSpec, linear, runs_low
from simulator.job.specs import Job


def _grouped(c: ShapeContext, name: str, r: RoutedTokens, n: int, k: int, saved: float,
             acc: int, grouped: bool) -> tuple[list[Op], list[Op]]:
    """fc1 or fc2 of the local experts: one grouped GEMM, or one GEMM launch per expert
    (forward ops and backward ops, with a low-precision recipe's quantize kernels)."""
    e, m = r.local_experts, r.per_expert
    if grouped:  # TE's grouped GEMM: one call, one GEMM kernel per expert
        fwd, bwd = linear(c, LinearSpec(name, m, n, k, False, False, False, acc, batch=e,
                                        local=True), saved)

        def launches(op: Op) -> Op:
            return replace(op, kernels=e, host_launches=1) if op.kind is OpKind.GEMM else op

        return [launches(op) for op in fwd], [launches(op) for op in bwd]
    fwd, bwd = linear(c, LinearSpec(name, m, n, k, False, False, False, acc, local=True), saved)

    def each(op: Op) -> Op:
        return replace(op, flops=op.flops * e, bytes=op.bytes * e, kernels=op.kernels * e,
                       saved_bytes=op.saved_bytes * e)

    fwd = [each(op) for op in fwd]
    if runs_low(c, name) is None:  # `saved`: what the 16-bit GEMMs of all experts keep
        fwd[-1] = replace(fwd[-1], saved_bytes=saved)
    return fwd, [each(op) for op in bwd]


def permute(c: ShapeContext, name: str, tokens_in: float, tokens_out: float, saved: float = 0.0
            ) -> tuple[Op, Op]:
    """A (fused) gather of token rows into a new order: read `tokens_in` rows, write
    `tokens_out`; its backward scatters (and for a weighted unpermute, reduces) them back."""
    rows = (tokens_in + tokens_out) * c.h
    fwd, bwd = pointwise(name, OpKind.ELEMENTWISE, max(tokens_in, tokens_out) * c.h, c.dt, 1, 1,
                         saved, "permute", bwd_traffic=1.0)
    return replace(fwd, bytes=rows * c.dt), replace(bwd, bytes=rows * c.dt)


def experts(job: Job, c: ShapeContext, parts: LayerParts, r: RoutedTokens, acc: int) -> float:
    """Append the local experts' ops; returns the bytes they save."""
    m, t = job.model, job.training
    f = m.moe_ffn // job.expert_tp
    up = 2 * f if m.gated_mlp else f
    n, dt, h = r.computed, c.dt, m.hidden_size
    grouped = t.moe_grouped_gemm
    fc1 = _grouped(c, "moe.fc1", r, up, h, dt * n * h, acc, grouped)
    act_name = "swiglu" if m.gated_mlp else "gelu"
    act = pointwise(f"moe.{act_name}", OpKind.ACTIVATION, n * up, dt, 1, 0.5 if m.gated_mlp else 1,
                    2 * n * up, act_name, bwd_traffic=2.5 if m.gated_mlp else 3.0,
                    flops_per_elem=8.0)
    fc2 = _grouped(c, "moe.fc2", r, h, f, dt * n * f, acc, grouped)
    parts.add_linear(fc1)
    parts.add(act)
    parts.add_linear(fc2)
    parts.linears.update({"moe.fc1": (h, up), "moe.fc2": (f, h)})
    parts.linear_tensors.update({"moe.fc1": r.local_experts, "moe.fc2": r.local_experts})
    parts.linear_tokens.update({"moe.fc1": n, "moe.fc2": n})
    return (sum(op.saved_bytes for op in fc1[0]) + act[0].saved_bytes
            + sum(op.saved_bytes for op in fc2[0]))
