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
        dist = np.sqrt(((q[:, None, :] - self.points_[None, :, :]) ** 2).sum(axis=2))
        k = min(self.n_neighbors, len(self.values_))
        nearest = np.argsort(dist, axis=1, kind="stable")[:, :k]
        d = np.take_along_axis(dist, nearest, axis=1)
        exact = d[:, 0] < 1e-12
        weights = 1.0 / np.maximum(d, 1e-12) ** self.power
        pred = (weights * self.values_[nearest]).sum(axis=1) / weights.sum(axis=1)
        return np.where(exact, self.values_[nearest[:, 0]], pred)
