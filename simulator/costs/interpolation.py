"""Interpolating measured op times to shapes that were not measured.

The analytic model already knows the shape effects we can reason about (roofline in FLOPs and
bytes, GEMM tile and wave quantization); what it misses is device- and library-specific (kernel
selection, achieved bandwidth, launch cost). So the interpolator learns the *correction*
``log(measured / analytic)`` as a function of the op's size, ``(log FLOPs, log bytes)``, and
multiplies the analytic time of an unmeasured op by the predicted correction. The predictor is
inverse-distance-weighted k-nearest-neighbours in that standardized log space: piecewise and
local (a GEMM far from every measurement borrows the correction of its nearest neighbours, never
an extrapolated trend), deterministic, and exact at measured points.
"""

from __future__ import annotations

import numpy as np


def size_features(flops: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """(n, 2) features: natural log of FLOPs and of HBM bytes (+1 so zero-FLOP ops are finite)."""
    return np.column_stack([np.log1p(np.asarray(flops, float)), np.log1p(np.asarray(nbytes, float))])


class RatioInterpolator:
    """k-NN (inverse distance weighted) regression of a log-ratio on log-size features.

    scikit-learn style: hyperparameters in ``__init__``, ``fit`` returns ``self``, learned
    attributes end in ``_``.
    """

    def __init__(self, n_neighbors: int = 4, power: float = 2.0) -> None:
        self.n_neighbors = n_neighbors
        self.power = power

    def fit(self, features: np.ndarray, log_ratio: np.ndarray) -> RatioInterpolator:
        x = np.asarray(features, float)
        y = np.asarray(log_ratio, float)
        if x.ndim != 2 or len(x) != len(y) or len(y) == 0:
            raise ValueError("features must be (n, d) with n == len(log_ratio) > 0")
        self.center_ = x.mean(axis=0)
        scale = x.std(axis=0)
        self.scale_ = np.where(scale > 1e-9, scale, 1.0)
        self.points_ = (x - self.center_) / self.scale_
        self.values_ = y
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        q = (np.atleast_2d(np.asarray(features, float)) - self.center_) / self.scale_
        chunk = max(1, 2**22 // max(1, len(self.values_)))  # bound the distance matrix's memory
        return np.concatenate([self._predict(q[i:i + chunk]) for i in range(0, len(q), chunk)])

    def _predict(self, q: np.ndarray) -> np.ndarray:
        dist = np.sqrt(((q[:, None, :] - self.points_[None, :, :]) ** 2).sum(axis=2))
        k = min(self.n_neighbors, len(self.values_))
        if k < dist.shape[1]:
            part = np.argpartition(dist, k - 1, axis=1)[:, :k]
        else:
            part = np.broadcast_to(np.arange(k), dist.shape).copy()
        order = np.argsort(np.take_along_axis(dist, part, axis=1), axis=1, kind="stable")
        nearest = np.take_along_axis(part, order, axis=1)
        d = np.take_along_axis(dist, nearest, axis=1)
        exact = d[:, 0] < 1e-12
        weights = 1.0 / np.maximum(d, 1e-12) ** self.power
        pred = (weights * self.values_[nearest]).sum(axis=1) / weights.sum(axis=1)
        return np.where(exact, self.values_[nearest[:, 0]], pred)
