"""Stand-in surrogates with the `surrogate.model.Surrogate` interface (fit(df) / predict(df)).

They let the search machinery be tested without training XGBoost: `NoisyOracle` answers with the
exact simulator times a fixed, deterministic error per job, so a test controls how wrong the
surrogate is; `Constant` is deliberately useless.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pandas as pd

from simulator.simulate import simulate
from surrogate.features import record_to_job

_EXACT: dict[str, tuple[float, float, bool]] = {}  # simulator answers, shared across tests (pure)


class NoisyOracle:
    def __init__(self, error: float = 0.1) -> None:
        self.error = error
        self.fit_rows_: list[int] = []


    def fit(self, df: pd.DataFrame) -> NoisyOracle:
        self.fit_rows_.append(len(df))
        return self

    def _noise(self, record: dict[str, Any]) -> float:
        digest = hashlib.sha256(repr(sorted(record.items())).encode()).digest()
        return 1.0 + self.error * (digest[0] / 127.5 - 1.0)

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        rows = []
        for record in df.to_dict(orient="records"):
            key = repr(sorted(record.items()))
            if key not in _EXACT:
                result = simulate(record_to_job(record))
                _EXACT[key] = (result.iteration_time_s, result.peak_memory_bytes, result.fits_in_memory)
            time_s, peak, fits = _EXACT[key]
            k = self._noise(record)
            rows.append({"iteration_time_s": time_s * k, "peak_memory_bytes": peak * k,
                         "fits_in_memory": fits})
        return pd.DataFrame(rows, index=df.index)


class Constant:
    def fit(self, df: pd.DataFrame) -> Constant:
        return self

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"iteration_time_s": 1.0, "peak_memory_bytes": 1e9, "fits_in_memory": True},
                            index=df.index)
