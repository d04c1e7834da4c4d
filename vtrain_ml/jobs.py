"""Job helpers for the face: load a job and apply command-line overrides, re-validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.catalog import resolve_hardware
from simulator.loaders import load_job
from simulator.specs import Job
from simulator.validation import validate_job


def with_overrides(job: Job, hardware: str | None = None, price: float | None = None,
                   train_tokens: float | None = None) -> Job:
    """`job` with another hardware (name or file), price or token budget; validated again."""
    update: dict[str, Any] = {}
    cluster = job.cluster
    if hardware is not None:
        update["hardware"] = resolve_hardware(hardware)
        cluster = cluster.model_copy(update={"gpu": hardware})
    if price is not None:
        cluster = cluster.model_copy(update={"price_per_gpu_hour_usd": price})
    update["cluster"] = cluster
    if train_tokens is not None:
        update["training"] = job.training.model_copy(update={"train_tokens": train_tokens})
    return validate_job(job.model_copy(update=update))


def load_with_overrides(path: str | Path, **overrides: Any) -> Job:
    return with_overrides(load_job(path), **overrides)
