"""How good is the profiled kernel model's interpolation, and how far is the analytic model?

For each source of measured ops it prints, per op group (kind/variant/phase):
  * n             unique measured shapes
  * analytic      MAPE of the analytic model of the measured GPU against the measurements
  * loso          leave-one-shape-out error of the interpolation (fit on every other shape of
                  the group, predict the held-out one): MAPE and median APE
  * lomo          leave-one-model-out (Vidur only): every shape of one model held out at once
Then, with Vidur's H100 operators as the profile, the simulated iteration time of a few jobs
next to the analytic model's, and the profile coverage.

Sources: Vidur's published H100/A100 forward-operator timings (../shared/data/profiles/vidur,
see profiler/vidur.py) and any profile directories given with --profile.

    .venv/bin/python bench/profile_interpolation.py [--vidur DIR] [--profile DIR ...]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np

from profiler.vidur import read_vidur_gpu
from simulator import job_from_dict, simulate
from simulator.costs.analytic import AnalyticKernelModel
from simulator.costs.interpolation import RatioInterpolator, size_features
from simulator.costs.profile_format import read_profile
from simulator.costs.profiled import ProfiledKernelModel, ops_from_table
from simulator.graph.ops import Op
from simulator.job.catalog import resolve_hardware
from simulator.job.enums import Precision

ROOT = Path(__file__).resolve().parents[1]
MAX_HELD_OUT = 400  # held-out points per group (seeded sample) to keep the bench to seconds
VIDUR_GPUS = {"h100": "h100-sxm-80gb", "a100": "a100-80gb"}
JOBS = [  # (model preset, tp, pp, gpus, micro-batch, global batch, seq)
    ("llama-2-7b", 1, 1, 8, 1, 64, 4096),
    ("llama-2-7b", 2, 1, 8, 2, 64, 4096),
    ("llama-2-70b", 8, 4, 64, 1, 128, 4096),
    ("llama-3-8b", 1, 1, 8, 1, 64, 2048),
    ("llama-3-70b", 8, 4, 64, 1, 128, 2048),
]


def _group(op: Op) -> str:
    return "/".join(x for x in (op.kind.value, op.variant, op.phase.value) if x)


def _dedupe(rows: list[tuple[Op, float]]) -> dict[tuple[object, ...], tuple[Op, float]]:
    acc: dict[tuple[object, ...], list[float]] = defaultdict(list)
    first: dict[tuple[object, ...], Op] = {}
    for op, s in rows:
        acc[op.profile_key].append(s)
        first.setdefault(op.profile_key, op)
    return {k: (first[k], float(np.median(v))) for k, v in acc.items()}


def _features(ops: list[Op]) -> np.ndarray:
    return size_features(np.array([o.flops for o in ops]), np.array([o.bytes for o in ops]))


def _held_out_errors(ops: list[Op], secs: np.ndarray, analytic: AnalyticKernelModel,
                     folds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Absolute percentage errors of predicting each held-out fold from the other folds."""
    base = np.array([analytic.seconds(o) for o in ops])
    x, y = _features(ops), np.log(secs / base)
    errors = []
    labels = np.unique(folds)
    if len(labels) > MAX_HELD_OUT:
        labels = rng.choice(labels, MAX_HELD_OUT, replace=False)
    for label in labels:
        test = folds == label
        if test.all():
            continue
        model = RatioInterpolator().fit(x[~test], y[~test])
        idx = np.flatnonzero(test)
        if len(idx) > MAX_HELD_OUT:  # a large held-out model: a seeded sample of its shapes
            idx = rng.choice(idx, MAX_HELD_OUT, replace=False)
        pred = base[idx] * np.exp(model.predict(x[idx]))
        errors.extend(np.abs(pred - secs[idx]) / secs[idx])
    return np.array(errors)


def report_source(name: str, rows_by_model: dict[str, list[tuple[Op, float]]],
                  analytic: AnalyticKernelModel | None, rng: np.random.Generator) -> None:
    merged: dict[str, list[tuple[Op, float, int]]] = defaultdict(list)
    for m, (model, rows) in enumerate(rows_by_model.items()):
        del model
        for op, s in _dedupe(rows).values():
            merged[_group(op)].append((op, s, m))
    ref = analytic or AnalyticKernelModel(resolve_hardware("h100-sxm-80gb"), Precision.BF16)
    print(f"\n== {name} ==")
    print(f"{'op group':<28}{'n':>6}{'analytic MAPE':>15}{'loso MAPE':>11}{'loso medAPE':>12}"
          f"{'lomo MAPE':>11}")
    for group in sorted(merged):
        items = merged[group]
        ops = [o for o, _, _ in items]
        secs = np.array([s for _, s, _ in items])
        ana = (f"{np.mean(np.abs(np.array([analytic.seconds(o) for o in ops]) - secs) / secs):15.1%}"
               if analytic else f"{'-':>15}")
        if len(items) < 3:
            print(f"{group:<28}{len(items):>6}{ana}{'(too few)':>11}")
            continue
        loso = _held_out_errors(ops, secs, ref, np.arange(len(items)), rng)
        models = np.array([m for _, _, m in items])
        lomo = (f"{np.mean(_held_out_errors(ops, secs, ref, models, rng)):11.1%}"
                if len(np.unique(models)) > 1 else f"{'-':>11}")
        print(f"{group:<28}{len(items):>6}{ana}{np.mean(loso):11.1%}{np.median(loso):12.1%}{lomo}")


def _job(preset: str, tp: int, pp: int, gpus: int, mb: int, gbs: int, seq: int):
    return job_from_dict({
        "model": {"preset": preset, "seq_length": seq},
        "training": {"global_batch_size": gbs, "micro_batch_size": mb, "precision": "bf16",
                     "flash_attention": True, "recompute": "selective"},
        "parallel": {"tp": tp, "pp": pp, "sequence_parallel": tp > 1},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": gpus}})


def report_jobs(rows: list[tuple[Op, float]]) -> None:
    print("\n== simulated iteration time on H100: analytic vs Vidur-H100-profiled ==")
    print(f"{'job':<44}{'analytic':>11}{'profiled':>11}{'change':>9}   coverage (meas/interp/analytic)")
    for spec in JOBS:
        job = _job(*spec)
        analytic = AnalyticKernelModel(job.hardware, job.training.precision)
        model = ProfiledKernelModel.from_measurements(list(_dedupe(rows).values()), analytic)
        a, p = simulate(job).iteration_time_s, simulate(job, kernels=model)
        cov = p.profile_coverage
        label = f"{spec[0]} tp{spec[1]} pp{spec[2]} {spec[3]}gpu mb{spec[4]} gbs{spec[5]} seq{spec[6]}"
        print(f"{label:<44}{a:10.3f}s{p.iteration_time_s:10.3f}s{p.iteration_time_s / a - 1:9.1%}   "
              f"{cov['measured']:.0%}/{cov['interpolated']:.0%}/{cov['analytic']:.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vidur", type=Path, default=ROOT.parent / "shared/data/profiles/vidur")
    parser.add_argument("--profile", type=Path, action="append", default=[])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    if args.vidur.is_dir():
        for gpu, hw in VIDUR_GPUS.items():
            data = read_vidur_gpu(args.vidur, gpu)
            analytic = AnalyticKernelModel(resolve_hardware(hw), Precision.FP16)
            report_source(f"Vidur {gpu} forward ops ({len(data)} models) vs analytic {hw}", data,
                          analytic, rng)
            if gpu == "h100":
                report_jobs([r for rows in data.values() for r in rows])
    else:
        print(f"(no Vidur data at {args.vidur}; pass --vidur)")
    for path in args.profile:
        profile = read_profile(path)
        assert profile.ops is not None, f"{path} has no ops table"
        hw = profile.meta.hardware
        analytic = AnalyticKernelModel(resolve_hardware(hw), profile.meta.precision) if hw else None
        report_source(f"profile {path} ({profile.meta.device.name})",
                      {"profile": ops_from_table(profile.ops)}, analytic, rng)


if __name__ == "__main__":
    main()
