"""The compiled physics (numba, `surrogate.kernel`) and the numpy physics give the same features.

Where numba is installed the features of a table and of one job are computed row by row by the
compiled kernel; without it (or with VTRAIN_NO_JIT=1) by the same functions on numpy arrays. The
comparison runs the numpy path in a subprocess with VTRAIN_NO_JIT=1, because the switch is made
once per process (`simulator.jit`)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from simulator.jit import HAVE_NUMBA
from surrogate.dataset import read_samples
from surrogate.encoding import RAW_FEATURES, OutOfSpaceWarning, feature_matrix
from surrogate.features import JOB_COLUMNS, record_to_job
from surrogate.forest import forest_of
from surrogate.model import Surrogate

ROOT = Path(__file__).resolve().parents[2]

_NUMPY_SIDE = """
import sys, warnings, numpy as np
from simulator.jit import HAVE_NUMBA
assert not HAVE_NUMBA
from surrogate.dataset import read_samples
from surrogate.encoding import OutOfSpaceWarning, feature_matrix
from surrogate.features import JOB_COLUMNS, record_to_job
from surrogate.model import Surrogate
samples, model_dir, out = sys.argv[1:]
warnings.simplefilter("ignore", OutOfSpaceWarning)
model = Surrogate.load(model_dir)
df = read_samples(samples)[list(JOB_COLUMNS)]
_, x = feature_matrix({c: df[c].to_numpy() for c in JOB_COLUMNS}, model.hardware_)
one = [model.predict_one(record_to_job(r))["iteration_time_s"] for r in df.head(30).to_dict("records")]
batch = model.predict(df)["iteration_time_s"].to_numpy()
np.savez(out, x=np.ascontiguousarray(x), one=np.array(one), batch=batch)
"""


def test_the_raw_features_are_the_job_columns_but_the_gpu() -> None:
    """The dense columns feed the compiled kernel; the MoE / cp / precision ones follow the
    physics features (surrogate.extended), each column once."""
    from surrogate.extended import EXTENDED_FEATURES
    from surrogate.features import DENSE_COLUMNS, NEW_COLUMNS

    assert tuple(c for c in DENSE_COLUMNS if c != "gpu") == RAW_FEATURES
    assert EXTENDED_FEATURES[:len(NEW_COLUMNS)] == NEW_COLUMNS
    assert set(JOB_COLUMNS) - {"gpu"} == set(RAW_FEATURES) | set(NEW_COLUMNS)


@pytest.fixture(scope="module")
def numpy_side(tiny_samples, tiny_model, tmp_path_factory) -> dict[str, np.ndarray]:
    out = tmp_path_factory.mktemp("numpy-side") / "numpy.npz"
    env = {**os.environ, "VTRAIN_NO_JIT": "1", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", _NUMPY_SIDE, str(tiny_samples), str(tiny_model.path), str(out)],
                   check=True, cwd=ROOT, env=env, timeout=300)
    return dict(np.load(out))


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed: only the numpy path exists")
def test_compiled_features_equal_the_numpy_features_to_the_bit(tiny_samples, tiny_model, numpy_side) -> None:
    df = read_samples(tiny_samples)[list(JOB_COLUMNS)]
    _, x = feature_matrix({c: df[c].to_numpy() for c in JOB_COLUMNS}, tiny_model.model.hardware_)
    np.testing.assert_array_equal(np.ascontiguousarray(x), numpy_side["x"])


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed: only the numpy path exists")
def test_compiled_predictions_equal_the_numpy_predictions(tiny_samples, tiny_model, numpy_side) -> None:
    model = tiny_model.model
    df = read_samples(tiny_samples)[list(JOB_COLUMNS)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        one = [model.predict_one(record_to_job(r))["iteration_time_s"]
               for r in df.head(30).to_dict("records")]
        batch = model.predict(df)["iteration_time_s"].to_numpy()
    np.testing.assert_array_equal(np.array(one), numpy_side["one"])
    np.testing.assert_array_equal(batch, numpy_side["batch"])


def test_both_tree_walks_equal_xgboost_to_the_bit(tiny_model, tiny_samples) -> None:
    """`Forest.margins` (compiled where numba is installed) and its numpy walk both give
    XGBoost's margins, NaN features down the default branch included."""
    model: Surrogate = tiny_model.model
    df = read_samples(tiny_samples)[list(JOB_COLUMNS)].head(40)
    _, x = feature_matrix({c: df[c].to_numpy() for c in JOB_COLUMNS}, model.hardware_)
    x = np.ascontiguousarray(x)
    x[::4, ::5] = np.nan
    forest = forest_of(model.boosters_)
    expected = {k: b.inplace_predict(x, validate_features=False) for k, b in model.boosters_.items()}
    for i in range(len(x)):
        compiled, walked = forest.margins(x[i]), forest.margins_numpy(x[i])
        for key in expected:
            assert compiled[key] == walked[key] == float(expected[key][i]), (key, i)
