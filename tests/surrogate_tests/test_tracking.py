"""MLflow: the surrogate logged as a pyfunc loads and predicts with nothing of ours imported."""

from __future__ import annotations

import numpy as np
import pytest

from surrogate.dataset import read_samples
from surrogate.features import JOB_COLUMNS


def test_surrogate_logs_and_loads_as_an_mlflow_pyfunc(tiny_model, tiny_samples, tmp_path,
                                                      monkeypatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    from vtrain_ml import tracking

    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    df = read_samples(tiny_samples)[list(JOB_COLUMNS)].head(20)
    with tracking.start_run("test-surrogate", "tiny"):
        tracking.log_params({"seed": 0, "nested": {"a": 1}})
        tracking.log_metrics({"test": {"mape": 0.01, "by_region": {"schedule": {"1f1b": 0.02}}}})
        uri = tracking.log_surrogate(tiny_model.path, df.head(3))
    loaded = mlflow.pyfunc.load_model(uri)
    assert loaded.metadata.signature is not None
    out = loaded.predict(df)
    np.testing.assert_allclose(out["iteration_time_s"], tiny_model.model.predict(df)["iteration_time_s"])
