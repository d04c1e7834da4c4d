"""`training.recompute_modules` against the model and the other fields, as Megatron-Core checks
them (core/transformer/transformer_config.py, `__post_init__`) plus the modules that would do
nothing in this model: Megatron ignores those silently, we refuse them so that a job file says
what runs. Which module exists where (simulator.graph.recompute): mla_up_proj in multi-latent
attention; moe, moe_act in MoE layers (moe_act only with the grouped GEMM); shared_experts in MoE
layers with shared experts; mlp in dense-MLP layers; layernorm where a norm is a separate module
(MLA's input norm, an MoE layer's pre-MLP norm; Transformer Engine fuses the others into the
next linear)."""

from __future__ import annotations

from simulator.job.enums import Fp8Recipe, Precision, Recompute, RecomputeModule
from simulator.job.layer_pattern import is_moe_layer
from simulator.job.precision import recipe_name
from simulator.job.specs import Job, ModelSpec, TrainingSpec

M = RecomputeModule


def _missing(job: Job) -> dict[RecomputeModule, str]:
    return missing_modules(job.model, job.training)


def missing_modules(m: ModelSpec, t: TrainingSpec) -> dict[RecomputeModule, str]:
    """Module -> what the model lacks for it (absent when the module applies)."""
    dense_layers = any(not is_moe_layer(m, i) for i in range(m.num_layers))
    needs = {
        M.MLA_UP_PROJ: (m.multi_latent_attention, "model.multi_latent_attention"),
        M.MOE: (m.is_moe, "an MoE model (model.num_experts)"),
        M.MOE_ACT: (m.is_moe, "an MoE model (model.num_experts)"),
        M.SHARED_EXPERTS: (m.is_moe and bool(m.moe_shared_expert_intermediate_size),
                           "shared experts (model.moe_shared_expert_intermediate_size)"),
        M.MLP: (dense_layers, "a layer with a dense MLP (every layer here is MoE)"),
        M.LAYERNORM: (m.multi_latent_attention or m.is_moe,
                      "a separate norm module (MLA or MoE layers; Transformer Engine fuses "
                      "this model's norms into the next linear)"),
    }
    out = {k: why for k, (ok, why) in needs.items() if not ok}
    if m.is_moe and not t.moe_grouped_gemm:
        out.setdefault(M.MOE_ACT, "training.moe_grouped_gemm: true (Megatron: moe_act is only "
                                  "supported with moe_grouped_gemm)")
    return out


def recompute_problems(job: Job) -> list[str]:
    t = job.training
    if t.recompute_modules is None:
        return []
    if t.recompute is not Recompute.SELECTIVE:
        return [f"training.recompute_modules is Megatron's --recompute-modules for selective "
                f"recompute (got recompute={t.recompute.value}); set recompute: selective or "
                f"remove recompute_modules"]
    missing = _missing(job)
    problems = [f"training.recompute_modules: {mod.value} needs {missing[mod]}; remove "
                f"{mod.value}" for mod in dict.fromkeys(t.recompute_modules) if mod in missing]
    lowp = {M.MOE_ACT, M.LAYERNORM} & set(t.recompute_modules)
    delayed = t.precision is Precision.FP8 and recipe_name(job) == Fp8Recipe.DELAYED.value
    if lowp and delayed:
        problems.append(f"training.recompute_modules: {', '.join(sorted(m.value for m in lowp))} "
                        f"is refused with fp8_recipe=delayed (Megatron: \"Delayed scaling does "
                        f"not support moe_act and layernorm recompute\"); use another fp8 recipe "
                        f"or remove them")
    return problems

