"""The Optuna study of a search: storage, create/resume, samplers, and the exact trials in it.

The study is the durable record of a search. Surrogate-scored trials come from
`study.optimize`; every exact simulation (the focused sample, each verified candidate) is added
as a trial of its own (`source` = "sample" or "exact", exact values, exact constraints), so the
sampler learns from exact values, a resumed or concurrent search sees every exact result, and
no finished trial is lost when a process is killed.
"""

from __future__ import annotations

import json
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from simulator.errors import ConfigError
from vtrain_ml.planner.config import Objective, SearchConfig
from vtrain_ml.planner.evaluation import Evaluation
from vtrain_ml.planner.objective import DIRECTIONS, constraint_values, objective_values
from vtrain_ml.planner.space import Candidate, SearchSpace
from vtrain_ml.planner.storage import open_storage

EXACT_SOURCES = ("sample", "exact")


def sampler_for(config: SearchConfig) -> optuna.samplers.BaseSampler:
    """TPE for one objective, NSGA-II for time versus cost; seeded. Both read the constraint
    values the objective sets on each trial."""
    if config.objective is Objective.PARETO:
        population = min(50, max(8, config.trials // 10))
        return optuna.samplers.NSGAIISampler(seed=config.seed, population_size=population)
    return optuna.samplers.TPESampler(seed=config.seed, multivariate=True, n_startup_trials=10)


def open_study(config: SearchConfig, resume: bool, hardware_hash: str | None = None) -> optuna.Study:
    """Create the study, or load it with `resume` (it must exist and match this search).

    hardware_hash: the content hash of the GPU spec; a recalibrated hardware file keeps its path
    (and so the study name) but changes every exact result, so resuming across it is refused.
    """
    storage = open_storage(config.storage_url())
    name = config.study_name()
    sampler = sampler_for(config)
    if resume:
        try:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        except KeyError:
            raise ConfigError(f"no study '{name}' in {config.storage_url()} to resume; "
                              f"run without --resume to start it") from None
        stored = study.user_attrs.get("space_hash")
        if stored != config.space_hash():
            raise ConfigError(f"study '{name}' was created by a different search (space hash {stored}, "
                              f"this one {config.space_hash()}); use another --study name")
        stored_hw = study.user_attrs.get("hardware_hash")
        if hardware_hash and stored_hw and stored_hw != hardware_hash:
            raise ConfigError(f"study '{name}' was run on hardware {config.hardware} with hash {stored_hw}; "
                              f"it now hashes {hardware_hash} (recalibrated?); use another --study name")
        return study
    try:
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                    directions=list(DIRECTIONS[config.objective]))
    except optuna.exceptions.DuplicatedStudyError:
        raise ConfigError(f"study '{name}' already exists in {config.storage_url()}; pass --resume to "
                          f"continue it, or --study NAME to start another") from None
    study.set_user_attr("space_hash", config.space_hash())
    if hardware_hash:
        study.set_user_attr("hardware_hash", hardware_hash)
    study.set_user_attr("config", json.loads(config.model_dump_json()))
    return study


def stored_config(url: str, name: str) -> dict[str, Any]:
    """The search settings a study was created with (to resume it by name alone)."""
    try:
        study = optuna.load_study(study_name=name, storage=open_storage(url))
    except KeyError:
        raise ConfigError(f"no study '{name}' in {url} to resume; run without --resume to start it") from None
    config = study.user_attrs.get("config")
    if not isinstance(config, dict):
        raise ConfigError(f"study '{name}' in {url} was not created by vtrain_ml.search")
    return config


def distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    return {k.name: k.distribution() for k in space.searched}


def record_exact(study: optuna.Study, space: SearchSpace, candidate: Candidate, exact: Evaluation,
                 source: str, predicted: Evaluation | None = None) -> None:
    """Add one exact simulation to the study as a finished trial with exact values."""
    config = space.config
    constraints = constraint_values(config, space.hardware.memory_bytes, exact)
    searched = {k.name: candidate.params[k.name] for k in space.searched}
    attrs: dict[str, Any] = {"source": source, "key": candidate.key, "exact": exact.to_dict(),
                             "constraints": list(constraints)}
    if predicted is not None:
        attrs["predicted"] = predicted.to_dict()
    study.add_trial(optuna.trial.create_trial(
        params=searched, distributions=distributions(space),
        values=list(objective_values(config.objective, exact)), user_attrs=attrs,
        constraints={str(i): c for i, c in enumerate(constraints)}))


def complete_trials(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def exact_trials(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in trials if t.user_attrs.get("source") in EXACT_SOURCES]


def surrogate_trials(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in trials if t.user_attrs.get("source") == "surrogate"]


def trial_exact(trial: FrozenTrial) -> Evaluation:
    return Evaluation.from_dict(trial.user_attrs["exact"])
