"""Tiny clusters and models for the scheduler's tests: a 4 GiB test GPU with 4-GPU nodes
(small-gpu.yaml), a 4-layer and an 8-layer GPT; every layout simulates in milliseconds.

The exact oracle's curves are cached on disk for the whole session (`curve_cache`), so tests that
schedule the same shapes simulate them once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulator.job.enums import Recompute
from vtrain_ml.scheduler.cache import CurveCache
from vtrain_ml.scheduler.curve import LevelPlan, Levels, ScalingCurve
from vtrain_ml.scheduler.layouts import Layout
from vtrain_ml.scheduler.policies import JobView
from vtrain_ml.scheduler.trace import trace_from_rows

HERE = Path(__file__).parent
SMALL_GPU = str(HERE / "small-gpu.yaml")
TINY = str(HERE / "tiny_gpt.yaml")
MID = str(HERE / "mid_gpt.yaml")


def row(name: str, arrival_s: float = 0.0, model: str = TINY, **fields: Any) -> dict[str, Any]:
    """A trace row of a small job (1e8 tokens, batch 32) with a loose deadline unless given."""
    base: dict[str, Any] = {"name": name, "arrival_s": arrival_s, "model": model, "train_tokens": 1e8,
                            "global_batch_size": 32}
    if "deadline_s" not in fields:
        base["deadline_factor"] = 20.0
    return {**base, **fields}


def trace(*rows: dict[str, Any]) -> Any:
    return trace_from_rows(list(rows), "test trace")


@pytest.fixture(scope="session")
def curve_cache(tmp_path_factory: pytest.TempPathFactory) -> CurveCache:
    return CurveCache(tmp_path_factory.mktemp("curves"))


def levels(gpus: list[int], seconds: list[float]) -> Levels:
    """Hand-built useful levels: GPU counts and predicted seconds per iteration."""
    curve = ScalingCurve("hand-built", tuple(LevelPlan(n, Layout(1, 1, n, 1, Recompute.NONE), s, s, 0.0)
                                             for n, s in zip(gpus, seconds, strict=True)))
    return Levels.of(curve)


def view(jid: int, levels_: Levels, remaining: float, deadline_s: float, arrival_s: float = 0.0,
         current: int = 0, started: bool = False, request: int = 0, priority: float = 1.0) -> JobView:
    return JobView(jid, arrival_s, deadline_s, remaining, levels_, current, started, priority, request)
