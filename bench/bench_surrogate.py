"""Surrogate benchmark: the issue's targets, measured on this machine. Prints numbers, asserts nothing.

    python bench/bench_surrogate.py --samples runs/samples/a100-100k [--model runs/surrogates/NAME]
        [--gen-n 2000] [--jobs 2] [--allow-stale]

1. generation throughput: a fresh `--gen-n` sample run of the default space (joblib, --jobs);
2. training time on the samples' training split (all of it: ~85k of 100k) and held-out-group test
   metrics (MAPE, median/P95 APE, Spearman, Kendall, memory MAPE, fits-in-memory accuracy);
3. batch throughput: every sample predicted in one call (features included), best of 5 after a
   warm-up call;
4. single-job latency: `predict_one(job)` on one Job (record + scalar features + both models'
   trees walked in numpy, see surrogate.forest), median; and `predict([job])` (the DataFrame path
   and XGBoost calls) for comparison.
The machine is shared: run it several times and quote the best.
Targets (issue 5, speed raised by issue 16): MAPE <= 2%, P95 <= 6%, Spearman >= 0.995, memory
MAPE <= 2%, fits >= 99%, >= 1M predictions/s, <= 100 us per job, training on 100k < 2 min.
Before / after a change: run it alternately from two checkouts (`PYTHONPATH=.` in each, see
docs/speed.md), each with a model it trained itself (a model's schema version ties it to the
features of the code that trained it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from simulator.catalog import resolve_hardware
from surrogate.dataset import read_samples
from surrogate.encoding import OutOfSpaceWarning
from surrogate.features import JOB_COLUMNS, record_to_job
from surrogate.generate import GenerateConfig, generate
from surrogate.model import Surrogate
from surrogate.space import load_space
from surrogate.workflow import TrainConfig, train

TARGETS = {"mape": ("<=", 0.02), "p95_ape": ("<=", 0.06), "spearman": (">=", 0.995),
           "memory_mape": ("<=", 0.02), "fits_accuracy": (">=", 0.99),
           "batch_predictions_per_s": (">=", 1_000_000), "single_job_latency_us": ("<=", 100.0),
           "train_seconds": ("<=", 120.0)}


def bench_generation(n: int, jobs: int) -> dict[str, float]:
    space = load_space("data/spaces/default.yaml")
    spec = resolve_hardware("a100-80gb")
    with tempfile.TemporaryDirectory() as tmp:
        report = generate(GenerateConfig(space, {spec.name: spec}, n, seed=123, jobs=jobs),
                          Path(tmp) / "s", progress=False)
    return {"generation_n": n, "generation_seconds": report.seconds,
            "generation_samples_per_s": report.samples_per_s}


def bench_prediction(model: Surrogate, samples: Path) -> dict[str, float]:
    df = read_samples(samples)[list(JOB_COLUMNS)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        best = float("inf")
        model.predict(df)  # warm-up: serving caches, thread pools
        for _ in range(5):
            start = time.perf_counter()
            model.predict(df)
            best = min(best, time.perf_counter() - start)
        job = record_to_job(df.iloc[0].to_dict(), model.hardware_)
        latency = {}
        for name, call in (("single_job_latency_us", lambda: model.predict_one(job)),
                           ("single_job_dataframe_latency_us", lambda: model.predict([job]))):
            for _ in range(50):
                call()
            times = []
            for _ in range(300):
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            latency[name] = 1e6 * statistics.median(times)
    return {"batch_rows": len(df), "batch_predictions_per_s": len(df) / best, **latency}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", default="runs/samples/a100-100k")
    p.add_argument("--model", help="an existing model folder (skips training)")
    p.add_argument("--out", default="runs/surrogates/bench")
    p.add_argument("--gen-n", type=int, default=2000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--allow-stale", action="store_true",
                   help="time a model whose hardware profile changed since training")
    args = p.parse_args()
    results: dict[str, object] = {}
    if args.gen_n > 0:
        results.update(bench_generation(args.gen_n, args.jobs))
    if args.model:
        model = Surrogate.load(args.model, allow_stale=args.allow_stale)
        results["test"] = model.metadata_.get("test_metrics")
        results["train_seconds"] = model.metadata_.get("train_seconds")
    else:
        trained = train(args.samples, args.out, TrainConfig(seed=0))
        model = trained.model
        results.update({"n_fit": trained.report["n_fit"], "n_test": trained.report["n_test"],
                        "train_seconds": trained.report["train_seconds"],
                        "best_iterations": trained.report["best_iterations"],
                        "test": {k: v for k, v in trained.report["test"].items() if k != "by_region"},
                        "test_by_region": trained.report["test"]["by_region"],
                        "baseline_mape": trained.report["baseline"]["mape"]})
    results.update(bench_prediction(model, Path(args.samples)))
    print(json.dumps(results, indent=1, default=str))
    flat = {**(results.get("test") or {}), **results}  # type: ignore[dict-item]
    for key, (op, target) in TARGETS.items():
        if key in flat and isinstance(flat[key], int | float):
            ok = flat[key] <= target if op == "<=" else flat[key] >= target
            print(f"{key:28s} {flat[key]:>14.4g}  target {op} {target:g}  {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
