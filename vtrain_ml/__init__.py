"""vtrain-ml: plan LLM training runs -- simulate, calibrate, profile, predict, search.

Public API: `load_job`, `simulate`, `SimulationResult`, `Job`; `Surrogate` (lazily imported, it
needs the surrogate extra). The CLIs are `python -m vtrain_ml.<command>`.
"""

from __future__ import annotations

from typing import Any

from simulator import ConfigError, Job, SimulationResult, VTrainError, job_from_dict, load_job, simulate

__all__ = ["ConfigError", "Job", "SimulationResult", "Surrogate", "VTrainError", "job_from_dict",
           "load_job", "simulate"]


def __getattr__(name: str) -> Any:
    if name == "Surrogate":
        from surrogate.model import Surrogate

        return Surrogate
    raise AttributeError(f"module 'vtrain_ml' has no attribute {name!r}")
