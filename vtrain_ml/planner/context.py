"""What every search strategy works with: the space, the study's exact evaluations, the
surrogate that learns from them, the progress hooks and the stop flag."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vtrain_ml.planner.config import SearchConfig
from vtrain_ml.planner.evaluation import Evaluation
from vtrain_ml.planner.exact import ExactStore
from vtrain_ml.planner.objective import constraint_values
from vtrain_ml.planner.ranking import VerifyEvent, rank
from vtrain_ml.planner.scorer import Scorer
from vtrain_ml.planner.space import SearchSpace
from vtrain_ml.planner.study import trial_exact


@dataclass(frozen=True)
class Hooks:
    """Progress callbacks; the CLI renders them, tests leave them out."""

    message: Callable[[str], None] = lambda text: None
    verified: Callable[[VerifyEvent], None] = lambda event: None
    trial: Callable[[int, int], None] = lambda done, total: None  # surrogate trials done of total
    started: Callable[[SearchConfig, int], None] = lambda config, done: None  # the study is open


@dataclass
class SearchContext:
    """One search in progress (built by `planner.runner.run_search`)."""

    config: SearchConfig  # with the study name really used
    space: SearchSpace
    store: ExactStore
    scorer: Scorer
    hooks: Hooks = field(default_factory=Hooks)
    stop: Callable[[], bool] = lambda: False
    info: dict[str, Any] = field(default_factory=dict)  # what the strategy reports
    notes: list[str] = field(default_factory=list)  # lines the report prints once (rules.hardware_notes)
    _taught: set[str] = field(default_factory=set)  # keys of exact trials the scorer has as rows

    def teach(self) -> int:
        """Give the surrogate every exact evaluation of the study it does not have yet (this
        process's and other processes'); returns how many were added."""
        self.store.refresh()
        new = [t for k, t in self.store.done.items() if k not in self._taught]
        if new:
            self.scorer.add([self.space.build(t.params) for t in new], [trial_exact(t) for t in new])
            self._taught.update(str(t.user_attrs["key"]) for t in new)
        return len(new)

    def best(self) -> Evaluation | None:
        """The best feasible exact evaluation so far (None if none is feasible)."""
        evaluations = [trial_exact(t) for t in self.store.done.values()]
        if not evaluations:
            return None
        capacity = self.space.hardware.memory_bytes
        constraints = [constraint_values(self.config, capacity, e) for e in evaluations]
        first = rank(self.config.objective, evaluations, constraints)[0]
        return evaluations[first] if all(c <= 0 for c in constraints[first]) else None


__all__ = ["Hooks", "SearchContext"]
