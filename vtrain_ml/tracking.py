"""MLflow, in one place: runs, parameters, metrics, figures, tables and the surrogate as a pyfunc.

The only module of vtrain-ml that imports MLflow (lazily, inside functions). Runs go to a local
file store under ``runs/mlruns`` unless MLFLOW_TRACKING_URI names another tracking server.
The logged surrogate carries its code (simulator, surrogate, vtrain_ml) so that
``mlflow.pyfunc.load_model(uri).predict(df)`` works without vtrain-ml installed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

DEFAULT_STORE = Path("runs") / "mlruns"
PACKAGES = ("simulator", "surrogate", "vtrain_ml")


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_STORE.resolve().as_uri()


def _allow_file_store(uri: str) -> None:
    """MLflow >= 3.x refuses a plain file store unless opted in; the issue asks for one by default
    (no database server or SQLAlchemy needed). Any other URI is left to MLflow."""
    if uri.startswith("file:") or "://" not in uri:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


@contextlib.contextmanager
def start_run(experiment: str, run_name: str | None = None) -> Iterator[Any]:
    """An active MLflow run in `experiment` (created if needed); yields mlflow's Run."""
    import mlflow

    uri = tracking_uri()
    _allow_file_store(uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment)
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
    root = Path(__file__).resolve().parents[1]
    info = mlflow.pyfunc.log_model(
        name=name, python_model=_pyfunc_class()(), artifacts={"surrogate": str(model_dir)},
        code_paths=[str(root / p) for p in PACKAGES], signature=signature, input_example=input_example,
        pip_requirements=["xgboost-cpu", "pandas", "numpy", "scipy", "pydantic>=2", "pyyaml"])
    return str(info.model_uri)


def save_figures(figures: Mapping[str, Any]) -> None:
    """Log matplotlib figures (name -> Figure) and close them."""
    import matplotlib.pyplot as plt

    for fname, fig in figures.items():
        log_figure(fig, fname)
        plt.close(fig)


__all__ = ["log_artifact", "log_figure", "log_metrics", "log_params", "log_surrogate", "log_table",
           "save_figures", "start_run", "tracking_uri"]
