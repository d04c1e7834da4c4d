"""A job's throughput curve: at each GPU count where its model fits, the plan and its iteration time.

Two times per level, because the scheduler decides on what its oracle *predicts* while the
cluster runs at what the plan *actually* takes (always the exact simulator's time of the plan
the job runs with). For the simulator and the surrogate oracle (whose chosen plans are verified
exactly) the two are equal; for the linear oracle the prediction is a linear extrapolation.
A count missing from `levels` is one where the model does not fit (or no layout exists).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from vtrain_ml.scheduler.layouts import Layout


@dataclass(frozen=True)
class LevelPlan:
    num_gpus: int
    layout: Layout
    iteration_time_s: float  # exact simulator, the time the cluster experiences
    predicted_time_s: float  # what the scheduler's oracle believes
    peak_memory_bytes: float

    def to_dict(self) -> dict[str, Any]:
        return {"num_gpus": self.num_gpus, "layout": self.layout.to_dict(),
                "iteration_time_s": self.iteration_time_s, "predicted_time_s": self.predicted_time_s,
                "peak_memory_bytes": self.peak_memory_bytes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelPlan:
        return cls(int(data["num_gpus"]), Layout.from_dict(data["layout"]), float(data["iteration_time_s"]),
                   float(data["predicted_time_s"]), float(data["peak_memory_bytes"]))


@dataclass(frozen=True)
class ScalingCurve:
    """Levels in ascending GPU count; `useful` keeps those that are predicted to be faster than
    every smaller one (a job handed more GPUs than its next useful level would idle them)."""

    label: str
    levels: tuple[LevelPlan, ...]
    info: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        counts = [lv.num_gpus for lv in self.levels]
        assert counts == sorted(set(counts)), "levels must be ascending and distinct"

    @property
    def fits(self) -> bool:
        return bool(self.levels)

    def up_to(self, max_gpus: int) -> ScalingCurve:
        return ScalingCurve(self.label, tuple(lv for lv in self.levels if lv.num_gpus <= max_gpus), self.info)

    @property
    def useful(self) -> tuple[LevelPlan, ...]:
        out: list[LevelPlan] = []
        for lv in self.levels:
            if not out or lv.predicted_time_s < out[-1].predicted_time_s:
                out.append(lv)
        return tuple(out)

    def fastest_actual(self) -> LevelPlan | None:
        """The plan with the shortest exact iteration time (ties: fewer GPUs)."""
        return min(self.levels, key=lambda lv: (lv.iteration_time_s, lv.num_gpus), default=None)

    def at(self, num_gpus: int) -> LevelPlan:
        for lv in self.levels:
            if lv.num_gpus == num_gpus:
                return lv
        raise KeyError(f"{self.label} has no plan at {num_gpus} GPUs")


@dataclass(frozen=True)
class Levels:
    """A curve's useful levels as arrays (what the policies compute with)."""

    gpus: np.ndarray  # int, ascending
    predicted_s: np.ndarray  # seconds per iteration, strictly decreasing

    @classmethod
    def of(cls, curve: ScalingCurve) -> Levels:
        useful = curve.useful
        return cls(np.array([lv.num_gpus for lv in useful], dtype=np.int64),
                   np.array([lv.predicted_time_s for lv in useful], dtype=float))

    @cached_property
    def _lists(self) -> tuple[list[int], list[float]]:
        """The levels as Python lists: the policies look single levels up hundreds of thousands
        of times per schedule, where a bisect beats a numpy call."""
        return self.gpus.tolist(), self.predicted_s.tolist()

    def floor(self, gpus: int) -> int:
        """Index of the largest level with at most `gpus` GPUs, or -1."""
        return bisect_right(self._lists[0], gpus) - 1

    def seconds(self, gpus: int) -> float:
        """Predicted seconds per iteration at exactly a level's GPU count."""
        i = self.floor(gpus)
        levels, seconds = self._lists
        assert i >= 0 and levels[i] == gpus, f"{gpus} GPUs is not a level"
        return seconds[i]
