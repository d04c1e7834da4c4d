"""Optuna search over XGBoost hyperparameters, scored on a validation split by model shape.

The objective fits a `Surrogate` on the training part and returns the iteration-time MAPE on
held-out model shapes (never on the rows it was fitted on). Same choice lists in every trial;
a seeded TPE sampler makes the search reproducible.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import pandas as pd

from surrogate.encoding import OutOfSpaceWarning
from surrogate.splits import group_split

log = logging.getLogger(__name__)


def suggest(trial: Any) -> dict[str, Any]:
    return {
        "max_depth": trial.suggest_int("max_depth", 4, 12),
        "learning_rate": trial.suggest_float("learning_rate", 0.05, 0.6, log=True),
        "subsample": trial.suggest_float("subsample", 0.5, 1.0),
        "colsample_bytree": trial.suggest_float("colsample_bytree", 0.4, 1.0),
        "min_child_weight": trial.suggest_float("min_child_weight", 0.5, 20.0, log=True),
        "reg_lambda": trial.suggest_float("reg_lambda", 1e-3, 10.0, log=True),
        "max_bin": trial.suggest_categorical("max_bin", [64, 128, 256]),
    }


class Objective:
    """`objective(trial) -> float`: validation MAPE of iteration time for one parameter set."""

    def __init__(self, df: pd.DataFrame, hardware: Any, seed: int, n_estimators: int) -> None:
        train, valid = group_split(df, 0.2, seed + 7)
        self.train, self.valid = df.iloc[train], df.iloc[valid]
        self.hardware, self.seed, self.n_estimators = hardware, seed, n_estimators

    def __call__(self, trial: Any) -> float:
        from surrogate.model import Surrogate

        params = suggest(trial)
        model = Surrogate(seed=self.seed, n_estimators=self.n_estimators, **params)
        model.fit(self.train, self.hardware)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OutOfSpaceWarning)
            pred = model.predict(self.valid)["iteration_time_s"].to_numpy()
        actual = self.valid["iteration_time_s"].to_numpy()
        return float(np.mean(np.abs(pred - actual) / actual))


def tune(df: pd.DataFrame, hardware: Any, trials: int, seed: int = 0,
         n_estimators: int = 14) -> tuple[dict[str, Any], float]:
    """(best XGBoost parameters, their validation MAPE) after `trials` Optuna trials."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(Objective(df, hardware, seed, n_estimators), n_trials=trials)
    log.info("best of %d trials: %s (validation MAPE %.4f)", trials, study.best_params, study.best_value)
    return dict(study.best_params), float(study.best_value)
