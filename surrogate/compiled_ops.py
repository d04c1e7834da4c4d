"""The simulator's scalar-or-array helpers, compiled for the surrogate's row kernels.

`simulator.costs.analytic` writes `maximum`, `ceil`, `gemm_efficiency`, ... once for numbers and
numpy arrays and never loads numba; the surrogate's physics (`surrogate.physics`,
`surrogate.gemm_shapes`, ...) calls the same code compiled by `simulator.jit.njit`, so that a
table, one job and a compiled row share one model of the physics. Kept apart from
`surrogate.physics` so that modules the physics itself builds on can use them.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from simulator.costs import analytic as costs
from simulator.jit import njit

Vec = Any  # an np.ndarray of rows, or one row's float
F = TypeVar("F", bound=Callable[..., Any])


@njit
def where(condition: Any, a: Vec, b: Vec) -> Vec:
    """`np.where` for arrays; for one row's bool, `a if condition else b` (numba's `np.where` of
    scalars allocates a 0-d array per call, and numpy's costs a microsecond)."""
    if isinstance(condition, (bool, np.bool_)):
        return a if condition else b
    return np.where(condition, a, b)


@njit
def skips(condition: Any) -> bool:
    """Whether `condition` is one row's bool and false: a compiled row can skip terms that a
    `where(condition, ...)` would zero (their value is 0.0 either way); a table computes them
    for all rows and lets `where` pick."""
    return isinstance(condition, (bool, np.bool_)) and not condition


def compiled(fn: F, **helpers: Any) -> F:
    """`simulator.jit.njit` of `fn`'s code with the globals `helpers` (compiled functions)
    replacing those of its module: the simulator's own plain-Python functions (`simulator.costs.analytic`,
    which never loads numba) compiled for the surrogate's kernel, one copy of the code."""
    plain = types.FunctionType(fn.__code__, {**fn.__globals__, **helpers}, fn.__name__,
                               fn.__defaults__, fn.__closure__)
    plain.__qualname__ = f"{fn.__qualname__}_for_surrogate"  # its own numba cache entry
    return njit(plain)  # type: ignore[return-value]


# The simulator's scalar-or-array helpers, compiled (numba needs compiled callees).
maximum = njit(costs.maximum)
minimum = njit(costs.minimum)
ceil = njit(costs.ceil)
gemm_efficiency = compiled(costs.gemm_efficiency, maximum=maximum, ceil=ceil)


@njit
def floor(a: Any) -> Any:
    """`np.floor`; for one number `math.floor` as a float (see `simulator.costs.analytic.maximum`)."""
    if isinstance(a, (int, float)):
        return float(math.floor(a))
    return np.floor(a)


@njit
def log(a: Any) -> Any:
    """`np.log`; for one number `math.log` (see `simulator.costs.analytic.maximum`)."""
    if isinstance(a, (int, float)):
        return math.log(a)
    return np.log(a)


@njit
def log2(a: Any) -> Any:
    """`np.log2`; for one number `math.log2` (see `simulator.costs.analytic.maximum`)."""
    if isinstance(a, (int, float)):
        return math.log2(a)
    return np.log2(a)
