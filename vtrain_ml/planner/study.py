"""The Optuna study of a search: storage, create/resume, samplers, and the exact trials in it.

The study is the durable record of a search. Surrogate-scored trials come from
`study.optimize`; every exact simulation (the focused sample, each verified candidate) is added
as a trial of its own (`source` = "sample" or "exact", exact values, exact constraints), so the
sampler learns from exact values, a resumed or concurrent search sees every exact result, and
no finished trial is lost when a process is killed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
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

EXACT_SOURCES = ("sample", "exact", "baseline")


def sampler_for(config: SearchConfig) -> optuna.samplers.BaseSampler:
    """TPE for one objective, NSGA-II for time versus cost; seeded. Both read the constraint
    values the objective sets on each trial."""
    if config.objective is Objective.PARETO:
        population = min(50, max(8, config.trials // 10))
        return optuna.samplers.NSGAIISampler(seed=config.seed, population_size=population)
    return optuna.samplers.TPESampler(seed=config.seed, multivariate=True, n_startup_trials=10)


@dataclass(frozen=True)
class OpenedStudy:
    """The study a search works on, under the name it really has, and what the user should know
    about it (None: a new study)."""

    study: optuna.Study
    config: SearchConfig  # with `study` set to the name opened
    note: str | None = None


def open_study(config: SearchConfig, resume: bool, hardware_hash: str | None = None) -> OpenedStudy:
    """Create the study, or continue it.

    With `resume` it must exist and match this search (space and hardware hashes). Without it, a
    study of the same name made by the same recipe is continued (running a command twice does
    the obvious thing), and one made by another recipe is left alone: the search starts a study
    of its own, named after its content hash, and says so.

    hardware_hash: the content hash of the GPU spec; a recalibrated hardware file keeps its path
    (and so the study name) but changes every exact result, so it counts as another recipe.
    """
    storage = open_storage(config.storage_url())
    name = config.study_name()
    if resume:
        study = _load(storage, name, config)
        if study is None:
            raise ConfigError(f"no study '{name}' in {config.storage_url()} to resume; "
                              f"run without --resume to start it")
        problem = _mismatch(study, config, hardware_hash)
        if problem:
            raise ConfigError(f"study '{name}' {problem}; use another --study name")
        return OpenedStudy(study, config.model_copy(update={"study": name}), f"resuming study {name}")
    study, created = _create_or_load(storage, name, config, hardware_hash)
    named = config.model_copy(update={"study": name})
    if created:
        return OpenedStudy(study, named)
    problem = _mismatch(study, config, hardware_hash)
    if problem is None:
        return OpenedStudy(study, named, f"study {name} already exists for this recipe: continuing it "
                                         f"(its exact evaluations are kept)")
    same_space = study.user_attrs.get("space_hash") == config.space_hash()
    other = f"{name}-{config.space_hash()}"
    if same_space and hardware_hash:  # a recalibrated GPU: the hardware's hash tells them apart
        other += f"-{hardware_hash[:8]}"
    if other == name:
        raise ConfigError(f"study '{name}' {problem}; use another --study name")
    opened = open_study(config.model_copy(update={"study": other}), False, hardware_hash)
    note = f"study {name} {problem}: using study {other} for this recipe"
    return OpenedStudy(opened.study, opened.config, note + (f"; {opened.note}" if opened.note else ""))


def _load(storage: optuna.storages.BaseStorage, name: str, config: SearchConfig) -> optuna.Study | None:
    try:
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler_for(config))
    except KeyError:
        return None


def _create_or_load(storage: optuna.storages.BaseStorage, name: str, config: SearchConfig,
                    hardware_hash: str | None) -> tuple[optuna.Study, bool]:
    """Create the study and write its recipe, or load it when it exists (another process may
    have created it a moment ago: wait for its recipe to be written); True if created."""
    try:
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler_for(config),
                                    directions=list(DIRECTIONS[config.objective]))
    except optuna.exceptions.DuplicatedStudyError:
        loaded = _load(storage, name, config)
        assert loaded is not None
        study = loaded
        deadline = time.monotonic() + RECIPE_WAIT_S
        while "space_hash" not in study.user_attrs and time.monotonic() < deadline:
            time.sleep(0.1)
        return study, False
    study.set_user_attr("space_hash", config.space_hash())
    if hardware_hash:
        study.set_user_attr("hardware_hash", hardware_hash)
    study.set_user_attr("config", json.loads(config.model_dump_json()))
    return study, True


RECIPE_WAIT_S = 10.0


def _mismatch(study: optuna.Study, config: SearchConfig, hardware_hash: str | None) -> str | None:
    """Why the study was made by another recipe than `config`'s, or None."""
    stored = study.user_attrs.get("space_hash")
    if stored != config.space_hash():
        return f"was created by a different search (space hash {stored}, this one {config.space_hash()})"
    stored_hw = study.user_attrs.get("hardware_hash")
    if hardware_hash and stored_hw and stored_hw != hardware_hash:
        return (f"was run on hardware {config.hardware} with hash {stored_hw}; it now hashes "
                f"{hardware_hash} (recalibrated?)")
    return None


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
