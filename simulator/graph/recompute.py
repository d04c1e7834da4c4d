"""Selective recompute by module: Megatron-Core's `--recompute-modules` (core/transformer/
transformer_config.py `recompute_modules`; default ["core_attn"]) applied to one layer's ops.

Two mechanisms, as Megatron-Core runs them:
- Ordinary checkpoints (`tensor_parallel.checkpoint`): "core_attn" (transformer/attention.py,
  `_checkpointed_attention_forward`), "mlp" (transformer_layer.py, `recompute_mlp`: the dense MLP
  with Transformer Engine's fused pre-MLP norm), "moe" (moe/moe_layer.py, `moe_layer_recompute`:
  router, token dispatch, experts, shared experts) and "shared_experts". The module keeps only
  its input; what its ops saved is dropped; its forward, collectives included, runs again before
  its backward.
- Output-discarding checkpoints (`tensor_parallel.CheckpointWithoutOutput`): "mla_up_proj"
  (multi_latent_attention.py, `qkv_up_proj_and_rope_apply`: the up projections and rope; the
  Q, K, V the attention core saved are freed), "moe_act" (moe/experts.py: the experts'
  activation; the input fc2 saved is freed) and "layernorm" (transformer_layer.py: the input and
  pre-MLP norms where they are separate modules -- MLA's input norm, an MoE layer's pre-MLP
  norm; Transformer Engine fuses a dense layer's norms into the next linear, where Megatron's
  spec has `IdentityOp` and nothing is recomputed). The module's output is freed once its
  consumers ran; what the consumers saved of it goes; the module runs again before their
  backward. Under FP8 Megatron makes the consumers save the 16-bit original instead of their
  quantized copy (`set_save_original_input`) so that it can be freed: we free the consumers'
  saved bytes either way.
The recomputed tensors exist again during the layer's backward (`working_bytes`: the sum over
the modules, an upper bound since modules rematerialize one after another). The default,
["core_attn"] alone, keeps the path `recompute: selective` always took
(simulator.graph.dense._with_recompute).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.graph.attention import AttentionCore
from simulator.graph.layer_parts import LayerParts
from simulator.graph.ops import Block, Op, OpKind
from simulator.graph.primitives import ShapeContext
from simulator.job.enums import RecomputeModule
from simulator.job.layer_pattern import LayerKind
from simulator.job.specs import Job

M = RecomputeModule
Names = Callable[[str], bool]
MOE_PART = ("moe.", "shared_expert.")  # the ops of an MoE layer's MoE module


def _prefix(*prefixes: str) -> Names:
    return lambda name: name.startswith(prefixes)


def _none(name: str) -> bool:
    return False


def _dense_mlp(name: str) -> bool:
    """The dense MLP module with TE's fused pre-MLP norm (its bias-dropout-add is outside)."""
    return name == "post_attn_norm" or (name.startswith("mlp.")
                                        and not name.startswith("mlp.dropout_add"))


@dataclass(frozen=True)
class _Module:
    """One module of a layer: the forward ops it re-runs, the ops whose saved bytes it frees,
    the collectives it re-runs, and whether it keeps its input (an ordinary checkpoint's input:
    one [s, b, h] tensor nothing else saves)."""

    rerun: Callable[[Op], bool]
    freed: Names
    comm: Names
    keeps_input: bool = False


def _named(f: Names) -> Callable[[Op], bool]:
    return lambda op: f(op.name)


def _moe_act(op: Op) -> bool:
    return (op.name.startswith("moe.") and op.kind is OpKind.ACTIVATION) \
        or op.name == "moe.fc2.quantize_input"


def _modules(job: Job, kind: LayerKind) -> dict[RecomputeModule, _Module]:
    """The modules that exist in a layer of `kind` besides core_attn (the others do nothing
    there, as in Megatron)."""
    m = job.model
    out: dict[RecomputeModule, _Module] = {}
    norms: dict[str, Names] = {}
    if m.multi_latent_attention:
        ups = _prefix("mla.q_up", "mla.kv_up")
        out[M.MLA_UP_PROJ] = _Module(_named(_prefix("mla.q_up", "mla.kv_up", "mla.rope",
                                                    "mla.k_concat")), ups, ups)
        norms["input_norm"] = _prefix("mla.q_down", "mla.kv_down", "mla.q_proj")
    if kind.moe:
        norms["post_attn_norm"] = _prefix("moe.router", "shared_expert.up")
        out[M.MOE_ACT] = _Module(_moe_act, lambda n: n == "moe.fc2", _none)
        whole = _prefix(*MOE_PART)
        out[M.MOE] = _Module(_named(whole), whole, whole, keeps_input=True)
        if m.moe_shared_expert_intermediate_size:
            shared = _prefix("shared_expert.")
            out[M.SHARED_EXPERTS] = _Module(_named(shared), shared, shared)
    else:
        out[M.MLP] = _Module(_named(_dense_mlp), _dense_mlp, _prefix("mlp."), keeps_input=True)
    if norms:
        out[M.LAYERNORM] = _Module(lambda op: op.name in norms,
                                   lambda n: any(f(n) for f in norms.values()), _none)
    return out


def selective_block(job: Job, kind: LayerKind, fwd: tuple[Op, ...], bwd: tuple[Op, ...],
                    parts: LayerParts, core: AttentionCore, c: ShapeContext) -> Block:
    """The layer's block under `recompute: selective` with `training.recompute_modules`: what
    each micro-batch keeps saved and what runs again before the backward."""
    modules = job.training.recompute_modules
    chosen = {M.CORE_ATTN} if modules is None else set(modules)
    mods = {k: v for k, v in _modules(job, kind).items() if k in chosen}
    input_bytes = c.dt * c.sp_tokens * c.h
    core_ids = {id(op) for op in core.forward} if M.CORE_ATTN in chosen else set()
    # core_attn keeps Q, K, V as its inputs; mla_up_proj frees them
    freed = (sum(op.saved_bytes for op in core.forward) - core.inputs_bytes if core_ids else 0.0) \
        + (core.inputs_bytes if M.MLA_UP_PROJ in mods else 0.0)
    kept = input_bytes * sum(mod.keeps_input for mod in mods.values())
    gone = [op for op in fwd if any(mod.freed(op.name) for mod in mods.values())]
    freed += sum(op.saved_bytes for op in gone) - kept
    moe_freed = sum(op.saved_bytes for op in gone if op.name.startswith(MOE_PART)) \
        - (input_bytes if M.MOE in mods else 0.0)
    rerun = tuple(op for op in fwd
                  if id(op) in core_ids or any(mod.rerun(op) for mod in mods.values()))
    comm = [*core.forward_comm] if core_ids else []
    comm += [op for op in parts.forward_comm if any(mod.comm(op.name) for mod in mods.values())]
    full = sum(op.saved_bytes for op in fwd)
    # core_attn rematerializes its inputs' share too (as `recompute: selective` always counted)
    working = freed + (core.inputs_bytes if core_ids and M.MLA_UP_PROJ not in mods else 0.0)
    return Block(fwd, bwd, rerun, parts.forward_comm, parts.backward_comm, tuple(comm),
                 full - freed, working, moe_saved_bytes=parts.moe_saved_bytes - moe_freed)
