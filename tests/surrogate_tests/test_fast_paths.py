"""The fast prediction paths give the reference path's numbers (XGBoost on the pandas-built features)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from surrogate.dataset import read_samples
from surrogate.encoding import OutOfSpaceWarning, feature_matrix
from surrogate.features import JOB_COLUMNS, record_to_job
from surrogate.forest import forest_of
from surrogate.kernel import physics_columns, physics_of_rows
from surrogate.physics import hardware_vector, rows_from_record


@pytest.fixture(scope="module")
def samples(tiny_samples):
    return read_samples(tiny_samples)[list(JOB_COLUMNS)]


def _reference_features(model, df):
    """Feature matrix from plain numpy arrays of the DataFrame (no categorical fast path)."""
    columns = {c: df[c].to_numpy() for c in JOB_COLUMNS}
    return feature_matrix(columns, model.hardware_)[1]


def test_forest_walk_equals_xgboost_margins_to_the_bit(tiny_model, samples) -> None:
    model = tiny_model.model
    x = _reference_features(model, samples)
    forest = forest_of(model.boosters_)
    expected = {k: b.inplace_predict(x, validate_features=False) for k, b in model.boosters_.items()}
    for i in range(len(x)):
        margins = forest.margins(x[i])
        for key in expected:
            assert margins[key] == float(expected[key][i]), (key, i)


def test_forest_sends_a_missing_feature_down_the_default_branch(tiny_model, samples) -> None:
    model = tiny_model.model
    x = _reference_features(model, samples.head(20)).copy()
    x[:, ::3] = np.nan
    forest = forest_of(model.boosters_)
    expected = model.boosters_["time"].inplace_predict(x, validate_features=False)
    for i in range(len(x)):
        assert forest.margins(x[i])["time"] == float(expected[i])


def test_scalar_physics_equals_the_vectorized_physics(tiny_model, samples) -> None:
    model = tiny_model.model
    table = physics_columns({c: samples[c].to_numpy() for c in JOB_COLUMNS}, model.hardware_)
    hw = hardware_vector(model.hardware_["a100-80gb"])
    for i, record in enumerate(samples.head(40).to_dict("records")):
        one = physics_of_rows(rows_from_record(record, hw))
        for name, values in table.items():
            assert one[name] == pytest.approx(float(values[i]), rel=1e-12, abs=1e-300), name


def test_batch_prediction_equals_the_reference_computation(tiny_model, samples) -> None:
    model = tiny_model.model
    x = _reference_features(model, samples)
    names = model.feature_names_
    time = model.boosters_["time"].inplace_predict(x, validate_features=False)
    memory = model.boosters_["memory"].inplace_predict(x, validate_features=False)
    expected_s = np.exp(x[:, names.index("est_log_time_s")].astype(float) + time)
    expected_b = np.exp(x[:, names.index("est_log_memory_bytes")].astype(float) + memory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        got = model.predict(samples)
    np.testing.assert_allclose(got["iteration_time_s"], expected_s, rtol=1e-6)
    np.testing.assert_allclose(got["peak_memory_bytes"], expected_b, rtol=1e-6)


def test_single_job_agrees_with_batch_on_every_sample(tiny_model, samples) -> None:
    model = tiny_model.model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        batch = model.predict(samples)
        for i, record in enumerate(samples.head(60).to_dict("records")):
            one = model.predict_one(record_to_job(record))
            assert one["iteration_time_s"] == batch["iteration_time_s"].iloc[i]  # to the bit
            assert one["peak_memory_bytes"] == batch["peak_memory_bytes"].iloc[i]
            assert one["fits_in_memory"] == batch["fits_in_memory"].iloc[i]


def test_refitting_rebuilds_the_single_job_trees(samples) -> None:
    from surrogate.model import Surrogate

    model = Surrogate(n_estimators=3, memory_estimators=2, n_jobs=1)
    table = samples.assign(iteration_time_s=1.0, peak_memory_bytes=1e9)
    job = record_to_job(samples.iloc[0].to_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        first = model.fit(table).predict_one(job)["iteration_time_s"]
        model.fit(table.assign(iteration_time_s=np.linspace(0.5, 5.0, len(table))))
        second = model.predict_one(job)["iteration_time_s"]
        assert second == pytest.approx(model.predict([job])["iteration_time_s"].iloc[0], rel=1e-6)
    assert second != first


def test_a_batch_predicted_in_chunks_on_threads_equals_one_thread(tiny_model, tiny_samples, monkeypatch):
    """Large batches run in row chunks on threads (columns, features, trees); the result must
    not change, for a DataFrame or a list of jobs."""
    import pandas as pd

    import surrogate.model as surrogate_model

    model = tiny_model.model
    rows = read_samples(tiny_samples)[list(JOB_COLUMNS)]
    jobs = [record_to_job(r) for r in rows.head(50).to_dict("records")]
    monkeypatch.setattr(surrogate_model, "PARALLEL_ROWS", 10**9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        one_thread, one_thread_jobs = model.predict(rows), model.predict(jobs)
    monkeypatch.setattr(surrogate_model, "PARALLEL_ROWS", 2)
    monkeypatch.setattr(model, "n_jobs", 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        threaded, threaded_jobs = model.predict(rows), model.predict(jobs)
    pd.testing.assert_frame_equal(one_thread, threaded)
    pd.testing.assert_frame_equal(one_thread_jobs, threaded_jobs)


def test_chunks_on_threads_warn_once_with_the_whole_batch_counts(tiny_model, tiny_samples, monkeypatch):
    import surrogate.model as surrogate_model

    model = tiny_model.model
    rows = read_samples(tiny_samples)[list(JOB_COLUMNS)].head(90).copy()
    rows.loc[rows.index[[5, 50, 85]], "num_gpus"] = 10**6  # one in each of three chunks
    rows.loc[rows.index[[80]], "seq_length"] = 2**20
    rows.loc[rows.index[[10]], "moe_token_dispatcher"] = "flex"  # unseen values in two chunks
    rows.loc[rows.index[[70]], "moe_token_dispatcher"] = "allgather"
    monkeypatch.setattr(surrogate_model, "PARALLEL_ROWS", 2)
    monkeypatch.setattr(model, "n_jobs", 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OutOfSpaceWarning)
        model.predict(rows)
    messages = [str(w.message) for w in caught if issubclass(w.category, OutOfSpaceWarning)]
    assert len(messages) == 1
    assert "seq_length: 1 row(s) outside" in messages[0] and "num_gpus: 3 row(s) outside" in messages[0]
    assert "moe_token_dispatcher: value(s) allgather, flex never seen" in messages[0]


def test_an_unknown_gpu_in_a_threaded_chunk_is_named(tiny_model, tiny_samples, monkeypatch):
    """The string columns are encoded per chunk on the threads; a GPU the surrogate was not
    trained for still raises the clear error, not a failure inside the features."""
    import surrogate.model as surrogate_model
    from simulator.errors import ProfileError

    model = tiny_model.model
    rows = read_samples(tiny_samples)[list(JOB_COLUMNS)].head(90).copy()
    rows.loc[rows.index[[85]], "gpu"] = "tpu-v9"
    monkeypatch.setattr(surrogate_model, "PARALLEL_ROWS", 2)
    monkeypatch.setattr(model, "n_jobs", 3)
    with pytest.raises(ProfileError, match="column gpu has tpu-v9, but the surrogate was trained for"):
        model.predict(rows)


def test_xgboost_predicts_the_same_from_either_memory_order(tiny_model, samples) -> None:
    """feature_matrix hands XGBoost the matrix in the order it was filled (row-major from the
    compiled kernel, column-major from numpy): no transposing copy."""
    x = _reference_features(tiny_model.model, samples)
    assert x.flags.c_contiguous or x.flags.f_contiguous
    for booster in tiny_model.model.boosters_.values():
        column_major = booster.inplace_predict(np.asfortranarray(x), validate_features=False)
        row_major = booster.inplace_predict(np.ascontiguousarray(x), validate_features=False)
        np.testing.assert_array_equal(column_major, row_major)


def test_a_few_rows_are_checked_against_the_trained_space_as_a_table_is(tiny_model, samples) -> None:
    """A table of a few rows (a search's one-plan calls) is checked value by value; it finds what
    the array check finds on the same rows (here: the rows three times over, past the few)."""
    import pandas as pd

    from surrogate.columns import frame_columns
    from surrogate.encoding import _FEW_ROWS, out_of_space_parts
    from surrogate.features import CATEGORICAL_COLUMNS

    bounds = tiny_model.model.bounds_
    rows = samples.head(3).copy()
    rows.loc[rows.index[0], "num_gpus"] = 10**6
    rows.loc[rows.index[2], "seq_length"] = 2**20
    rows.loc[rows.index[1], "moe_token_dispatcher"] = "flex"  # a dense sample never dispatches
    many = pd.concat([rows] * 3, ignore_index=True)
    assert len(rows) <= _FEW_ROWS < len(many)
    few = out_of_space_parts(frame_columns(rows, JOB_COLUMNS, CATEGORICAL_COLUMNS), bounds)
    table = out_of_space_parts(frame_columns(many, JOB_COLUMNS, CATEGORICAL_COLUMNS), bounds)
    assert few["num_gpus"] == (1, 1e6) and few["seq_length"] == (1, 2.0**20)
    assert few["moe_token_dispatcher"] == frozenset({"flex"})
    assert set(few) == set(table)
    for column, part in few.items():
        if isinstance(part, tuple):
            assert table[column] == (3 * part[0], part[1])
        else:
            assert table[column] == part
