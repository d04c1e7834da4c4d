"""The profiled kernel model: op costs from a measured profile (vTrain, Bang et al. 2024, Sec. 4).

Every op of a job's graph is costed, in this order, from:

1. **measured** -- the profile holds its exact key (kind, variant, phase, shape, dtype), the median;
2. **interpolated** -- the profile holds other shapes of the same (kind, variant, phase, dtype),
   or failing that of the same kind: the analytic time corrected by the measured/analytic ratio
   learned from those shapes (`simulator.costs.interpolation.RatioInterpolator`);
3. **analytic** -- nothing of that kind was measured (`simulator.costs.analytic.AnalyticKernelModel`).

`simulate` reports the share of compute time from each source as ``profile_coverage``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulator.costs.analytic import AnalyticKernelModel, CostSource, OpCost
from simulator.costs.interpolation import RatioInterpolator, size_features
from simulator.costs.profile_format import OPS_TABLE, Profile, read_profile, shape_from_str
from simulator.errors import ProfileError
from simulator.graph.ops import Op, OpKind, Phase
from simulator.job.enums import CollectiveKind
from simulator.job.specs import Job
from simulator.network.collectives import NetworkModel
from simulator.network.fabric import fabric
from simulator.network.nccl import NcclTable

log = logging.getLogger(__name__)

OpKey = tuple[str, str, str, tuple[int, ...], int]
GroupKey = tuple[str, ...]


def _group(op: Op) -> GroupKey:
    return (op.kind.value, op.variant, op.phase.value, str(op.dtype_bytes))


def _kind_group(op: Op) -> GroupKey:
    return (op.kind.value,)


def ops_from_table(table: pd.DataFrame) -> list[tuple[Op, float]]:
    """(op, measured median seconds) for every row of an ops table."""
    rows = []
    records: list[dict[str, Any]] = table.to_dict("records")  # type: ignore[assignment]
    for r in records:
        op = Op(str(r["example"]), OpKind(r["kind"]), Phase(r["phase"]), shape_from_str(r["shape"]),
                int(r["dtype_bytes"]), float(r["flops"]), float(r["bytes"]), variant=str(r["variant"]))
        rows.append((op, float(r["median_s"])))
    return rows


def fit_interpolators(measured: list[tuple[Op, float]], analytic: AnalyticKernelModel
                      ) -> dict[GroupKey, RatioInterpolator]:
    """One ratio interpolator per (kind, variant, phase, dtype) group and one per kind."""
    groups: dict[GroupKey, list[tuple[Op, float]]] = {}
    for op, seconds in measured:
        if seconds > 0:
            groups.setdefault(_group(op), []).append((op, seconds))
            groups.setdefault(_kind_group(op), []).append((op, seconds))
    models = {}
    for key, rows in groups.items():
        ops = [op for op, _ in rows]
        feats = size_features(np.array([o.flops for o in ops]), np.array([o.bytes for o in ops]))
        ratio = np.log([s / analytic.seconds(o) for o, s in rows])
        models[key] = RatioInterpolator().fit(feats, ratio)
    return models


@dataclass(frozen=True, eq=False)
class ProfiledKernelModel:
    """`KernelModel` backed by measurements, with interpolation and an analytic fallback."""

    measured: dict[OpKey, float]
    interpolators: dict[GroupKey, RatioInterpolator]
    analytic: AnalyticKernelModel
    _memo: dict[Op, OpCost] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_measurements(cls, measured: list[tuple[Op, float]], analytic: AnalyticKernelModel
                          ) -> ProfiledKernelModel:
        table = {op.profile_key: seconds for op, seconds in measured}
        return cls(table, fit_interpolators(measured, analytic), analytic)

    def cost(self, op: Op) -> OpCost:
        hit = self._memo.get(op)
        if hit is None:
            hit = self._memo[op] = self._cost(op)
        return hit

    def _cost(self, op: Op) -> OpCost:
        seconds = self.measured.get(op.profile_key)
        if seconds is not None:
            return OpCost(seconds, CostSource.MEASURED)
        model = self.interpolators.get(_group(op)) or self.interpolators.get(_kind_group(op))
        if model is None:
            return self.analytic.cost(op)
        ratio = float(np.exp(model.predict(size_features(np.array([op.flops]),
                                                         np.array([op.bytes])))[0]))
        return OpCost(self.analytic.seconds(op) * ratio, CostSource.INTERPOLATED)


def check_device(profile: Profile, job: Job, strict: bool) -> None:
    """Warn (or, with `strict`, refuse) when the profile was measured on another GPU type."""
    meta = profile.meta
    problems = []
    if meta.hardware != job.hardware.name:
        measured_on = meta.hardware or f"'{meta.device.name}' (no catalog GPU)"
        problems.append(f"was measured on {measured_on} but the job runs on {job.hardware.name}")
    if meta.precision is not job.training.precision:
        problems.append(f"was measured in {meta.precision.value} but the job trains in "
                        f"{job.training.precision.value}")
    if not problems:
        return
    message = f"profile {profile.path} {' and '.join(problems)}"
    if strict:
        raise ProfileError(f"{message}; use a profile of that device (or drop --strict)")
    log.warning("%s; its costs may not transfer (pass --strict to refuse)", message)


def kernel_model_from_profile(path: str | Path, job: Job, strict: bool = False
                              ) -> ProfiledKernelModel:
    """The profiled kernel model of `job` from the profile directory at `path`."""
    profile = read_profile(path)
    if profile.ops is None:
        raise ProfileError(f"profile {path} has no {OPS_TABLE} table (only "
                           f"{', '.join(profile.meta.tables) or 'no tables'}); measure ops with "
                           f"`python -m vtrain_ml.profile ops --out {path}`")
    check_device(profile, job, strict)
    analytic = AnalyticKernelModel(job.hardware, job.training.precision.base)
    return ProfiledKernelModel.from_measurements(ops_from_table(profile.ops), analytic)


def nccl_table_from_profile(profile: Profile) -> NcclTable | None:
    """The profile's all-reduce measurements as the network model's table (None without any)."""
    frame = profile.collectives
    if frame is None:
        return None
    ar = frame[frame["kind"] == CollectiveKind.ALL_REDUCE.value]
    group = ar["group_size"].to_numpy(int)
    nbytes, seconds = ar["bytes"].to_numpy(float), ar["median_s"].to_numpy(float)
    sizes, times = {}, {}
    for n in np.unique(group):
        pick = group == n
        order = np.argsort(nbytes[pick], kind="stable")
        if pick.sum() >= 2:
            sizes[int(n)] = nbytes[pick][order]
            times[int(n)] = seconds[pick][order]
    return NcclTable(sizes, times) if sizes else None


def network_from_profile(path: str | Path, job: Job) -> NetworkModel | None:
    """The job's network model with the profile's measured all-reduce table in place of the
    hardware's nccl tables (None when the profile holds no all-reduce measurements)."""
    table = nccl_table_from_profile(read_profile(path))
    if table is None:
        return None
    return NetworkModel(job.hardware, job.intra_node_bandwidth_Bps, job.inter_node_bandwidth_Bps, table,
                        fabric(job).collnet)
