"""python -m vtrain_ml.surrogate {generate,train,evaluate,predict,retrain} ...

generate  sample a space and run the exact simulator over it (Parquet chunks, --resume)
train     fit the XGBoost surrogate on a samples folder (--tune-trials, --mlflow)
evaluate  score a model on another samples folder (--json)
predict   predict one job file (--json)
retrain   regenerate the model's space under a new hardware profile and train again
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vtrain_ml.cli.common import add_common, needs, run, stop_requested
from vtrain_ml.outputs import check_dir_output


def _add_generate(sub: Any) -> None:
    g = sub.add_parser("generate", help="sample a space and simulate it")
    g.add_argument("--space", help="space YAML file (default: the spaces/default.yaml shipped with "
                                   "vtrain-ml)")
    g.add_argument("--hardware", action="append", metavar="NAME_OR_FILE",
                   help="GPU type(s) to sample (catalog id or hardware YAML; repeatable); "
                        "default: the space's list")
    g.add_argument("--n", type=int, required=True, help="number of valid samples")
    g.add_argument("--out", required=True, help="samples folder (e.g. runs/samples/NAME)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--method", choices=["sobol", "lhs", "random"], default="sobol")
    g.add_argument("--jobs", type=int, default=-1, help="parallel workers (-1: all cores)")
    g.add_argument("--backend", choices=["loky", "dask", "ray"], default="loky",
                   help="joblib backend; dask/ray use the cluster in DASK_SCHEDULER_ADDRESS / RAY_ADDRESS")
    g.add_argument("--chunk-size", type=int, default=500, help="samples per Parquet chunk")
    g.add_argument("--checkpoint-s", type=float, default=10.0, metavar="S",
                   help="save finished samples at least every S seconds (default 10), so that a "
                        "killed run resumes from there")
    g.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    g.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _add_train(sub: Any) -> None:
    t = sub.add_parser("train", help="train the surrogate on a samples folder")
    t.add_argument("--samples", required=True, help="samples folder from generate")
    t.add_argument("--out", required=True, help="model folder (e.g. runs/surrogates/NAME)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--tune-trials", type=int, default=0, help="Optuna trials for XGBoost hyperparameters")
    t.add_argument("--n-estimators", type=int, default=14,
                   help="maximum boosting rounds (more, with a lower --learning-rate: more accurate, slower)")
    t.add_argument("--learning-rate", type=float, help="XGBoost learning rate (default 0.4)")
    t.add_argument("--max-depth", type=int, help="XGBoost tree depth (default 8)")
    t.add_argument("--jobs", type=int, default=-1, help="XGBoost threads (-1: all cores)")
    t.add_argument("--mlflow", action="store_true", help="log params, metrics, model and plots to MLflow")
    t.add_argument("--experiment", default="vtrain-surrogate", help="MLflow experiment name")
    t.add_argument("--json", action="store_true")


def _add_evaluate(sub: Any) -> None:
    e = sub.add_parser("evaluate", help="score a model on a samples folder")
    e.add_argument("--model", required=True)
    e.add_argument("--samples", required=True)
    e.add_argument("--allow-stale", action="store_true", help="accept a changed hardware profile")
    e.add_argument("--json", action="store_true")


def _add_predict(sub: Any) -> None:
    p = sub.add_parser("predict", help="predict one job file")
    p.add_argument("--model", required=True)
    p.add_argument("job", help="job file (.yaml/.json)")
    p.add_argument("--allow-stale", action="store_true", help="accept a changed hardware profile")
    p.add_argument("--json", action="store_true")


def _add_retrain(sub: Any) -> None:
    r = sub.add_parser("retrain", help="retrain a model's space under a new hardware profile")
    r.add_argument("--model", required=True)
    r.add_argument("--hardware", required=True, metavar="NAME_OR_FILE",
                   help="new hardware profile: catalog id or a (calibrated) hardware YAML")
    r.add_argument("--out", required=True, help="new model folder")
    r.add_argument("--n", type=int, help="samples (default: as many as the old model's)")
    r.add_argument("--samples-out", help="where to keep the new samples (default: OUT/samples)")
    r.add_argument("--jobs", type=int, default=-1)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--resume", action="store_true")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--json", action="store_true")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vtrain_ml.surrogate",
                                description="Sample the exact simulator, train and serve the "
                                            "gradient-boosted surrogate.")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_add_generate, _add_train, _add_evaluate, _add_predict, _add_retrain):
        add(sub)
    for action in sub.choices.values():
        add_common(action)
    return p


def _hardware(names: Sequence[str]) -> dict[str, Any]:
    from simulator.job.catalog import resolve_hardware

    specs = [resolve_hardware(n) for n in names]
    by_name = {s.name: s for s in specs}
    if len(by_name) != len(specs):
        from simulator.errors import ConfigError

        raise ConfigError("--hardware: two profiles share one GPU name; sample one at a time")
    return by_name


def _check_jobs(jobs: int) -> None:
    """joblib's n_jobs: -1 all cores, -2 all but one, ...; 0 means nothing and is refused."""
    if jobs == 0:
        from simulator.errors import ConfigError

        raise ConfigError("--jobs 0: give a number of workers (1, 2, ...) or -1 for all cores")


def _generate(args: argparse.Namespace) -> int:
    check_dir_output("--out", args.out)
    _check_jobs(args.jobs)
    if args.n < 1 or args.chunk_size < 1:
        from simulator.errors import ConfigError

        flag, value = ("--n", args.n) if args.n < 1 else ("--chunk-size", args.chunk_size)
        raise ConfigError(f"{flag} {value}: give a positive number of samples")
    from surrogate.artifact import hardware_source
    from surrogate.generate import Backend, GenerateConfig, generate
    from surrogate.space import Method, default_space_path, load_space

    space = load_space(args.space or default_space_path())
    names = tuple(args.hardware) if args.hardware else space.hardware
    space = space.with_hardware(tuple(names))
    hardware = _hardware(names)
    sources = {name: hardware_source(given) for name, given in zip(hardware, names, strict=True)}
    config = GenerateConfig(space, hardware, args.n, args.seed, Method(args.method),
                            args.chunk_size, args.jobs, Backend(args.backend), sources, args.checkpoint_s)
    report = generate(config, args.out, resume=args.resume, progress=not args.no_progress,
                      stop=stop_requested)
    s = report.rejections
    sys.stdout.write(
        f"{report.n} samples in {report.out} ({report.simulated} simulated now in {report.seconds:.1f} s, "
        f"{report.samples_per_s:.0f} samples/s)\n"
        f"sampling: {s['drawn']} drawn, {s['rejected']} rejected\n"
        + "".join(f"  {count:6d}  {reason}\n" for reason, count in s["reasons"].items()))
    return 0


def _write(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    sys.stdout.write((json.dumps(data, indent=1, default=str) if args.json else text) + "\n")


def _metrics_text(m: dict[str, Any]) -> str:
    return (f"  n={m['n']}  time MAPE {100 * m['mape']:.2f}%  median {100 * m['median_ape']:.2f}%  "
            f"P95 {100 * m['p95_ape']:.2f}%  Spearman {m['spearman']:.4f}  Kendall {m['kendall']:.4f}\n"
            f"  memory MAPE {100 * m['memory_mape']:.2f}%  fits-in-memory accuracy "
            f"{100 * m['fits_accuracy']:.2f}%  batch {m['batch_predictions_per_s']:,.0f} predictions/s")


def _track(args: argparse.Namespace, result: Any) -> str:
    from surrogate.features import JOB_COLUMNS
    from surrogate.plots import evaluation_figures
    from vtrain_ml import tracking

    report = result.report
    with tracking.start_run(args.experiment, Path(args.out).name) as run:
        model = result.model
        tracking.log_params({"samples": args.samples, "seed": args.seed, "tune_trials": args.tune_trials,
                             "n_estimators": model.n_estimators, "n_fit": report["n_fit"],
                             "best_iterations": model.best_iterations_, **model.xgb_params})
        tracking.log_metrics({"test": report["test"], "baseline": report["baseline"],
                              "train_seconds": report["train_seconds"]})
        tracking.save_figures(evaluation_figures(result.test, report["test"]["by_region"]))
        tracking.log_artifact(result.path / "metadata.json")
        uri = tracking.log_surrogate(result.path, result.test[list(JOB_COLUMNS)].head(5))
        return f"{uri} (run {run.info.run_id}, tracking {tracking.tracking_uri()})"


def _train(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    check_dir_output("--out", args.out)
    _check_jobs(args.jobs)
    from surrogate.workflow import TrainConfig, train

    xgb = {"n_jobs": args.jobs, "learning_rate": args.learning_rate, "max_depth": args.max_depth}
    config = TrainConfig(args.seed, args.tune_trials, args.n_estimators,
                         xgb_params={k: v for k, v in xgb.items() if v is not None})
    result = train(args.samples, args.out, config)
    r = result.report
    data = {k: v for k, v in r.items()}
    text = (f"trained on {r['n_fit']} samples ({r['n_test']} held out by model shape) in "
            f"{r['train_seconds']:.1f} s; model in {result.path}\n"
            f"held-out test:\n{_metrics_text(r['test'])}\n"
            f"  (trivial baseline MAPE {100 * r['baseline']['mape']:.1f}%)")
    if args.mlflow:
        data["mlflow_model_uri"] = _track(args, result)
        text += f"\nMLflow model: {data['mlflow_model_uri']}"
    return data, text


def _evaluate(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from surrogate.workflow import evaluate_folder

    m = evaluate_folder(args.model, args.samples, args.allow_stale)
    regions = "".join(f"  by {name}: " + ", ".join(f"{k} {100 * v:.2f}%" for k, v in values.items()) + "\n"
                      for name, values in m["by_region"].items())
    return m, f"{args.model} on {args.samples}:\n{_metrics_text(m)}\n{regions.rstrip()}"


def _predict(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from surrogate.workflow import predict_job

    p = predict_job(args.model, args.job, args.allow_stale)
    for w in p["warnings"]:
        sys.stderr.write(f"warning: {w}\n")
    gib = 1024**3
    text = (f"iteration time  {p['iteration_time_s']:.4g} s\n"
            f"peak memory     {p['peak_memory_bytes'] / gib:.2f} GiB of "
            f"{p['memory_capacity_bytes'] / gib:.0f} GiB "
            f"({'fits' if p['fits_in_memory'] else 'does NOT fit'})")
    return p, text


def _retrain(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    check_dir_output("--out", args.out)
    check_dir_output("--samples-out", args.samples_out)
    _check_jobs(args.jobs)
    from surrogate.workflow import RetrainConfig, retrain

    r = retrain(args.model, args.out, RetrainConfig(args.hardware, args.n, args.seed, args.jobs,
                                                    args.resume, not args.no_progress), args.samples_out)
    old, new = r["old_model_on_new_test"], r["new_model_on_new_test"]
    old_text = (_metrics_text(old) if old is not None else
                f"  not compared: it was saved with schema_version {r['old_schema_version']}, whose "
                "features this vtrain-ml no longer computes")
    text = (f"new samples {r['samples']}; new model {r['model']} (trained in {r['train_seconds']:.1f} s)\n"
            f"old model on the new hardware's held-out test:\n{old_text}\n"
            f"new model on the same rows:\n{_metrics_text(new)}")
    return r, text


# what each sub-command imports from the `surrogate` extra (checked before any work)
NEEDS = {"generate": ("pyarrow",), "train": ("xgboost", "sklearn", "pyarrow"),
         "evaluate": ("xgboost", "pyarrow"), "predict": ("xgboost",),
         "retrain": ("xgboost", "sklearn", "pyarrow")}


def _main(args: argparse.Namespace) -> int:
    needs(*NEEDS[args.command])
    if args.command == "generate":
        return _generate(args)
    handlers = {"train": _train, "evaluate": _evaluate, "predict": _predict, "retrain": _retrain}
    data, text = handlers[args.command](args)
    _write(args, data, text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), argv)

