"""Job files -> validated `Job`: the native YAML layout and vTrain's flat JSON config.

Native layout (YAML or JSON)::

    model: mt-nlg-530b            # a preset, {preset: name, <overrides>}, or a full model spec
    training: {global_batch_size: 1920, micro_batch_size: 1, precision: fp16, recompute: full}
    parallel: {tp: 8, pp: 35, dp: 12, schedule: 1f1b}
    cluster: {gpu: a100-80gb, num_gpus: 3360}

vTrain's flat layout (github.com/VIA-Research/vTrain, config/*.json) is detected by its keys and
mapped field by field (`VTRAIN_KEYS`); it describes a GPT model trained in fp16 with Megatron.
"""

from __future__ import annotations

import difflib
import logging
from pathlib import Path
from typing import Any

from simulator.catalog import load_model, read_yaml, resolve_hardware
from simulator.enums import Recompute
from simulator.errors import ConfigError
from simulator.specs import ClusterSpec, Job, ModelSpec, ParallelPlan, TrainingSpec, parse
from simulator.validation import validate_job

log = logging.getLogger(__name__)

NATIVE_SECTIONS = ("model", "training", "parallel", "cluster")

# vTrain key -> (section, native key); None = accepted and ignored (vTrain-internal paths).
VTRAIN_KEYS: dict[str, tuple[str, str] | None] = {
    "num_gpus": ("cluster", "num_gpus"),
    "gpu_name": ("cluster", "gpu"),
    "node_size": ("cluster", "gpus_per_node"),
    "inter_node_bandwidth": ("cluster", "inter_node_bandwidth_Gbps"),
    "intra_node_bandwidth": ("cluster", "intra_node_bandwidth_GBps"),
    "tensor_parallel_size": ("parallel", "tp"),
    "data_parallel_size": ("parallel", "dp"),
    "pipeline_parallel_size": ("parallel", "pp"),
    "pipeline_scheduling": ("parallel", "schedule"),
    "use_gradient_bucket": ("parallel", "overlap_grad_reduce"),
    "global_batch_size": ("training", "global_batch_size"),
    "micro_batch_size": ("training", "micro_batch_size"),
    "use_checkpoint": ("training", "recompute"),
    "num_layers": ("model", "num_layers"),
    "hidden_size": ("model", "hidden_size"),
    "num_attention_heads": ("model", "num_attention_heads"),
    "max_length": ("model", "seq_length"),
    "vocab_size": ("model", "vocab_size"),
    "trace_path": None,
}


def is_vtrain_config(data: dict[str, Any]) -> bool:
    return "tensor_parallel_size" in data or "gpu_name" in data


def load_job(source: str | Path | dict[str, Any]) -> Job:
    """Read a job from a file (native YAML/JSON or vTrain JSON) or a dict, and validate it."""
    if isinstance(source, dict):
        return job_from_dict(source)
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"job file {path} does not exist")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of keys (a job), got {type(data).__name__}")
    return job_from_dict(data)


def job_from_dict(data: dict[str, Any]) -> Job:
    """Validate a native or vTrain-style dict into a `Job`."""
    native = vtrain_to_native(data) if is_vtrain_config(data) else data
    unknown = [k for k in native if k not in NATIVE_SECTIONS]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, NATIVE_SECTIONS, n=1)
            hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise ConfigError(
            f"unknown top-level key {', '.join(hints)}; a job has {', '.join(NATIVE_SECTIONS)}"
        )
    for section in NATIVE_SECTIONS:
        if section not in native:
            raise ConfigError(f"missing section '{section}' in job")
    cluster = parse(ClusterSpec, native["cluster"], "cluster")
    job = Job(
        model=_model(native["model"]),
        training=parse(TrainingSpec, native["training"], "training"),
        parallel=parse(ParallelPlan, native["parallel"], "parallel"),
        cluster=cluster,
        hardware=resolve_hardware(cluster.gpu),
    )
    return validate_job(job)


def _model(spec: Any) -> ModelSpec:
    if isinstance(spec, str):
        return load_model(spec)
    if isinstance(spec, dict) and "preset" in spec:
        rest = {k: v for k, v in spec.items() if k != "preset"}
        return load_model(str(spec["preset"]), rest)
    return parse(ModelSpec, spec, "model")


def vtrain_to_native(data: dict[str, Any]) -> dict[str, Any]:
    """Map vTrain's flat keys onto the native sections (unknown keys get the closest match)."""
    native: dict[str, dict[str, Any]] = {s: {} for s in NATIVE_SECTIONS}
    native["model"] = {"name": "vtrain-gpt"}
    native["training"] = {"precision": "fp16"}
    for key, value in data.items():
        if key not in VTRAIN_KEYS:
            close = difflib.get_close_matches(key, list(VTRAIN_KEYS), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"unknown vTrain config key '{key}'{hint}")
        target = VTRAIN_KEYS[key]
        if target is None:
            log.info("ignoring vTrain key %s (vTrain-internal)", key)
            continue
        section, field = target
        native[section][field] = _vtrain_value(field, value)
    return native


def _vtrain_value(field: str, value: Any) -> Any:
    if field == "recompute":
        return (Recompute.FULL if value else Recompute.NONE).value
    if field == "schedule" and isinstance(value, str):
        return value.lower()
    return value
