"""The surrogate oracle: the XGBoost surrogate ranks every layout, the simulator verifies the best.

All statically feasible layouts of a shape at every GPU count are predicted in one batch
(`surrogate.model.Surrogate.predict`); per count, the `verify` best predicted plans that are
predicted to fit are simulated exactly and the fastest that really fits is the level -- its
time is the simulator's, as in the layout search's periodic exact verification
(`vtrain_ml.planner.verify`). When none of them fits, the next `verify` are tried, up to
`rounds` times, before the count is declared not fitting.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.errors import ConfigError
from vtrain_ml.scheduler.curve import LevelPlan
from vtrain_ml.scheduler.layouts import Cluster, Layout, LayoutBuilder, LayoutSpace
from vtrain_ml.scheduler.oracle import Levels, Oracle, simulate_layout


class SurrogateOracle(Oracle):
    name = "surrogate"

    def __init__(self, cluster: Cluster, model: Any, space: LayoutSpace | None = None,
                 cache: Any = None, verify: int = 2, rounds: int = 3, model_id: str = "") -> None:
        super().__init__(cluster, space, cache, n_jobs=1)  # one batch per shape; XGBoost threads
        self.model = model
        self.verify = verify
        self.rounds = rounds
        self.model_id = model_id

    @classmethod
    def load(cls, folder: str | Path, cluster: Cluster, **kwargs: Any) -> SurrogateOracle:
        """A saved surrogate folder (`python -m vtrain_ml.surrogate train --out FOLDER`)."""
        from surrogate.model import Surrogate

        meta = Path(folder) / "metadata.json"
        if not meta.is_file():
            raise ConfigError(f"--surrogate {folder} is not a trained surrogate folder (no metadata.json); "
                              f"train one with python -m vtrain_ml.surrogate generate/train")
        model = Surrogate.load(folder)
        if cluster.hardware.name not in model.hardware_:
            name = cluster.hardware.name
            raise ConfigError(f"the surrogate in {folder} was trained for {', '.join(model.hardware_)}, "
                              f"not {name}; retrain it with --hardware {name}")
        digest = hashlib.sha256(meta.read_bytes()).hexdigest()[:16]
        return cls(cluster, model, model_id=digest, **kwargs)

    def settings(self) -> dict[str, Any]:
        return {"model": self.model_id, "verify": self.verify, "rounds": self.rounds}

    def _predict(self, builder: LayoutBuilder, layouts: list[Layout]) -> pd.DataFrame:
        from surrogate.features import job_to_record

        records = pd.DataFrame([job_to_record(builder.job(lay)) for lay in layouts])
        with warnings.catch_warnings():
            # GPU counts below a node lie outside the default sampling space; the exact
            # verification, not this warning, guards the chosen plan
            warnings.simplefilter("ignore", UserWarning)
            return self.model.predict(records)

    def evaluate(self, builder: LayoutBuilder, counts: Sequence[int]) -> tuple[Levels, dict[str, Any]]:
        pairs = [(n, lay) for n in counts for lay in builder.candidates(n)]
        out: Levels = dict.fromkeys(counts)
        if not pairs:
            return out, {"exact_simulations": 0, "predictions": 0}
        table = self._predict(builder, [lay for _, lay in pairs])
        table["count"] = [n for n, _ in pairs]
        table["i"] = np.arange(len(pairs))
        ranked = table[table["fits_in_memory"]].sort_values(["count", "iteration_time_s", "i"])
        sims, errors = 0, []
        for count, group in ranked.groupby("count", sort=True):
            best: LevelPlan | None = None
            order = list(group["i"])
            for start in range(0, min(len(order), self.verify * self.rounds), self.verify):
                for i in order[start:start + self.verify]:
                    layout = pairs[i][1]
                    seconds, peak, fits = simulate_layout(builder, layout)
                    sims += 1
                    errors.append(abs(float(table["iteration_time_s"].iloc[i]) / seconds - 1))
                    if fits and (best is None or seconds < best.iteration_time_s):
                        best = LevelPlan(int(str(count)), layout, seconds, seconds, peak)
                if best is not None:
                    break
            out[int(str(count))] = best
        info = {"exact_simulations": sims, "predictions": len(pairs),
                "verified_time_mape_pct": 100 * float(np.mean(errors)) if errors else None}
        return out, info
