"""The memory-saving settings of Megatron's published recipes: `training.recompute_modules`,
`grad_reduce_in_fp32` and the precision-aware optimizer's dtypes.

Expected values are written out here from Megatron-Core's source, not read from the simulator:
- precision-aware optimizer (core/optimizer/optimizer_config.py, distrib_optimizer.py): Adam's
  moments at `exp_avg_dtype` / `exp_avg_sq_dtype`; Transformer Engine's FusedAdam keeps a bf16
  job's fp32 master weights as 16-bit remainders (`store_param_remainders`); an FP8 job with a
  current-scaling recipe keeps Megatron-Core's fp32 master weights; all sharded over dp;
- `grad_reduce_in_fp32: false`: a bf16 gradient buffer (2 bytes per parameter), the dp
  reduction moves bf16, the distributed optimizer casts its 1/dp shard to fp32 for the step;
- recompute modules: what each frees and re-runs (transformer_layer.py, moe/experts.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simulator import job_from_dict, simulate
from simulator.costs.blocks import cost_block
from simulator.errors import ConfigError
from simulator.graph.blocks import build_graph
from simulator.job.enums import CollectiveKind
from simulator.memory.states import stage_param_counts
from simulator.network.collectives import NetworkModel
from simulator.simulate import clear_caches, default_kernels
from tests.conftest import make_job
from tests.simulator_tests.test_moe import moe_job

S, H, F = 2048, 1024, 2816  # a small Llama-style layer


def llama_job(training: dict[str, Any] | None = None, parallel: dict[str, Any] | None = None,
              gpu: str = "h100-sxm-80gb") -> Any:
    return job_from_dict({
        "model": {"name": "mini-llama", "num_layers": 4, "hidden_size": H,
                  "num_attention_heads": 16, "ffn_hidden_size": F, "gated_mlp": True,
                  "vocab_size": 32000, "seq_length": S, "norm": "rmsnorm", "use_bias": False,
                  "position_embedding": "rope", "tied_embeddings": False, "hidden_dropout": 0.0,
                  "attention_dropout": 0.0},
        "training": {"global_batch_size": 16, "micro_batch_size": 1, "precision": "bf16",
                     "flash_attention": True, **(training or {})},
        "parallel": {"tp": 1, "pp": 1, "distributed_optimizer": True, **(parallel or {})},
        "cluster": {"gpu": gpu, "num_gpus": 8}})


def _stage(job: Any) -> Any:
    return simulate(job).stages[0].memory


# --- the precision-aware optimizer -------------------------------------------------------

def test_bf16_moments_over_a_distributed_optimizer_of_dp8_by_hand() -> None:
    """bf16 training, dp = 8: weights 2 + fp32 gradient buffer 4 stay whole; the shard holds
    bf16 exp_avg 2 + bf16 exp_avg_sq 2 + the master weights' 16-bit remainders 2 = 6 bytes over
    8 ranks (Megatron's default shard: 4 + 4 + 4 = 12)."""
    job = llama_job({"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"})
    n = stage_param_counts(job)[0]
    assert job.dp == 8
    assert _stage(job).optimizer_states_bytes == pytest.approx(n * 6 / 8, rel=1e-12)
    assert _stage(llama_job()).optimizer_states_bytes == pytest.approx(n * 12 / 8, rel=1e-12)
    assert _stage(job).gradients_bytes == pytest.approx(n * 4, rel=1e-12)


def test_fp8_current_scaling_keeps_fp32_master_weights_beside_low_moments() -> None:
    """fp8 tensorwise: Megatron-Core, not TE, holds the master weights (fp32, 4 bytes); fp8
    moments 1 + 1: 6 bytes over dp = 8."""
    job = llama_job({"precision": "fp8", "fp8_recipe": "tensorwise", "exp_avg_dtype": "fp8",
                     "exp_avg_sq_dtype": "fp8"})
    n = stage_param_counts(job)[0]
    assert _stage(job).optimizer_states_bytes == pytest.approx(n * (4 + 1 + 1) / 8, rel=1e-12)


def test_fp16_main_params_are_two_bytes() -> None:
    job = llama_job({"main_params_dtype": "fp16"})
    n = stage_param_counts(job)[0]
    assert _stage(job).optimizer_states_bytes == pytest.approx(n * (2 + 4 + 4) / 8, rel=1e-12)


# --- grad_reduce_in_fp32 -----------------------------------------------------------------

def test_bf16_gradient_buffer_halves_gradients_and_adds_the_fp32_shard_copy() -> None:
    job = llama_job({"grad_reduce_in_fp32": False})
    n = stage_param_counts(job)[0]
    mem = simulate(job).stages[0].memory
    assert mem.gradients_bytes == pytest.approx(2 * n, rel=1e-12)
    if mem.moment == "optimizer":
        assert mem.main_gradients_bytes == pytest.approx(4 * n / 8, rel=1e-12)
    default = _stage(llama_job())
    assert default.gradients_bytes == pytest.approx(4 * n, rel=1e-12)


def test_bf16_gradient_reduction_moves_half_the_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The data-parallel reduction of the gradients (the largest collective of the step here)
    carries 2 bytes per parameter."""
    seen: list[tuple[CollectiveKind, float]] = []
    original = NetworkModel.time

    def spy(self: NetworkModel, kind: CollectiveKind, nbytes: float, where: Any) -> float:
        seen.append((kind, nbytes))
        return original(self, kind, nbytes, where)

    monkeypatch.setattr(NetworkModel, "time", spy)
    sizes = {}
    for fp32 in (True, False):
        seen.clear()
        clear_caches()
        simulate(llama_job({"grad_reduce_in_fp32": fp32}, {"overlap_grad_reduce": False}))
        sizes[fp32] = max(b for k, b in seen
                          if k in (CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE))
    assert sizes[False] == pytest.approx(sizes[True] / 2, rel=1e-12)


# --- defaults leave results identical --------------------------------------------------

@pytest.mark.parametrize("explicit", [
    {"grad_reduce_in_fp32": True},
    {"exp_avg_dtype": "fp32", "exp_avg_sq_dtype": "fp32", "main_params_dtype": "fp32"},
])
def test_explicit_defaults_give_the_same_result(explicit: dict[str, Any]) -> None:
    assert simulate(llama_job(explicit)).to_dict() == simulate(llama_job()).to_dict()


def test_core_attn_alone_is_what_selective_always_was() -> None:
    plain = simulate(moe_job(training={"recompute": "selective"})).to_dict()
    named = simulate(moe_job(training={"recompute": "selective",
                                       "recompute_modules": ["core_attn"]})).to_dict()
    assert named == plain


def test_fp16_default_gradients_stay_16_bit() -> None:
    job = make_job(training={"grad_reduce_in_fp32": False})  # fp16: the default already
    assert simulate(job).to_dict() == simulate(make_job()).to_dict()


# --- recompute modules -------------------------------------------------------------------

def _layer(job: Any) -> Any:
    return build_graph(job).layer


def test_mlp_module_drops_the_dense_mlp_saved_tensors_but_its_input() -> None:
    """Dense SwiGLU MLP with TE's fused norm, bf16, tp = 1, T = s tokens: the norm's input
    (T h), fc1's input (T h), the SwiGLU input (T 2f) and fc2's input (T f) at 2 bytes, less the
    checkpoint's input (T h) kept: 2 (T h + 3 T f) bytes freed."""
    none = _layer(llama_job({"recompute": "selective", "recompute_modules": []}))
    mlp = _layer(llama_job({"recompute": "selective", "recompute_modules": ["mlp"]}))
    assert none.saved_bytes - mlp.saved_bytes == pytest.approx(2 * (S * H + 3 * S * F))
    assert {op.name for op in mlp.recompute} == {"post_attn_norm", "mlp.up", "mlp.swiglu",
                                                 "mlp.down"}
    assert none.recompute == ()


def test_moe_act_frees_fc2_input_of_the_dispatched_tokens() -> None:
    """Mini Mixtral, ep 8, top-2, balanced: 2 s tokens per rank reach the experts; fc2's bf16
    input is 2 s x ffn x 2 bytes."""
    none = _layer(moe_job(training={"recompute": "selective", "recompute_modules": []}))
    act = _layer(moe_job(training={"recompute": "selective", "recompute_modules": ["moe_act"]}))
    assert none.saved_bytes - act.saved_bytes == pytest.approx(2 * 2048 * 2048 * 2)
    assert none.moe_saved_bytes - act.moe_saved_bytes == pytest.approx(2 * 2048 * 2048 * 2)
    assert [op.name for op in act.recompute] == ["moe.swiglu"]


def test_moe_module_reruns_the_dispatch_all_to_alls() -> None:
    block = _layer(moe_job(training={"recompute": "selective", "recompute_modules": ["moe"]}))
    kinds = [op.kind for op in block.recompute_comm]
    assert kinds.count(CollectiveKind.ALL_TO_ALL) >= 2


@pytest.mark.parametrize("module", ["mlp", "moe_act"])
def test_a_recompute_module_adds_its_forward_time_to_the_backward(module: str) -> None:
    build = llama_job if module == "mlp" else (lambda t: moe_job(training=t))
    job_none = build({"recompute": "selective", "recompute_modules": []})
    job = build({"recompute": "selective", "recompute_modules": [module]})
    block, kernels = _layer(job), default_kernels(job)
    eff = job.hardware.efficiency.model_copy(update={"host_overhead_s": 0.0})
    with_module = cost_block(block, kernels, lambda op: 0.0, eff)
    without = cost_block(_layer(job_none), kernels, lambda op: 0.0, eff)
    forward_s = sum(kernels.cost(op).seconds for op in block.recompute)
    assert forward_s > 0
    assert with_module.recompute == pytest.approx(forward_s, rel=1e-9)
    assert with_module.backward_total - without.backward_total == pytest.approx(forward_s,
                                                                                rel=1e-6)


def test_mla_up_proj_frees_q_k_v_of_deepseek_layers() -> None:
    """DeepSeek-V3 layer, tp 1, s = 4096: Q (128 heads x 192), K (128 x 192), V (128 x 128) in
    bf16 are freed, plus what the up projections saved of their inputs."""
    job_d = {"model": {"preset": "deepseek-v3", "seq_length": 4096, "num_layers": 4,
                       "moe_layer_freq": [0, 1, 1, 1], "mtp_num_layers": 0},
             "training": {"global_batch_size": 64, "precision": "bf16", "flash_attention": True,
                          "recompute": "selective"},
             "parallel": {"ep": 8, "distributed_optimizer": True},
             "cluster": {"gpu": "b200", "num_gpus": 8}}
    none = build_graph(job_from_dict({**job_d, "training": {**job_d["training"],
                                                             "recompute_modules": []}}))
    up = build_graph(job_from_dict({**job_d, "training": {**job_d["training"],
                                                           "recompute_modules": ["mla_up_proj"]}}))
    qkv = 4096 * 128 * (192 + 192 + 128) * 2
    freed = np.array([a.saved_bytes - b.saved_bytes
                      for a, b in zip(none.layer_blocks, up.layer_blocks, strict=True)])
    assert np.all(freed >= qkv) and np.all(freed < qkv * 1.1)


# --- validation ------------------------------------------------------------------------

@pytest.mark.parametrize(("job", "line"), [
    (lambda: llama_job({"exp_avg_dtype": "bf16"}, {"distributed_optimizer": False}),
     "training.exp_avg_dtype=bf16 needs Megatron's distributed optimizer (its precision-aware "
     "optimizer is refused without it); set parallel.distributed_optimizer: true"),
    (lambda: llama_job({"main_params_dtype": "bf16"}),
     "training.main_params_dtype=bf16 is not one of Megatron's choices; use fp32 or fp16"),
    (lambda: llama_job({"recompute": "selective", "recompute_modules": ["mla_up_proj"]}),
     "training.recompute_modules: mla_up_proj needs model.multi_latent_attention; remove "
     "mla_up_proj"),
    (lambda: llama_job({"recompute": "selective", "recompute_modules": ["moe_act"]}),
     "training.recompute_modules: moe_act needs an MoE model (model.num_experts); remove moe_act"),
    (lambda: llama_job({"recompute_modules": ["mlp"]}),
     "training.recompute_modules is Megatron's --recompute-modules for selective recompute (got "
     "recompute=none); set recompute: selective or remove recompute_modules"),
    (lambda: moe_job(training={"recompute": "selective", "recompute_modules": ["mlp"]}),
     "training.recompute_modules: mlp needs a layer with a dense MLP (every layer here is MoE); "
     "remove mlp"),
    (lambda: make_job(training={"framework": "pytorch", "precision": "bf16",
                                "grad_reduce_in_fp32": False},
                      parallel={"tp": 1, "pp": 1, "dp": 8}),
     "training.grad_reduce_in_fp32 is Megatron-LM's DDP setting (framework=pytorch); remove it "
     "or use framework megatron-lm"),
])
def test_refused_settings_name_the_field_and_the_fix(job: Any, line: str) -> None:
    with pytest.raises(ConfigError) as err:
        job()
    assert str(err.value) == line
