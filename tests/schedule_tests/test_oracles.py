"""Oracles: the pruned exact search equals brute force, 'does not fit below n', linear scaling,
the surrogate's exact verification, the on-disk cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from simulator.job.catalog import read_yaml, resolve_hardware
from simulator.job.specs import ModelSpec
from simulator.simulate import simulate
from surrogate.features import record_to_job
from tests.schedule_tests.conftest import MID, SMALL_GPU, TINY
from vtrain_ml.scheduler.cache import CurveCache
from vtrain_ml.scheduler.layouts import Cluster, LayoutBuilder, Shape
from vtrain_ml.scheduler.oracle import ExactOracle, LinearOracle
from vtrain_ml.scheduler.surrogate_oracle import SurrogateOracle

CLUSTER = Cluster(resolve_hardware(SMALL_GPU), 8, 4)


def shape(path: str, batch: int = 32) -> Shape:
    return Shape(ModelSpec(**read_yaml(Path(path))), batch)


def brute_force(builder: LayoutBuilder, count: int) -> float | None:
    """Simulate every candidate layout at `count` and keep the fastest that fits."""
    times = []
    for layout in builder.candidates(count):
        result = simulate(builder.job(layout))
        if result.fits_in_memory:
            times.append(result.iteration_time_s)
    return min(times, default=None)


def test_pruned_exact_search_finds_the_brute_force_optimum_at_every_count() -> None:
    s = shape(MID)
    curve = ExactOracle(CLUSTER).curve(s)
    builder = LayoutBuilder(s, CLUSTER)
    found = {lv.num_gpus: lv.iteration_time_s for lv in curve.levels}
    for count in CLUSTER.counts():
        assert found.get(count) == brute_force(builder, count)
    assert curve.info["skipped_known_overflow"] > 0  # the reuse across counts was exercised


def test_a_model_that_does_not_fit_below_n_gpus_has_no_level_there() -> None:
    curve = ExactOracle(CLUSTER).curve(shape(MID))
    assert curve.levels[0].num_gpus == 2  # ~135M parameters with Adam overflow one 4 GiB GPU
    builder = LayoutBuilder(shape(MID), CLUSTER)
    assert all(simulate(builder.job(lv.layout)).fits_in_memory for lv in curve.levels)


def test_gpu_counts_are_node_granular() -> None:
    assert Cluster(resolve_hardware(SMALL_GPU), 16, 4).counts() == [1, 2, 3, 4, 8, 12, 16]
    assert Cluster(resolve_hardware(SMALL_GPU), 3, 4).counts() == [1, 2, 3]


def test_linear_oracle_extrapolates_one_measured_point_of_one_fixed_layout() -> None:
    curve = LinearOracle(CLUSTER).curve(shape(MID))
    ref = curve.info["reference_gpus"]
    assert ref == 4 and curve.info["heuristic"].startswith("tp2 pp1")  # least model parallelism that fits
    t_ref = curve.at(ref).iteration_time_s
    for lv in curve.levels:
        assert (lv.layout.tp, lv.layout.pp, lv.layout.micro_batch_size) == (2, 1, 1)
        assert lv.predicted_time_s == pytest.approx(t_ref * ref / lv.num_gpus)
        job = LayoutBuilder(shape(MID), CLUSTER).job(lv.layout)
        assert lv.iteration_time_s == simulate(job).iteration_time_s


class ScaledExact:
    """A stand-in surrogate: the exact time times a factor that grows with the micro-batch, so its
    ranking is wrong where micro-batches differ and verification has to correct it."""

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        rows = []
        for record in df.to_dict(orient="records"):
            result = simulate(record_to_job(record, {CLUSTER.hardware.name: CLUSTER.hardware}))
            bias = 1.0 / record["micro_batch_size"]
            rows.append({"iteration_time_s": result.iteration_time_s * bias,
                         "peak_memory_bytes": result.peak_memory_bytes,
                         "fits_in_memory": result.fits_in_memory})
        return pd.DataFrame(rows, index=df.index)


def test_surrogate_levels_carry_exactly_verified_times_of_the_best_predicted_plans() -> None:
    s = shape(TINY)
    oracle = SurrogateOracle(CLUSTER, ScaledExact(), verify=1, rounds=1)
    curve = oracle.curve(s)
    builder = LayoutBuilder(s, CLUSTER)
    for lv in curve.levels:
        exact = simulate(builder.job(lv.layout))
        assert lv.iteration_time_s == lv.predicted_time_s == exact.iteration_time_s
        # the stand-in prefers the largest micro-batch that fits, whatever its exact time
        mbs = [lay.micro_batch_size for lay in builder.candidates(lv.num_gpus)
               if simulate(builder.job(lay)).fits_in_memory]
        assert lv.layout.micro_batch_size == max(mbs)
    assert curve.info["exact_simulations"] == len(curve.levels)  # one verification per count


def test_curves_are_cached_on_disk_by_content(tmp_path: Path) -> None:
    cache = CurveCache(tmp_path)
    first = ExactOracle(CLUSTER, cache=cache).curve(shape(TINY))
    again = ExactOracle(CLUSTER, cache=cache).curve(shape(TINY))
    assert again.info == {"cached": True} and again.levels == first.levels
    other: Any = ExactOracle(CLUSTER, cache=cache).curve(shape(TINY, batch=64))  # another batch: new key
    assert "exact_simulations" in other.info
    assert len(list(tmp_path.glob("*.json"))) == 2
