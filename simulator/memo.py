"""Bounded memo tables for the simulator's pure, repeated work (blocks of a model, their costs).

A search, a surrogate's sample generation or the cluster scheduler simulate many jobs that share
a model, a tensor-parallel size and a micro-batch: their operator blocks and the blocks' costs
are the same, only the pipeline layout differs. The tables hold values computed by pure
functions of their key, so a hit returns exactly what a fresh computation would (tests check
this by clearing them). Keys are built from whole frozen configs (content-hashed by pydantic)
plus the few layout fields a value reads; objects that are not hashable by content (a hardware
description, a caller's kernel model) enter a key by identity, pinned by `Pinned` so that the
identity cannot be reused while the entry lives.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np

V = TypeVar("V")


def read_only(*arrays: np.ndarray) -> None:
    """Make memoized arrays read-only: every result that shares them then raises on an in-place
    change instead of silently changing what later hits return."""
    for a in arrays:
        a.flags.writeable = False

class Pinned:
    """An object in a key by identity; holding it keeps its id from being reused."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pinned) and other.obj is self.obj


class Memo(Generic[V]):
    """A least-recently-used table of at most `maxsize` values computed on a miss."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        data = self._data
        try:
            value = data[key]
        except KeyError:
            value = data[key] = compute()
            if len(data) > self.maxsize:
                data.popitem(last=False)
            return value
        data.move_to_end(key)
        return value

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
