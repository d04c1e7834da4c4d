"""One row through XGBoost's trees without XGBoost: the single-job prediction path.

An ``inplace_predict`` call costs a few hundred microseconds however few the rows (per-call
setup that grows with the number of trees), which is the whole single-job budget. For one row we
walk the trees ourselves from the booster's JSON dump: all trees of all boosters advance one level
per step as one numpy gather, so a prediction costs max-depth small array operations.

XGBoost stays the model of record; this is a read-only view built from its dump. The semantics are
XGBoost's: go left when ``x[feature] < threshold`` (float32 on both sides), a NaN feature takes the
node's default branch, and each booster's margin is its ``base_score`` plus its leaf values added
in tree order in float32. Categorical splits and multi-output trees are not supported: `Forest`
refuses them and the caller keeps XGBoost.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.jit import HAVE_NUMBA, njit


class UnsupportedTreesError(ValueError):
    """The dump uses a tree feature this walker does not implement (use XGBoost instead)."""


@dataclass(frozen=True)
class Forest:
    """The trees of several boosters, flattened so that node ids are global.

    A leaf points to itself on both sides, so every tree can take `depth` steps. Each booster's
    trees are a contiguous slice `slices[name]` of the roots.
    """

    feature: np.ndarray  # int: feature index of each node (0 at leaves)
    threshold: np.ndarray  # float32: split condition (ignored at leaves)
    left: np.ndarray  # int: left child (itself at a leaf)
    right: np.ndarray  # int: right child (itself at a leaf)
    default: np.ndarray  # int: child taken when the feature is NaN
    value: np.ndarray  # float32: leaf value (0 at split nodes)
    roots: np.ndarray  # int: global id of each tree's root
    base: dict[str, np.float32]  # booster name -> base_score (margin)
    slices: dict[str, slice]  # booster name -> its trees among `roots`
    depth: int

    def margins(self, row: np.ndarray) -> dict[str, float]:
        """Booster name -> raw margin of one float32 feature row (what ``output_margin`` gives)."""
        if HAVE_NUMBA:  # compiled: one tree after another, a few nanoseconds per level
            return {name: float(_walk(self.feature, self.threshold, self.left, self.right,
                                      self.default, self.value, self.roots[part], row,
                                      self.base[name]))
                    for name, part in self.slices.items()}
        return self.margins_numpy(row)

    def margins_numpy(self, row: np.ndarray) -> dict[str, float]:
        """`margins` without numba: all trees advance one level per step as one numpy gather."""
        node = self.roots
        if np.isnan(row).any():
            for _ in range(self.depth):
                x = row[self.feature[node]]
                step = np.where(x < self.threshold[node], self.left[node], self.right[node])
                node = np.where(np.isnan(x), self.default[node], step)
        else:
            for _ in range(self.depth):
                node = np.where(row[self.feature[node]] < self.threshold[node], self.left[node],
                                self.right[node])
        leaves = self.value[node]
        out = {}
        for name, part in self.slices.items():
            # cumsum adds in order (no pairwise summation), as XGBoost accumulates tree by tree
            chain = np.concatenate(([self.base[name]], leaves[part]))
            out[name] = float(np.cumsum(chain, dtype=np.float32)[-1])
        return out


@njit
def _walk(feature: np.ndarray, threshold: np.ndarray, left: np.ndarray, right: np.ndarray,
          default: np.ndarray, value: np.ndarray, roots: np.ndarray, row: np.ndarray,
          base: np.float32) -> np.float32:
    """One booster's margin of `row`: its trees walked one after another (XGBoost's semantics,
    as `Forest.margins`), leaf values added to `base` in tree order in float32."""
    total = base
    for root in roots:
        node = root
        while left[node] != node:  # a leaf points to itself
            x = row[feature[node]]
            if np.isnan(x):
                node = default[node]
            elif x < threshold[node]:
                node = left[node]
            else:
                node = right[node]
        total += value[node]
    return total


def _tree_arrays(tree: Mapping[str, Any], offset: int) -> tuple[np.ndarray, ...]:
    if any(tree["split_type"]) or int(tree["tree_param"].get("size_leaf_vector", "1")) > 1:
        raise UnsupportedTreesError("categorical splits or vector leaves")
    left = np.asarray(tree["left_children"], dtype=np.int64)
    right = np.asarray(tree["right_children"], dtype=np.int64)
    leaf = left == -1
    ids = np.arange(len(left), dtype=np.int64)
    left = np.where(leaf, ids, left) + offset
    right = np.where(leaf, ids, right) + offset
    default = np.where(np.asarray(tree["default_left"], dtype=bool), left, right)
    cond = np.asarray(tree["split_conditions"], dtype=np.float32)
    feature = np.where(leaf, 0, np.asarray(tree["split_indices"], dtype=np.int64))
    return feature, np.where(leaf, np.float32(np.inf), cond), left, right, default, \
        np.where(leaf, cond, np.float32(0.0))


def _depth(left: np.ndarray, right: np.ndarray, roots: np.ndarray) -> int:
    node, depth = roots, 0
    while True:
        nxt_l, nxt_r = left[node], right[node]
        moving = (nxt_l != node) | (nxt_r != node)
        if not moving.any():
            return depth
        node = np.concatenate((nxt_l[moving], nxt_r[moving]))
        depth += 1


def _base_score(learner: Mapping[str, Any]) -> np.float32:
    raw = learner["learner_model_param"]["base_score"]
    values = json.loads(raw) if raw.startswith("[") else [float(raw)]
    if len(values) != 1:
        raise UnsupportedTreesError("multi-target base_score")
    return np.float32(values[0])


def forest_of(boosters: Mapping[str, Any]) -> Forest:
    """A `Forest` of XGBoost boosters (name -> Booster with a squared-error objective)."""
    parts: list[tuple[np.ndarray, ...]] = []
    roots: list[int] = []
    base: dict[str, np.float32] = {}
    slices: dict[str, slice] = {}
    offset = 0
    for name, booster in boosters.items():
        learner = json.loads(booster.save_raw("json"))["learner"]
        if learner["objective"]["name"] != "reg:squarederror":
            raise UnsupportedTreesError(f"objective {learner['objective']['name']}")
        model = learner["gradient_booster"]["model"]
        if any(model["tree_info"]):
            raise UnsupportedTreesError("multi-output trees")
        base[name] = _base_score(learner)
        slices[name] = slice(len(roots), len(roots) + len(model["trees"]))
        for tree in model["trees"]:
            arrays = _tree_arrays(tree, offset)
            parts.append(arrays)
            roots.append(offset)
            offset += len(arrays[0])
    feature, threshold, left, right, default, value = (np.concatenate(c) for c in zip(*parts, strict=True))
    root_ids = np.asarray(roots, dtype=np.int64)
    return Forest(feature=feature, threshold=threshold, left=left, right=right, default=default,
                  value=value, roots=root_ids, base=base, slices=slices,
                  depth=_depth(left, right, root_ids))
