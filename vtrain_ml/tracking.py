"""MLflow, in one place: runs, parameters, metrics, figures, tables and the surrogate as a pyfunc.

The only module of vtrain-ml that imports MLflow (lazily, inside functions). Runs go to a SQLite
database, ``runs/mlflow.db`` (a tracking backend MLflow supports out of the box; MLflow 3 refuses a
plain file store unless opted in), with artifacts in ``runs/mlartifacts``, both by absolute path so
that a run logged here is found from any directory; MLFLOW_TRACKING_URI names another tracking
server. The logged surrogate carries its code (simulator, surrogate, vtrain_ml) *and* the data
folder (hardware catalog and aliases, read when the model loads) so that
``mlflow.pyfunc.load_model(uri).predict(df)`` works in a fresh process, from any directory,
without vtrain-ml installed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

DEFAULT_DB = Path("runs") / "mlflow.db"
ARTIFACTS = "mlartifacts"  # next to a SQLite tracking database
PACKAGES = ("simulator", "surrogate", "vtrain_ml")


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, else the SQLite database runs/mlflow.db of this directory (absolute)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{DEFAULT_DB.resolve()}"


def _allow_file_store(uri: str) -> None:
    """A file store the user asked for by URI is used: MLflow >= 3 refuses one unless opted in
    (loading its models elsewhere then needs MLFLOW_ALLOW_FILE_STORE=true too)."""
    if uri.startswith("file:") or "://" not in uri:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


def _experiment_id(name: str, uri: str) -> str:
    """The experiment's id, created if needed. With a SQLite database (ours by default) its
    artifacts go to mlartifacts/ next to the database file, by absolute path: MLflow's default
    for a database store is ./mlruns of whatever directory the process runs in, which a process
    in another directory would not find (a tracking server chooses its own)."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    location = None
    if uri.startswith("sqlite:///"):
        database = Path(uri.removeprefix("sqlite:///")).resolve()
        location = (database.parent / ARTIFACTS / name).as_uri()
    return str(client.create_experiment(name, artifact_location=location))


@contextlib.contextmanager
def start_run(experiment: str, run_name: str | None = None) -> Iterator[Any]:
    """An active MLflow run in `experiment` (created if needed); yields mlflow's Run."""
    import mlflow

    uri = tracking_uri()
    _allow_file_store(uri)
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment_id=_experiment_id(experiment, uri))
    with mlflow.start_run(run_name=run_name) as run:
        yield run


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = value
    return out


def log_params(params: Mapping[str, Any]) -> None:
    import mlflow

    mlflow.log_params({k: str(v)[:500] for k, v in _flat(params).items()})


def log_metrics(metrics: Mapping[str, Any]) -> None:
    """Numeric leaves of a (nested) dict; nested keys are joined by dots."""
    import mlflow

    numeric = {k.replace(" ", "_").replace("<=", "le"): float(v) for k, v in _flat(metrics).items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
    mlflow.log_metrics(numeric)


def log_figure(fig: Any, name: str) -> None:
    import mlflow

    mlflow.log_figure(fig, name if name.endswith((".png", ".svg")) else f"{name}.png")


def log_table(df: Any, name: str) -> None:
    import mlflow

    mlflow.log_table(df, name if name.endswith(".json") else f"{name}.json")


def log_artifact(path: str | Path) -> None:
    import mlflow

    if Path(path).is_dir():
        mlflow.log_artifacts(str(path), Path(path).name)
    else:
        mlflow.log_artifact(str(path))


def _pyfunc_class() -> type:
    import mlflow.pyfunc

    base: Any = mlflow.pyfunc.PythonModel

    class SurrogatePyfunc(base):  # type: ignore[misc,valid-type]
        """Serves a saved `Surrogate` folder: DataFrame of JOB_COLUMNS -> predictions."""

        def load_context(self, context: Any) -> None:
            from surrogate.model import Surrogate

            self.model = Surrogate.load(context.artifacts["surrogate"], allow_stale=True)

        def predict(self, context: Any, model_input: Any, params: Any = None) -> Any:
            return self.model.predict(model_input)

    return SurrogatePyfunc


def log_surrogate(model_dir: str | Path, input_example: Any, name: str = "surrogate") -> str:
    """Log a saved surrogate folder as an MLflow pyfunc model; returns its model URI."""
    import mlflow
    from mlflow.models import infer_signature

    from surrogate.model import Surrogate

    output = Surrogate.load(model_dir, allow_stale=True).predict(input_example)
    signature = infer_signature(input_example, output)
    info = mlflow.pyfunc.log_model(
        name=name, python_model=_pyfunc_class()(), artifacts={"surrogate": str(model_dir)},
        code_paths=bundled_paths(), signature=signature, input_example=input_example,
        pip_requirements=["xgboost-cpu", "pandas", "numpy", "scipy", "pydantic>=2", "pyyaml"])
    return str(info.model_uri)


def bundled_paths() -> list[str]:
    """The packages the pyfunc imports, and the data folder they read (hardware catalog).

    MLflow copies each into the artefact's code/ folder and puts that folder first on sys.path
    when loading, so code/simulator sits next to code/data exactly as in a source checkout
    (`simulator.job.catalog.data_dir`). An installed wheel keeps data inside simulator/ already.
    """
    import importlib

    from simulator.job.catalog import data_dir

    folders = [Path(str(importlib.import_module(p).__file__)).parent for p in PACKAGES]
    data = data_dir().resolve()
    if not data.is_relative_to(folders[0]):
        folders.append(data)
    return [str(f) for f in folders]


def save_figures(figures: Mapping[str, Any]) -> None:
    """Log matplotlib figures (name -> Figure) and close them."""
    import matplotlib.pyplot as plt

    for fname, fig in figures.items():
        log_figure(fig, fname)
        plt.close(fig)


__all__ = ["log_artifact", "log_figure", "log_metrics", "log_params", "log_surrogate", "log_table",
           "save_figures", "start_run", "tracking_uri"]
