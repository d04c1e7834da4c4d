"""The few numpy functions the physics uses, on plain Python floats (one job, no array overhead).

`surrogate.physics` and `surrogate.timing` compute through ``r.xp``: numpy for a table of jobs,
`SCALAR` for one job, where a numpy call on 1-element arrays costs about a microsecond each and
the hundreds of them would dominate a single prediction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


class ScalarOps:
    """numpy-compatible names over floats: where, maximum, minimum, ceil, floor, select, log."""

    @staticmethod
    def where(cond: Any, a: Any, b: Any) -> Any:
        return a if cond else b

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        return a if a >= b else b

    @staticmethod
    def minimum(a: Any, b: Any) -> Any:
        return a if a <= b else b

    @staticmethod
    def ceil(a: Any) -> float:
        return float(math.ceil(a))

    @staticmethod
    def floor(a: Any) -> float:
        return float(math.floor(a))

    @staticmethod
    def log(a: Any) -> float:
        return math.log(a)

    @staticmethod
    def select(conditions: Sequence[Any], choices: Sequence[Any], default: Any = 0.0) -> Any:
        for cond, choice in zip(conditions, choices, strict=True):
            if cond:
                return choice
        return default

    @staticmethod
    def full_like(_: Any, value: float) -> float:
        return float(value)

    @staticmethod
    def zeros_like(_: Any) -> float:
        return 0.0

    @staticmethod
    def ones_like(_: Any) -> float:
        return 1.0

    @staticmethod
    def broadcast_to(a: Any, _: Any) -> Any:
        return a

    @staticmethod
    def asarray(a: Any, dtype: Any = None) -> Any:
        return float(a)


SCALAR = ScalarOps()
