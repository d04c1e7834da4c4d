"""vtrain-ml: plan LLM training runs -- simulate, calibrate, profile, predict, search.

Public API: `load_job`, `simulate`, `SimulationResult`, `Job`; `Surrogate` (lazily imported, it
needs the surrogate extra). The commands are console scripts `vtrain-<command>` (also
`python -m vtrain_ml.<command>`); `python -m vtrain_ml` lists them.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from simulator import ConfigError, Job, SimulationResult, VTrainError, job_from_dict, load_job, simulate

try:
    __version__ = version("vtrain-ml")
except PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"

__all__ = ["ConfigError", "Job", "SimulationResult", "Surrogate", "VTrainError", "job_from_dict",
           "load_job", "simulate"]


def __getattr__(name: str) -> Any:
    if name == "Surrogate":
        from surrogate.model import Surrogate

        return Surrogate
    raise AttributeError(f"module 'vtrain_ml' has no attribute {name!r}")
