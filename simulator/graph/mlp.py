"""Megatron's dense MLP (also a MoE layer's shared experts): up projection (gate and up with
SwiGLU, a column-parallel linear), activation, down projection (row-parallel), and their
tensor-parallel collectives (simulator.graph.tp_comm)."""

from __future__ import annotations

from simulator.graph.layer_parts import LayerParts
from simulator.graph.ops import OpKind
from simulator.graph.primitives import ShapeContext, gemm, pointwise
from simulator.graph.tp_comm import column_parallel, row_parallel
from simulator.job.specs import Job


def dense_mlp(job: Job, c: ShapeContext, parts: LayerParts, acc: int, ffn: int,
               name: str) -> None:
    """Megatron's MLP: up (gate and up with SwiGLU, column-parallel), activation, down
    (row-parallel). Also a MoE layer's shared experts (`name` "shared_expert")."""
    m, t, T = job.model, c.t, c.tokens
    shard = 1 / t if c.sp else 1.0
    f = ffn // t
    up = 2 * f if m.gated_mlp else f
    parts.add(gemm(f"{name}.up", T, up, m.hidden_size, c.dt, 2 * T * m.hidden_size * shard,
                   accumulate_bytes=acc))
    act = "swiglu" if m.gated_mlp else "gelu"
    parts.add(pointwise(f"{name}.{act}", OpKind.ACTIVATION, T * up, c.dt, 1,
                        0.5 if m.gated_mlp else 1, 2 * T * up, act,
                        bwd_traffic=2.5 if m.gated_mlp else 3.0, flops_per_elem=8.0))
    parts.add(gemm(f"{name}.down", T, m.hidden_size, f, c.dt, 2 * T * f, accumulate_bytes=acc))
    nbytes = c.tokens * c.h * c.dt
    up_c = column_parallel(f"{name}.up", nbytes, t, c.sp, c.fw.async_tp_grad_allreduce)
    down_c = row_parallel(f"{name}.down", nbytes, t, c.sp)
    parts.mlp_fwd_comm += [*up_c.forward, *down_c.forward]
    parts.mlp_bwd_comm += [*down_c.backward, *up_c.backward]
    parts.linears.update({f"{name}.up": (m.hidden_size, up), f"{name}.down": (f, m.hidden_size)})
