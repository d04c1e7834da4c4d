"""Megatron's dense MLP (also a MoE layer's shared experts): up projection (gate and up with
SwiGLU, a column-parallel linear), activation, down projection (row-parallel), and their
tensor-parallel collectives (simulator.graph.tp_comm). Both linears are Transformer Engine
linears that run in a low-precision recipe's format (simulator.graph.quantize): the dense MLP's
up projection is `TELayerNormColumnParallelLinear` (the norm before it writes its quantized
input), the shared experts' a plain `TEColumnParallelLinear` after the MoE layer's own norm
(`moe/shared_experts.py`)."""

from __future__ import annotations

from simulator.graph.layer_parts import LayerParts
from simulator.graph.ops import OpKind
from simulator.graph.primitives import ShapeContext, pointwise
from simulator.graph.quantize import LinearSpec, linear, linear_comm
from simulator.job.specs import Job


def mlp_up_spec(job: Job, c: ShapeContext, acc: int, ffn: int, name: str) -> LinearSpec:
    """The up projection (gate and up with SwiGLU) of an MLP of `ffn`; the dense MLP's (`name`
    "mlp") is fused with the norm before it."""
    f = ffn // c.t
    up = 2 * f if job.model.gated_mlp else f
    return LinearSpec(f"{name}.up", c.tokens, up, job.model.hidden_size, True, name == "mlp",
                      False, acc)


def dense_mlp(job: Job, c: ShapeContext, parts: LayerParts, acc: int, ffn: int,
               name: str) -> None:
    """Megatron's MLP: up (gate and up with SwiGLU, column-parallel), activation, down
    (row-parallel). Also a MoE layer's shared experts (`name` "shared_expert")."""
    m, t, T = job.model, c.t, c.tokens
    shard = 1 / t if c.sp else 1.0
    f = ffn // t
    up_spec = mlp_up_spec(job, c, acc, ffn, name)
    up = up_spec.n
    down_spec = LinearSpec(f"{name}.down", T, m.hidden_size, f, False, False, False, acc)
    parts.add_linear(linear(c, up_spec, 2 * T * m.hidden_size * shard))
    act = "swiglu" if m.gated_mlp else "gelu"
    parts.add(pointwise(f"{name}.{act}", OpKind.ACTIVATION, T * up, c.dt, 1,
                        0.5 if m.gated_mlp else 1, 2 * T * up, act,
                        bwd_traffic=2.5 if m.gated_mlp else 3.0, flops_per_elem=8.0))
    parts.add_linear(linear(c, down_spec, 2 * T * f))
    up_c, down_c = linear_comm(c, up_spec), linear_comm(c, down_spec)
    parts.mlp_fwd_comm += [*up_c.forward, *down_c.forward]
    parts.mlp_bwd_comm += [*down_c.backward, *up_c.backward]
    parts.linears.update({f"{name}.up": (m.hidden_size, up), f"{name}.down": (f, m.hidden_size)})
