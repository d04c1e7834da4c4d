"""Records, and the closed-form physics the model learns residuals of."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import simulate
from simulator.errors import ConfigError
from surrogate.dataset import read_samples, simulate_records
from surrogate.encoding import physics_features
from surrogate.features import JOB_COLUMNS, job_to_record, record_to_job
from tests.conftest import make_job


def test_record_round_trip_keeps_the_job() -> None:
    job = make_job()
    record = job_to_record(job)
    assert tuple(record) == JOB_COLUMNS
    again = record_to_job(record)
    assert job_to_record(again) == record
    assert simulate(again).iteration_time_s == pytest.approx(simulate(job).iteration_time_s)


def test_invalid_record_raises_config_error_naming_the_field() -> None:
    record = job_to_record(make_job())
    with pytest.raises(ConfigError, match="tp"):
        record_to_job({**record, "tp": 3})
    with pytest.raises(ConfigError, match="lacks column"):
        record_to_job({k: v for k, v in record.items() if k != "schedule"})


def test_simulate_records_returns_targets_in_input_order() -> None:
    records = [job_to_record(make_job(training={"global_batch_size": gbs})) for gbs in (32, 16, 64)]
    df = simulate_records(records)
    assert list(df["global_batch_size"]) == [32, 16, 64]
    for i, record in enumerate(records):  # each row holds its own job's simulation
        result = simulate(record_to_job(record))
        assert df.loc[i, "iteration_time_s"] == result.iteration_time_s
        assert df.loc[i, "peak_memory_bytes"] == result.peak_memory_bytes
        assert df.loc[i, "fits_in_memory"] == result.fits_in_memory
        assert df.loc[i, "mfu"] == pytest.approx(result.mfu)
        assert df.loc[i, "cost_per_iteration_usd"] == pytest.approx(result.cost_per_iteration_usd)
    assert df.loc[2, "iteration_time_s"] > df.loc[0, "iteration_time_s"] > df.loc[1, "iteration_time_s"]


def test_memory_estimate_is_exact_for_1f1b_and_gpipe(tiny_samples) -> None:
    df = read_samples(tiny_samples)
    df = df[df["schedule"] != "interleaved_1f1b"]
    est = np.exp(physics_features(df)["est_log_memory_bytes"])
    np.testing.assert_allclose(est, df["peak_memory_bytes"], rtol=1e-6)


def test_time_estimate_is_within_a_factor_of_the_simulator(tiny_samples) -> None:
    df = read_samples(tiny_samples)
    ratio = np.exp(physics_features(df)["est_log_time_s"]) / df["iteration_time_s"]
    assert np.median(np.abs(np.log(ratio))) < 0.3
    assert ratio.between(0.3, 3).all()


def test_physics_features_are_finite(tiny_samples) -> None:
    feats = physics_features(read_samples(tiny_samples))
    assert np.isfinite(feats.to_numpy()).all()


def test_gemm_efficiency_of_a_square_gemm_is_its_best_tiles_wave_and_depth_efficiency() -> None:
    """4096^3 on 108 SMs: 256x128 tiles make 512 tiles in 5 waves (512/540 busy), no partial
    tiles, depth 4096 / (4096 + k_half); the smaller tiles lose more to their rel factor."""
    from simulator.costs.analytic import gemm_efficiency

    expected = 0.87 * (512 / 540) * (4096 / (4096 + 150.0))
    assert gemm_efficiency(1, 4096, 4096, 4096, 108, 0.87, 150.0) == pytest.approx(expected, rel=1e-15)


def test_the_gemm_efficiency_of_arrays_and_compiled_is_the_simulators_to_the_bit() -> None:
    """One function, three paths: the simulator's scalar call, numpy arrays (the features of a
    table) and the surrogate's compiled copy agree to the bit on every shape, partial tiles and
    waves too."""
    import itertools

    from simulator.costs.analytic import gemm_efficiency
    from surrogate.compiled_ops import gemm_efficiency as compiled_gemm_efficiency

    shapes = list(itertools.product([1, 3, 96, 1024], [1, 63, 64, 257, 4096], [1, 129, 12288],
                                    [64, 300, 8192]))
    batch, m, n, k = (np.array(column, dtype=float) for column in zip(*shapes, strict=True))
    vector = gemm_efficiency(batch, m, n, k, 108.0, 0.87, 150.0)
    expected = [gemm_efficiency(*shape, 108, 0.87, 150.0) for shape in shapes]
    compiled = [compiled_gemm_efficiency(*map(float, shape), 108.0, 0.87, 150.0) for shape in shapes]
    assert all(isinstance(value, float) for value in expected)
    assert vector.tolist() == expected
    assert compiled == expected

