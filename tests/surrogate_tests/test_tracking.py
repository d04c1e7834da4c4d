"""MLflow: the surrogate logged as a pyfunc loads and predicts in a fresh process, from another
directory, with MLflow's default-supported SQLite tracking and everything the model reads bundled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from surrogate.dataset import read_samples
from surrogate.features import JOB_COLUMNS

# Run in a fresh interpreter: loads the logged model by URI and reports where its code and data
# came from, and its predictions for the rows in rows.parquet.
LOADER = """
import json, sys
import mlflow, pandas as pd
model = mlflow.pyfunc.load_model(sys.argv[1])
rows = pd.read_parquet(sys.argv[2])
out = model.predict(rows)
import simulator.job.catalog, surrogate
print(json.dumps({"surrogate": surrogate.__file__, "data": str(simulator.job.catalog.data_dir()),
                  "time": out["iteration_time_s"].tolist()}))
"""


def test_the_default_tracking_is_sqlite_and_the_model_loads_in_a_fresh_process_elsewhere(
        tiny_model, tiny_samples, tmp_path, monkeypatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    from vtrain_ml import tracking

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.chdir(project)
    assert tracking.tracking_uri() == f"sqlite:///{project / 'runs' / 'mlflow.db'}"
    df = read_samples(tiny_samples)[list(JOB_COLUMNS)].head(5)
    with tracking.start_run("test-surrogate", "tiny") as run:
        tracking.log_params({"seed": 0, "nested": {"a": 1}})
        tracking.log_metrics({"test": {"mape": 0.01, "by_region": {"schedule": {"1f1b": 0.02}}}})
        uri = tracking.log_surrogate(tiny_model.path, df.head(3))
    logged = mlflow.MlflowClient(tracking.tracking_uri()).get_run(run.info.run_id).data
    assert logged.params["nested.a"] == "1" and logged.metrics["test.by_region.schedule.1f1b"] == 0.02
    rows = elsewhere / "rows.parquet"
    df.to_parquet(rows)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "VTRAIN_"))}
    env["MLFLOW_TRACKING_URI"] = tracking.tracking_uri()
    done = subprocess.run([sys.executable, "-c", LOADER, uri, str(rows)], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    artifacts = project / "runs" / "mlartifacts"
    assert Path(result["surrogate"]).is_relative_to(artifacts), "the model's own bundled code runs"
    assert Path(result["data"]).is_relative_to(artifacts) and (Path(result["data"]) / "hardware").is_dir()
    np.testing.assert_allclose(result["time"], tiny_model.model.predict(df)["iteration_time_s"])
