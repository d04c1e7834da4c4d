"""Low-precision recipes: which combinations are refused, what the quantize kernels move, what
they cost against a faster GEMM, and the weight copies they add to memory."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from simulator import job_from_dict, simulate
from simulator.errors import ConfigError
from simulator.graph.blocks import build_graph
from simulator.graph.ops import OpKind
from simulator.graph.params import linear_weight_params
from simulator.job.layer_pattern import chunk_kind_counts
from simulator.simulate import clear_caches

GiB = 1024**3


def job(precision: str = "bf16", gpu: str = "b200", model: dict[str, Any] | None = None,
        training: dict[str, Any] | None = None, parallel: dict[str, Any] | None = None,
        num_gpus: int = 8) -> dict[str, Any]:
    base = {"name": "small-llama", "num_layers": 8, "hidden_size": 4096, "num_attention_heads": 32,
            "num_query_groups": 8, "ffn_hidden_size": 14336, "gated_mlp": True, "norm": "rmsnorm",
            "use_bias": False, "position_embedding": "rope", "tied_embeddings": False,
            "vocab_size": 128256, "seq_length": 4096, "hidden_dropout": 0.0, "attention_dropout": 0.0}
    return {"model": {**base, **(model or {})},
            "training": {"global_batch_size": 64, "micro_batch_size": 1, "precision": precision,
                         "flash_attention": True, **(training or {})},
            "parallel": {"tp": 1, "pp": 1, **(parallel or {})},
            "cluster": {"gpu": gpu, "num_gpus": num_gpus}}


@pytest.mark.parametrize(("data", "message"), [
    (job("fp4", "h100-sxm-80gb"), "precision=fp4 is not supported on h100-sxm-80gb; use fp16, "
                                  "bf16, fp8"),
    (job("fp8", "h100-sxm-80gb", training={"fp8_recipe": "mxfp8"}),
     "training.fp8_recipe=mxfp8 is not supported on h100-sxm-80gb (hopper); use one of blockwise, "
     "delayed, tensorwise"),
    (job("fp8", "a100-80gb"), "precision=fp8 is not supported on a100-80gb"),
    (job("bf16", training={"fp8_recipe": "delayed"}), "training.fp8_recipe=delayed needs "
                                                      "training.precision=fp8"),
    (job("fp8", training={"fp8_param_gather": True}), "training.fp8_param_gather=true needs sharded"),
    (job("fp8", "h100-sxm-80gb", training={"first_last_layers_bf16": True}),
     "first_last_layers_bf16 is refused with fp8_recipe=delayed"),
    (job("fp8", training={"fp8_dot_product_attention": True, "flash_attention": False}),
     "fp8_dot_product_attention=true needs flash_attention=true"),
    (job("fp8", training={"framework": "pytorch"}), "training.precision=fp8 is modelled with "
                                                    "Transformer Engine under framework megatron-lm"),
    (job(parallel={"tp": 2, "tp_comm_overlap": True}), "parallel.tp_comm_overlap=true needs "
                                                        "sequence_parallel=true"),
    (job(parallel={"data_parallel_sharding": "no_shard", "distributed_optimizer": True}),
     "parallel.distributed_optimizer=true is data_parallel_sharding=optim, not no_shard"),
    (job(training={"framework": "megatron-deepspeed"},
         parallel={"data_parallel_sharding": "optim_grads_params"}),
     "data_parallel_sharding=optim_grads_params is modelled for framework megatron-lm"),
    (job("fp8", training={"fp8_recipe": "tensorwise", "first_last_layers_bf16": True,
                          "num_layers_at_start_in_bf16": 9}),
     "training.num_layers_at_start_in_bf16=9 exceeds the layers per pipeline stage (8)"),
])
def test_unmodelled_combinations_are_refused_with_field_and_fix(data: dict[str, Any],
                                                                 message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        job_from_dict(data)


def quantize_bytes(data: dict[str, Any]) -> tuple[float, float]:
    """(quantize-kernel bytes, norm bytes) of one layer per micro-batch, from the graph."""
    layer = build_graph(job_from_dict(data)).layer
    ops = layer.forward + layer.backward
    return (sum(op.bytes for op in ops if op.kind is OpKind.QUANTIZE),
            sum(op.bytes for op in layer.forward if op.kind is OpKind.NORM))


def test_quantize_bytes_match_an_independent_count_for_mxfp8_on_blackwell() -> None:
    """MXFP8 (1x32 E8M0 scales, separate rowwise and columnwise copies, no amax pass): the
    attention projection's and MLP down's inputs and all four output gradients are quantized
    (read 2 bytes, write 2 x (1 + 1/32)); QKV's and MLP up's inputs are written quantized by
    their norm; each weight is cast once per iteration (m = 8 micro-batches here)."""
    data = job("fp8", training={"fp8_recipe": "mxfp8"})
    T, h, f, kv = 4096, 4096, 14336, 1024  # tokens, hidden, ffn, K/V width (8 groups x 128)
    per_elem = 2 + 2 * (1 + 1 / 32)
    inputs = T * h + T * f  # projection input, MLP down input
    grads = T * (h + 2 * kv) + T * h + T * 2 * f + T * h
    weights = h * (h + 2 * kv) + h * h + h * 2 * f + f * h
    expected = per_elem * (inputs + grads + weights / 8)
    quantized, norms = quantize_bytes(data)
    assert quantized == pytest.approx(expected, rel=1e-12)
    _, norms16 = quantize_bytes(job())
    # the two norms write 2 x (1 + 1/32) bytes per element instead of 2
    assert norms - norms16 == pytest.approx(2 * T * h * (2 * (1 + 1 / 32) - 2), rel=1e-12)


def test_current_scaling_reads_each_tensor_twice_and_hopper_writes_a_transpose() -> None:
    """Per-tensor current scaling on Hopper: amax pass + cast (read 4 bytes), FP8 data and its
    transpose (write 2); no fused norm (the scale needs the amax first)."""
    hopper, _ = quantize_bytes(job("fp8", "h100-sxm-80gb", training={"fp8_recipe": "tensorwise"}))
    blackwell, _ = quantize_bytes(job("fp8", "b200", training={"fp8_recipe": "tensorwise"}))
    delayed, _ = quantize_bytes(job("fp8", "h100-sxm-80gb", training={"fp8_recipe": "delayed"}))
    T, h, f, kv = 4096, 4096, 14336, 1024
    inputs = 3 * T * h + T * f
    grads = T * (h + 2 * kv) + T * h + T * 2 * f + T * h
    weights = h * (h + 2 * kv) + h * h + h * 2 * f + f * h
    assert hopper == pytest.approx(6 * (inputs + grads + weights / 8), rel=1e-12)
    assert blackwell == pytest.approx(5 * (inputs + grads + weights / 8), rel=1e-12)
    assert delayed < hopper  # one read, and the norms write the QKV / MLP up inputs


def speedup(model: dict[str, Any], low: str, recipe: dict[str, Any]) -> float:
    clear_caches()
    bf16 = simulate(job_from_dict(job(model=model))).iteration_time_s
    return bf16 / simulate(job_from_dict(job(low, model=model, training=recipe))).iteration_time_s


def test_fp8_speedup_depends_on_the_gemm_shapes_and_nvfp4_is_faster_again() -> None:
    small = {"hidden_size": 1024, "num_attention_heads": 8, "ffn_hidden_size": 3584,
             "seq_length": 1024, "vocab_size": 32768}
    big_fp8 = speedup({}, "fp8", {"fp8_recipe": "mxfp8"})
    small_fp8 = speedup(small, "fp8", {"fp8_recipe": "mxfp8"})
    assert 1.1 < big_fp8 < 2.0  # faster, below the 2x of the peak: quantize kernels and bf16 ops
    assert small_fp8 < big_fp8  # small GEMMs gain less
    assert speedup({}, "fp4", {}) > big_fp8  # NVFP4 faster again on Blackwell


def test_weight_copies_are_a_named_memory_term_and_fp8_param_gather_drops_the_16bit_copy() -> None:
    clear_caches()
    bf16 = simulate(job_from_dict(job())).stages[0].memory
    fp8 = simulate(job_from_dict(job("fp8", training={"fp8_recipe": "mxfp8"}))).stages[0].memory
    linear = 8 * linear_weight_params(job_from_dict(job()).model).dense.per_rank(1)
    assert bf16.low_precision_weights_bytes == 0
    assert fp8.low_precision_weights_bytes == pytest.approx(linear * 2 * (1 + 1 / 32))
    assert fp8.weights_bytes == bf16.weights_bytes
    gathered = simulate(job_from_dict(job("fp8", training={"fp8_recipe": "mxfp8", "fp8_param_gather": True},
                                          parallel={"distributed_optimizer": True}))).stages[0].memory
    assert gathered.weights_bytes == pytest.approx(bf16.weights_bytes - 2 * linear)
    assert gathered.low_precision_weights_bytes == fp8.low_precision_weights_bytes


def test_first_and_last_layers_in_bf16_by_global_layer_number() -> None:
    data = job("fp8", training={"fp8_recipe": "tensorwise", "first_last_layers_bf16": True,
                                "num_layers_at_start_in_bf16": 1, "num_layers_at_end_in_bf16": 2},
               model={"num_layers": 16}, parallel={"pp": 2, "virtual_stages": 2,
                                                   "schedule": "interleaved_1f1b"})
    kinds, counts = chunk_kind_counts(job_from_dict(data))
    assert [k.label for k in kinds] == ["dense", "dense+bf16"]  # the 16-bit kind last
    # model order of chunks: (stage 0, chunk 0), (stage 1, chunk 0), (stage 0, chunk 1), (1, 1)
    assert counts[1].tolist() == [[1, 0], [0, 2]]
    assert (counts.sum(axis=0) == 4).all()
    clear_caches()
    mixed = simulate(job_from_dict(data)).iteration_time_s
    pure = copy.deepcopy(data)
    pure["training"]["first_last_layers_bf16"] = False
    fp8 = simulate(job_from_dict(pure)).iteration_time_s
    pure["training"] = {k: v for k, v in pure["training"].items() if "bf16" not in k and "fp8" not in k}
    pure["training"]["precision"] = "bf16"
    assert fp8 < mixed < simulate(job_from_dict(pure)).iteration_time_s


def test_fp8_attention_runs_the_attention_at_the_fp8_peak() -> None:
    clear_caches()
    plain = job("fp8", training={"fp8_recipe": "delayed"}, gpu="h100-sxm-80gb",
                model={"num_layers": 2})
    fast = copy.deepcopy(plain)
    fast["training"]["fp8_dot_product_attention"] = True
    assert simulate(job_from_dict(fast)).iteration_time_s < simulate(job_from_dict(plain)).iteration_time_s


def test_mfu_of_a_low_precision_run_counts_against_the_16bit_peak() -> None:
    clear_caches()
    r = simulate(job_from_dict(job("fp8", training={"fp8_recipe": "mxfp8"})))
    peak16 = 2250e12 * 8
    assert r.mfu == pytest.approx(r.model_flops_per_iteration / (r.iteration_time_s * peak16))
