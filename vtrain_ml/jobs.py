"""Job helpers for the face: command-line overrides of a loaded job (hardware, price, layout),
validated again exactly as a job file is, and the variants of several values to compare.

Layout rules follow Megatron-LM's launcher: the data-parallel size is what the GPUs leave,
`dp = num_gpus / (tp * cp * pp)`. So overriding tp, cp or pp (without dp) re-derives dp from the
job's GPU count; overriding dp (without the GPU count) makes the GPU count tp * cp * pp * dp.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.job.catalog import resolve_hardware
from simulator.job.loaders import load_job
from simulator.job.specs import ClusterSpec, Job, ParallelPlan, TrainingSpec, parse
from simulator.job.validation import validate_job

# override field -> (job section, field of that section)
LAYOUT_FIELDS: dict[str, tuple[str, str]] = {
    "num_gpus": ("cluster", "num_gpus"),
    "tp": ("parallel", "tp"),
    "pp": ("parallel", "pp"),
    "dp": ("parallel", "dp"),
    "cp": ("parallel", "cp"),
    "ep": ("parallel", "ep"),
    "virtual_stages": ("parallel", "virtual_stages"),
    "schedule": ("parallel", "schedule"),
    "sequence_parallel": ("parallel", "sequence_parallel"),
    "distributed_optimizer": ("parallel", "distributed_optimizer"),
    "overlap_grad_reduce": ("parallel", "overlap_grad_reduce"),
    "overlap_param_gather": ("parallel", "overlap_param_gather"),
    "micro_batch_size": ("training", "micro_batch_size"),
    "global_batch_size": ("training", "global_batch_size"),
    "recompute": ("training", "recompute"),
    "precision": ("training", "precision"),
    "flash_attention": ("training", "flash_attention"),
    "price_per_gpu_hour_usd": ("cluster", "price_per_gpu_hour_usd"),
    "fp8_recipe": ("training", "fp8_recipe"),
    "fp4_recipe": ("training", "fp4_recipe"),
    "fp8_param_gather": ("training", "fp8_param_gather"),
    "first_last_layers_bf16": ("training", "first_last_layers_bf16"),
    "fp8_dot_product_attention": ("training", "fp8_dot_product_attention"),
    "cuda_graphs": ("training", "cuda_graphs"),
    "data_parallel_sharding": ("parallel", "data_parallel_sharding"),
    "tp_comm_overlap": ("parallel", "tp_comm_overlap"),
}
# the command-line flag of each override, for labels and messages
FLAGS: dict[str, str] = {
    "num_gpus": "--num-gpus", "tp": "--tp", "pp": "--pp", "dp": "--dp", "cp": "--cp", "ep": "--ep",
    "virtual_stages": "--virtual-stages", "schedule": "--schedule",
    "sequence_parallel": "--sequence-parallel", "distributed_optimizer": "--distributed-optimizer",
    "overlap_grad_reduce": "--overlap-grad-reduce", "overlap_param_gather": "--overlap-param-gather",
    "micro_batch_size": "--micro-batch",
    "global_batch_size": "--global-batch", "recompute": "--recompute", "precision": "--precision",
    "flash_attention": "--flash-attention", "price_per_gpu_hour_usd": "--price",
    "hardware": "--hardware", "train_tokens": "--train-tokens",
    "fp8_recipe": "--fp8-recipe", "fp4_recipe": "--fp4-recipe",
    "fp8_param_gather": "--fp8-param-gather", "first_last_layers_bf16": "--first-last-layers-bf16",
    "fp8_dot_product_attention": "--fp8-dot-product-attention", "cuda_graphs": "--cuda-graphs",
    "data_parallel_sharding": "--data-parallel-sharding", "tp_comm_overlap": "--tp-comm-overlap",
}


@dataclass(frozen=True)
class Overrides:
    """Values that replace a job's (None = keep the job's)."""

    hardware: str | None = None
    train_tokens: float | None = None
    num_gpus: int | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    cp: int | None = None
    ep: int | None = None
    virtual_stages: int | None = None
    schedule: str | None = None
    sequence_parallel: bool | None = None
    distributed_optimizer: bool | None = None
    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    recompute: str | None = None
    precision: str | None = None
    flash_attention: bool | None = None
    price_per_gpu_hour_usd: float | None = None
    fp8_recipe: str | None = None
    fp4_recipe: str | None = None
    fp8_param_gather: bool | None = None
    first_last_layers_bf16: bool | None = None
    fp8_dot_product_attention: bool | None = None
    cuda_graphs: str | None = None
    data_parallel_sharding: str | None = None
    tp_comm_overlap: bool | None = None

    def given(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def label(self) -> str:
        """The command-line flags of the given values, e.g. "--tp 4 --recompute full"."""
        parts = []
        for key, value in self.given().items():
            if isinstance(value, bool):
                parts.append(FLAGS[key] if value else FLAGS[key].replace("--", "--no-", 1))
            else:
                parts.append(f"{FLAGS[key]} {value}")
        return " ".join(parts)


def with_overrides(job: Job, hardware: str | None = None, price: float | None = None,
                   train_tokens: float | None = None) -> Job:
    """`job` with another hardware (name or file), price or token budget; validated again."""
    return apply(job, Overrides(hardware=hardware, price_per_gpu_hour_usd=price, train_tokens=train_tokens))


def apply(job: Job, overrides: Overrides) -> Job:
    """The job with `overrides`, every section re-validated as a job file's would be."""
    given = overrides.given()
    if not given:
        return job
    sections: dict[str, dict[str, Any]] = {
        "training": job.training.model_dump(mode="json"),
        "parallel": job.parallel.model_dump(mode="json"),
        "cluster": job.cluster.model_dump(mode="json"),
    }
    for key, value in given.items():
        if key in LAYOUT_FIELDS:
            section, name = LAYOUT_FIELDS[key]
            sections[section][name] = value
    _rederive_layout(sections, given)
    hardware = job.hardware
    if overrides.hardware is not None:
        hardware = resolve_hardware(overrides.hardware)
        sections["cluster"]["gpu"] = overrides.hardware
    if overrides.train_tokens is not None:
        sections["training"]["train_tokens"] = overrides.train_tokens
    where = overrides.label() or "overrides"
    try:
        updated = Job(model=job.model, hardware=hardware,
                      training=parse(TrainingSpec, sections["training"], "training"),
                      parallel=parse(ParallelPlan, sections["parallel"], "parallel"),
                      cluster=parse(ClusterSpec, sections["cluster"], "cluster"))
        return validate_job(updated)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _rederive_layout(sections: dict[str, dict[str, Any]], given: Mapping[str, Any]) -> None:
    parallel, cluster = sections["parallel"], sections["cluster"]
    if "dp" in given:
        if "num_gpus" not in given:
            cluster["num_gpus"] = (int(parallel["tp"]) * int(parallel.get("cp", 1))
                                   * int(parallel["pp"]) * int(given["dp"]))
    elif {"tp", "pp", "cp", "num_gpus"} & set(given):
        parallel["dp"] = None  # re-derived: num_gpus / (tp * cp * pp)
    if "virtual_stages" in given and given["virtual_stages"] > 1 and "schedule" not in given:
        parallel["schedule"] = "interleaved_1f1b"


def load_with_overrides(path: str | Path, **overrides: Any) -> Job:
    return with_overrides(load_job(path), **overrides)


@dataclass(frozen=True)
class Sweep:
    """Several values per override: their product is the set of variants to compare."""

    values: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def variants(self) -> Iterator[Overrides]:
        keys = list(self.values)
        for combo in itertools.product(*(self.values[k] for k in keys)):
            yield replace(Overrides(), **dict(zip(keys, combo, strict=True)))

    @property
    def size(self) -> int:
        n = 1
        for v in self.values.values():
            n *= len(v)
        return n
