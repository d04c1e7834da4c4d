"""The MoE / cp / precision record columns (surrogate.records): a job survives the trip through a
record exactly, a record's bad value is one ConfigError naming its column, a job a record
cannot hold is refused, an old table reads as dense jobs, and a model fits a MoE + cp sample."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.errors import ConfigError
from simulator.job.catalog import load_model
from simulator.job.enums import Precision
from simulator.job.specs import ClusterSpec, Job, ParallelPlan, TrainingSpec
from simulator.job.validation import validate_job
from simulator.simulate import simulate
from surrogate.features import DENSE_COLUMNS, JOB_COLUMNS, job_to_record, record_to_job, with_new_defaults
from surrogate.hardware import catalog_hardware
from surrogate.records import NEW_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted(p.stem for p in (ROOT / "data" / "models").glob("*.yaml")
                 if not p.stem.startswith("gpt-oss"))  # sliding windows: refused (test below)

# (gpu, GPUs, tp, cp, ep, expert tp, precision, sharding) per kind of model: every new
# dimension is exercised by some preset
_MOE_PLANS = [("h100-sxm-80gb", 16, 2, 2, 4, 1, "fp8", "optim"),
              ("gb200", 16, 2, 1, 8, 2, "fp4", None),
              ("b200", 16, 1, 2, 8, 1, "bf16", None)]
_DENSE_PLANS = [("h100-sxm-80gb", 16, 2, 2, 1, None, "fp8", None),
                ("gb200", 8, 1, 1, 1, None, "fp4", "optim_grads_params"),
                ("h200-141gb", 16, 4, 2, 1, None, "bf16", "optim")]


def _job(preset: str, i: int) -> Job:
    model = load_model(preset)
    gpu, n, tp, cp, ep, etp, precision, sharding = (_MOE_PLANS if model.is_moe else _DENSE_PLANS)[i % 3]
    if model.is_moe and model.num_experts is not None and model.num_experts % ep:
        ep = math.gcd(ep, model.num_experts)
    hw = catalog_hardware(gpu)
    job = Job(model=model, training=TrainingSpec(global_batch_size=8 * n // (tp * cp), precision=precision,
                                                 flash_attention=True),
              parallel=ParallelPlan(tp=tp, cp=cp, ep=ep, expert_tp=etp, sequence_parallel=tp > 1,
                                    data_parallel_sharding=sharding),
              cluster=ClusterSpec(gpu=hw.name, num_gpus=n), hardware=hw)
    return validate_job(job)


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_job_survives_the_trip_through_a_record_exactly(preset: str) -> None:
    job = _job(preset, PRESETS.index(preset))
    record = job_to_record(job)
    assert tuple(record) == JOB_COLUMNS
    again = record_to_job(record)
    assert job_to_record(again) == record
    a, b = simulate(job), simulate(again)
    assert (a.iteration_time_s, a.peak_memory_bytes) == (b.iteration_time_s, b.peak_memory_bytes)


def test_a_sliding_window_preset_is_refused_naming_the_field() -> None:
    hw = catalog_hardware("h100-sxm-80gb")
    job = validate_job(Job(model=load_model("gpt-oss-20b"),
                           training=TrainingSpec(global_batch_size=8, flash_attention=True),
                           parallel=ParallelPlan(ep=8), cluster=ClusterSpec(gpu=hw.name, num_gpus=8),
                           hardware=hw))
    with pytest.raises(ConfigError, match=r"model\.window_size=128 cannot be held"):
        job_to_record(job)


@pytest.mark.parametrize(("field", "value"), [("main_params_dtype", "fp16")])
def test_a_memory_knob_a_record_cannot_hold_is_refused_not_dropped(field: str, value: object) -> None:
    """A record without the field would read back as the default: a different job, silently."""
    job = _job("qwen3-30b-a3b", 0)
    job = job.model_copy(update={"training": TrainingSpec.model_validate(
        {**job.training.model_dump(), field: value, "recompute": "selective"})})
    with pytest.raises(ConfigError, match=rf"training\.{field}=.*cannot be held.*exact simulator"):
        job_to_record(job)


@pytest.mark.parametrize("grad", [None, True, False])
def test_the_gradient_buffer_and_adam_moment_dtypes_survive_the_trip(grad: bool | None) -> None:
    job = _job("qwen3-30b-a3b", 0)
    job = validate_job(job.model_copy(update={"training": TrainingSpec.model_validate({
        **job.training.model_dump(), "grad_reduce_in_fp32": grad, "exp_avg_dtype": "bf16",
        "exp_avg_sq_dtype": "bf16"})}))
    record = job_to_record(job)
    assert (record["grad_reduce_in_fp32"], record["exp_avg_dtype"]) == (
        "none" if grad is None else str(grad).lower(), "bf16")
    again = record_to_job(record)
    assert again.training.grad_reduce_in_fp32 is grad
    a, b = simulate(job), simulate(again)
    assert (a.iteration_time_s, a.peak_memory_bytes) == (b.iteration_time_s, b.peak_memory_bytes)


def test_the_closed_form_counts_the_bytes_the_memory_settings_save() -> None:
    """The surrogate's baseline memory moves by what simulator.job.param_bytes says: a 16-bit
    buffer and bf16 moments on the same job, sharded roles over dp x cp."""
    from simulator.job.param_bytes import param_bytes
    from simulator.memory.states import stage_param_counts
    from surrogate.encoding import feature_matrix
    from surrogate.hardware import catalog_hardware as hw_of

    base = _job("llama-3-8b", 2)  # h200, 16 GPUs, tp 4, cp 2, optim sharding
    low = validate_job(base.model_copy(update={"training": TrainingSpec.model_validate({
        **base.training.model_dump(), "grad_reduce_in_fp32": False, "exp_avg_dtype": "bf16",
        "exp_avg_sq_dtype": "bf16"})}))
    a, b = param_bytes(base), param_bytes(low)
    shard = base.dp * base.parallel.cp
    per_param = (b.replicated - a.replicated) + (b.sharded - a.sharded) / shard
    assert per_param < 0
    hardware = {base.cluster.gpu: hw_of(base.cluster.gpu)}
    names, x = feature_matrix(pd.DataFrame([job_to_record(base), job_to_record(low)]), hardware)
    column = list(names).index("state_bytes_delta")
    stage = float(stage_param_counts(base).max())
    assert x[0, column] == 0.0
    assert x[1, column] == pytest.approx(per_param * stage, rel=1e-6)


def test_a_layer_pattern_a_record_cannot_hold_is_refused() -> None:
    hw = catalog_hardware("h100-sxm-80gb")
    model = load_model("mixtral-8x7b").model_copy(update={"moe_layer_freq": (1, 0) * 16})
    job = Job(model=model, training=TrainingSpec(global_batch_size=8), parallel=ParallelPlan(),
              cluster=ClusterSpec(gpu=hw.name, num_gpus=8), hardware=hw)
    with pytest.raises(ConfigError, match="moe_layer_freq"):
        job_to_record(job)


@pytest.mark.parametrize(("column", "value"), [("cp_comm_type", "ring"), ("fp8_recipe", "fast"),
                                                ("data_parallel_sharding", "zero9"),
                                                ("moe_token_dispatcher", "deepep"), ("num_experts", -8),
                                                ("cp", 0), ("moe_first_dense_layers", 99),
                                                ("recompute_modules", 1 << 20), ("recompute_modules", 2.5)])
def test_a_bad_new_column_is_one_config_error_naming_it(column: str, value: object) -> None:
    record = {**job_to_record(_job("qwen3-30b-a3b", 0)), column: value}
    with pytest.raises(ConfigError, match=column.split("_")[0]) as info:
        record_to_job(record)
    assert column in str(info.value) or column.removeprefix("moe_") in str(info.value)


def test_recompute_modules_survive_the_trip_as_one_mask_column() -> None:
    """Selective recompute by module (Megatron's --recompute-modules) is a bit mask in a record:
    the job comes back with the same modules and simulates to the same numbers."""
    from simulator.job.enums import Recompute, RecomputeModule

    job = _job("deepseek-v3", 0)
    job = validate_job(job.model_copy(update={"training": job.training.model_copy(update={
        "recompute": Recompute.SELECTIVE,
        "recompute_modules": (RecomputeModule.MLA_UP_PROJ, RecomputeModule.MOE_ACT)}),
        "hardware": catalog_hardware("b200"), "cluster": job.cluster.model_copy(update={"gpu": "b200"})}))
    record = job_to_record(job)
    assert record["recompute_modules"] == (1 << list(RecomputeModule).index(RecomputeModule.MLA_UP_PROJ)
                                           | 1 << list(RecomputeModule).index(RecomputeModule.MOE_ACT))
    again = record_to_job(record)
    modules = set(again.training.recompute_modules or ())
    assert modules == {RecomputeModule.MLA_UP_PROJ, RecomputeModule.MOE_ACT}
    assert simulate(again).peak_memory_bytes == simulate(job).peak_memory_bytes


def test_a_record_saved_before_the_new_columns_is_the_dense_job() -> None:
    job = _job("llama-3-8b", 2)
    dense_job = validate_job(job.model_copy(update={
        "parallel": job.parallel.model_copy(update={"cp": 1, "data_parallel_sharding": None, "tp": 2}),
        "training": job.training.model_copy(update={"precision": Precision.BF16})}))
    record = job_to_record(dense_job)
    old = {k: record[k] for k in DENSE_COLUMNS}
    assert simulate(record_to_job(old)).iteration_time_s == simulate(dense_job).iteration_time_s
    table = with_new_defaults(pd.DataFrame([old]))
    assert {c: table[c].iloc[0] for c in NEW_COLUMNS} == {c: record[c] for c in NEW_COLUMNS}


def test_the_dispatch_overlap_survives_the_trip_and_is_drawn_only_where_megatron_allows_it() -> None:
    from surrogate.sampling import draw
    from surrogate.space import load_space

    job = _job("qwen3-30b-a3b", 0)
    job = validate_job(job.model_copy(update={"training": job.training.model_copy(
        update={"moe_overlap_ep_comm": True})}))
    record = job_to_record(job)
    assert record["moe_overlap_ep_comm"] is True
    assert simulate(record_to_job(record)).iteration_time_s == simulate(job).iteration_time_s
    space = load_space(ROOT / "data" / "spaces" / "moe_cp.yaml").model_copy(update={
        "hardware": ("h100-sxm-80gb",)})
    records = draw(space, {"h100-sxm-80gb": catalog_hardware("h100-sxm-80gb")}, 300, seed=2).records
    on = [r for r in records if r["moe_overlap_ep_comm"]]
    assert on, "the space lists true: some MoE plans must use it"
    assert all(r["ep"] > 1 and r["moe_token_dispatcher"] != "allgather" and r["recompute"] != "full"
               and (r["pp"] == 1 or r["schedule"] == "interleaved_1f1b") for r in on)
    assert any(r["ep"] > 1 and not r["moe_overlap_ep_comm"] for r in records)

def test_16_bit_adam_moments_are_drawn_only_where_the_optimizer_is_sharded_and_never_rejected() -> None:
    from surrogate.sampling import draw
    from surrogate.space import load_space

    space = load_space(ROOT / "data" / "spaces" / "moe_cp.yaml").model_copy(update={
        "hardware": ("h100-sxm-80gb",)})
    drawn = draw(space, {"h100-sxm-80gb": catalog_hardware("h100-sxm-80gb")}, 300, seed=3)
    assert not any("exp_avg" in reason for reason in drawn.rejections)
    low = [r for r in drawn.records if "bf16" in (r["exp_avg_dtype"], r["exp_avg_sq_dtype"])]
    assert low and all(r["distributed_optimizer"] or r["data_parallel_sharding"] not in ("none", "no_shard")
                       for r in low)
    assert any(r["grad_reduce_in_fp32"] == "false" for r in drawn.records)

def test_a_model_fits_a_tiny_moe_and_cp_sample_and_predicts_finite_values() -> None:
    from surrogate.dataset import simulate_records
    from surrogate.model import Surrogate
    from surrogate.sampling import draw
    from surrogate.space import Range, load_space

    space = load_space(ROOT / "data" / "spaces" / "moe_cp.yaml").model_copy(update={
        "hardware": ("h100-sxm-80gb", "gb200")})
    space = space.model_copy(update={"models": space.models.model_copy(update={
        "presets": ("qwen3-30b-a3b", "mixtral-8x7b"), "parameters": Range(min=1e9, max=8e9)})})
    hardware = {h.name: h for h in map(catalog_hardware, space.hardware)}
    records = draw(space, hardware, 60, seed=1).records
    assert any(r["num_experts"] for r in records) and any(r["cp"] > 1 for r in records)
    table = simulate_records(records, hardware)
    model = Surrogate(n_estimators=5, memory_estimators=5, n_jobs=1).fit(table, hardware)
    predicted = model.predict(table[list(JOB_COLUMNS)])
    assert np.isfinite(predicted[["iteration_time_s", "peak_memory_bytes"]].to_numpy()).all()
    one = model.predict_one(record_to_job(records[0], hardware))
    assert one["iteration_time_s"] == pytest.approx(predicted["iteration_time_s"].iloc[0], rel=1e-5)


def test_a_dense_table_takes_the_plain_path_with_the_same_features(monkeypatch) -> None:
    """`surrogate.extended.plain_values` (dense 16-bit tables, fast) equals the general path."""
    from surrogate import encoding

    hardware = {"a100-80gb": catalog_hardware("a100-80gb")}
    dense = validate_job(Job(model=load_model("llama-3-8b"), training=TrainingSpec(global_batch_size=64),
                             parallel=ParallelPlan(tp=2, pp=2, distributed_optimizer=True),
                             cluster=ClusterSpec(gpu="a100-80gb", num_gpus=16),
                             hardware=hardware["a100-80gb"]))
    table = pd.DataFrame([job_to_record(dense)] * 3)
    columns = {c: table[c].to_numpy() for c in JOB_COLUMNS}
    _, fast = encoding.feature_matrix(columns, hardware)
    monkeypatch.setattr(encoding, "is_plain", lambda *args: False)
    _, general = encoding.feature_matrix(columns, hardware)
    np.testing.assert_array_equal(fast, general)


def test_a_batch_without_the_new_columns_predicts_as_the_dense_jobs(tiny_model, tiny_samples) -> None:
    """The search's candidate batches built before the MoE / cp columns still predict."""
    from surrogate.dataset import read_samples

    df = read_samples(tiny_samples).head(20)
    full = tiny_model.model.predict_arrays({c: df[c].to_numpy() for c in JOB_COLUMNS})
    dense = tiny_model.model.predict_arrays({c: df[c].to_numpy() for c in DENSE_COLUMNS})
    np.testing.assert_array_equal(full[0], dense[0])
    np.testing.assert_array_equal(full[1], dense[1])
