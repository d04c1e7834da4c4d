"""nccl-tests all-reduce tables (size -> time per group size), read once and interpolated."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.errors import ProfileError

_FILE = re.compile(r"AR_GPU(\d+)_.*\.csv$")


@dataclass(frozen=True)
class NcclTable:
    """Out-of-place all-reduce times: `sizes[n]` bytes -> `times[n]` seconds for n GPUs."""

    sizes: dict[int, np.ndarray]
    times: dict[int, np.ndarray]

    def covers(self, n: int) -> bool:
        return n in self.sizes

    def all_reduce_s(self, n: int, nbytes: float) -> float:
        """Log-log interpolation inside the table; below it the smallest entry's time scaled
        toward latency (never above it); above it the largest entry's bus bandwidth."""
        sizes, times = self.sizes[n], self.times[n]
        if nbytes <= sizes[0]:
            return float(times[0] * max(0.25, nbytes / sizes[0]) ** 0.5)
        if nbytes >= sizes[-1]:
            return float(times[-1] * nbytes / sizes[-1])
        return float(np.exp(np.interp(np.log(nbytes), np.log(sizes), np.log(times))))


@lru_cache(maxsize=8)
def load_nccl_table(folder: str) -> NcclTable:
    path = Path(folder)
    if not path.is_dir():
        raise ProfileError(f"NCCL table folder {folder} does not exist")
    sizes: dict[int, np.ndarray] = {}
    times: dict[int, np.ndarray] = {}
    for file in sorted(path.glob("*.csv")):
        match = _FILE.search(file.name)
        if not match:
            continue
        data = np.loadtxt(file, delimiter=",", skiprows=1, usecols=(0, 3))
        order = np.argsort(data[:, 0])
        sizes[int(match.group(1))] = data[order, 0]
        times[int(match.group(1))] = data[order, 1] * 1e-9
    if not sizes:
        raise ProfileError(f"no AR_GPU<n>_*.csv tables in {folder}")
    return NcclTable(sizes, times)
