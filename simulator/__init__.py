"""The exact, profile-driven training simulator (no dependency on the rest of vtrain-ml)."""

from simulator.errors import ConfigError, VTrainError
from simulator.loaders import job_from_dict, load_job
from simulator.result import SimulationResult
from simulator.simulate import simulate
from simulator.specs import Job

__all__ = ["ConfigError", "Job", "SimulationResult", "VTrainError", "job_from_dict", "load_job",
           "simulate"]
