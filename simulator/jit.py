"""Optional compiled kernels: numba when installed, the same Python function otherwise.

The simulator's hot loops (the pipeline engine's sequential rounds, the surrogate's per-row
physics) are a few float max/add operations repeated thousands of times: numpy pays a call per
operation and Python a bytecode dispatch per float. numba compiles the *same* function (one
copy of the logic, so the compiled and the interpreted path cannot drift apart), and IEEE
max/add in the same order give bit-identical results; tests compare the two paths.

numba is an optional extra (`pip install vtrain-ml[fast]`): without it, or with the
environment variable `VTRAIN_NO_JIT=1`, every decorated function runs as plain Python.
Compiled functions are cached on disk (`cache=True`) so a new process does not recompile.
numba keys a cached function by its own file only: a change to a function it calls or a
constant it reads from another module would replay stale machine code. The cache therefore
lives in a folder named by a digest of the simulator's and surrogate's sources
(`_cache_folder`), so that any change to them compiles afresh.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

try:  # pragma: no cover - which branch runs depends on the environment
    if os.environ.get("VTRAIN_NO_JIT", "") not in ("", "0"):
        raise ImportError("disabled by VTRAIN_NO_JIT")
    import numba as _numba
except ImportError:  # pragma: no cover
    _numba = None  # type: ignore[assignment]

HAVE_NUMBA: bool = _numba is not None

_PACKAGES = ("simulator", "surrogate")  # the sources compiled functions call or read


def _cache_folder() -> Path:
    """`__pycache__/numba-<digest>` beside this package, the digest over the bytes of every
    source file of `_PACKAGES` (~10 ms at import, beside numba's own ~1 s)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in _PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return Path(__file__).resolve().parent / "__pycache__" / f"numba-{digest.hexdigest()[:16]}"


if _numba is not None and not os.environ.get("NUMBA_CACHE_DIR"):  # a user's own folder wins
    _numba.config.CACHE_DIR = str(_cache_folder())  # type: ignore[attr-defined]


def njit(fn: F | None = None, *, inline: bool = False) -> Any:
    """`numba.njit(cache=True, nogil=True, error_model="numpy")` of `fn` when numba is available,
    else `fn` itself (`@njit` or `@njit(inline=True)`).

    nogil: a compiled call releases Python's global lock, so that a batch can fill its features
    on two threads (the surrogate) while numpy and XGBoost keep the other core busy; the
    functions are pure loops over arrays they are given, with no Python objects to protect.

    error_model "numpy": a float division is the IEEE one, as in the numpy path (inf or nan on a
    zero divisor, never a raised ZeroDivisionError); numba's default tests every divisor first,
    which made the surrogate's feature kernel, ~400 divisions per row, ~20% slower (same bits).

    inline: numba copies the function's body into each compiled caller (``inline="always"``).
    For the surrogate's mid-level physics functions, which take a whole `Rows` tuple (44 floats)
    by value, a call costs more than much of their bodies: inlining them took the feature
    kernel from ~1.57 to ~1.2 us per row at the same compile time (~17 s). Small helpers gain
    nothing and compile 13x slower; inlining everything compiled for 7 minutes (docs/speed.md).

    The undecorated Python function stays reachable as `python_version(compiled)` so that tests
    can check both paths give the same numbers."""
    if fn is None:
        return lambda f: njit(f, inline=inline)
    if _numba is None:
        return fn
    mode: Literal["always", "never"] = "always" if inline else "never"
    try:
        compiled: Any = _numba.njit(cache=True, nogil=True, error_model="numpy", inline=mode)(fn)
    except RuntimeError:  # no file to cache beside (a function defined in `python -c`)
        compiled = _numba.njit(nogil=True, error_model="numpy", inline=mode)(fn)
    compiled.__vtrain_python__ = fn
    return compiled


def python_version(fn: F) -> F:
    """The plain-Python function behind a function decorated with `njit` (itself if none)."""
    return getattr(fn, "__vtrain_python__", fn)  # type: ignore[no-any-return]
