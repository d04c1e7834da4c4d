"""User-facing error hierarchy.

Every error a user can cause derives from `VTrainError`; CLIs turn it into one line on stderr
and exit code 2. `assert` is reserved for internal invariants.
"""

from __future__ import annotations


class VTrainError(Exception):
    """Base class of every error caused by user input or environment."""


class ConfigError(VTrainError):
    """An invalid job, model, plan, cluster or hardware description."""


class InfeasibleConfigError(ConfigError):
    """A syntactically valid configuration that cannot run (e.g. no valid layout)."""


class ProfileError(VTrainError):
    """A hardware profile that is missing, malformed, or does not match the job."""


class DataError(VTrainError):
    """A malformed input data file (measurement CSV, samples, ...)."""
