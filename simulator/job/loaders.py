"""Job files -> validated `Job`: the native YAML/JSON layout and vTrain's flat JSON config.

Native layout (YAML or JSON)::

    model: mt-nlg-530b            # a preset, {preset: name, <overrides>}, or a full model spec
    training: {global_batch_size: 1920, micro_batch_size: 1, precision: fp16, recompute: full}
    parallel: {tp: 8, pp: 35, dp: 12, schedule: 1f1b}
    cluster: {gpu: a100-80gb, num_gpus: 3360}

vTrain's flat layout (github.com/VIA-Research/vTrain, config/*.json) is detected by its keys and
read with vTrain's semantics (`simulator.job.vtrain_config`: defaults, derived sizes, its assertions).
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.job.catalog import load_model, read_yaml, resolve_hardware
from simulator.job.specs import ClusterSpec, Job, ModelSpec, ParallelPlan, TrainingSpec, parse
from simulator.job.validation import validate_job
from simulator.job.vtrain_config import VTRAIN_KEYS, is_vtrain_config, read_vtrain

log = logging.getLogger(__name__)

NATIVE_SECTIONS = ("model", "training", "parallel", "cluster")

__all__ = ["NATIVE_SECTIONS", "VTRAIN_KEYS", "JobFile", "is_vtrain_config", "job_file_from_dict",
           "job_from_dict", "load_job", "read_job"]


@dataclass(frozen=True)
class JobFile:
    """A validated job and what the loader decided on the user's behalf (e.g. the values vTrain's
    rules derive); CLIs print the notes with the result."""

    job: Job
    notes: tuple[str, ...] = ()
    vtrain: bool = False  # read from vTrain's flat format


def read_job(source: str | Path | dict[str, Any]) -> JobFile:
    """A job from a file (native YAML/JSON or vTrain JSON) or a dict, validated, with notes.

    Errors from a file name the file."""
    if isinstance(source, dict):
        return job_file_from_dict(source)
    path = Path(source)
    if path.is_dir():
        raise ConfigError(f"job file {path} is a directory; give a .yaml or .json job file "
                          f"(python -m vtrain_ml.simulate {path} simulates every file in it)")
    if not path.is_file():
        raise ConfigError(f"job file {path} does not exist")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of keys (a job), got {type(data).__name__}")
    try:
        return job_file_from_dict(data)
    except ConfigError as exc:
        raise type(exc)(f"{path}: {exc}") from None


def load_job(source: str | Path | dict[str, Any]) -> Job:
    """Read a job from a file (native YAML/JSON or vTrain JSON) or a dict, and validate it."""
    loaded = read_job(source)
    for note in loaded.notes:
        log.info("%s", note)
    return loaded.job


def job_from_dict(data: dict[str, Any]) -> Job:
    """Validate a native or vTrain-style dict into a `Job`."""
    return job_file_from_dict(data).job


def job_file_from_dict(data: dict[str, Any]) -> JobFile:
    """Validate a native or vTrain-style dict into a `JobFile` (the job and the loader's notes)."""
    if is_vtrain_config(data):
        native, notes = read_vtrain(data)
        return JobFile(_native_job(native), notes, vtrain=True)
    return JobFile(_native_job(data))


def _native_job(native: dict[str, Any]) -> Job:
    unknown = [k for k in native if k not in NATIVE_SECTIONS]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, NATIVE_SECTIONS, n=1)
            if not close:
                close = difflib.get_close_matches(key, VTRAIN_KEYS, n=1)
            hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise ConfigError(
            f"unknown top-level key {', '.join(hints)}; a job has {', '.join(NATIVE_SECTIONS)} "
            f"(or is a flat vTrain config)"
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
