"""GPU specs by catalog name, memoized, for every surrogate module that turns names into specs.

Its own module because both the record layer (surrogate.features) and the physics
(surrogate.physics) need it, and the physics must not import the records.
"""

from __future__ import annotations

from functools import lru_cache

from simulator.job.catalog import resolve_hardware
from simulator.job.specs import HardwareSpec


@lru_cache(maxsize=32)
def catalog_hardware(name: str) -> HardwareSpec:
    """`resolve_hardware`, memoized: it re-reads the alias file on every call (~5 ms)."""
    return resolve_hardware(name)
