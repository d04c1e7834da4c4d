"""The megatron-core stack on this CPU: a 2-layer trace reproduces itself and predicts deeper models.

The procedure of `bench/bench_traces.py --only-cpu` (its `deep_cpu`, there for the reference
stack), for any stack and job: each round traces the 2-layer shard (`trace`, which also measures
it unprofiled: the median of `repeats` iterations), then measures every deeper model the same way
(median of `repeats` unprofiled iterations after 2 warm-ups) and predicts it from the 2-layer
profile. Rounds alternate the order of the deep models (the machine is shared; every round is
printed). Also per round, self-reproduction of the traced 2-layer job: with the trace's own
(profiler-inflated) host times against the traced iteration, and with the profiler's cost taken
out against the unprofiled median.

Run: python bench/bench_megatron_core.py [--stacks megatron-core,reference] [--rounds 5]
                                          [--layers 4,8,24]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from profiler.stacks.runner import TraceRequest, plan, prepare, run_traces, timed  # noqa: E402
from simulator.loaders import load_job  # noqa: E402
from simulator.profile_format import read_profile  # noqa: E402
from simulator.specs import Job  # noqa: E402
from simulator.traced import TracedOptions, simulate_traced  # noqa: E402
from simulator.validation import validate_job  # noqa: E402

JOB = ROOT / "tests" / "profiler_tests" / "tiny_megatron_core.yaml"


def _err(pred: float, ref: float) -> float:
    return pred / ref - 1.0


def _summary(name: str, errors: list[float], target: str) -> None:
    e = sorted(errors)
    print(f"  {name}: median error {statistics.median(e):+.1%} over {len(e)} rounds "
          f"(range {e[0]:+.1%} to {e[-1]:+.1%}; target: {target})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stacks", default="megatron-core",
                    help="comma-separated; with several, each round runs every stack (alternating "
                         "their order), so they see the same load")
    ap.add_argument("--job", type=Path, default=JOB)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", default="4,8,24", help="deeper models to predict and measure")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    logging.disable(logging.WARNING)
    job = load_job(args.job)
    stacks = args.stacks.split(",")
    layers = tuple(int(n) for n in args.layers.split(","))
    print(f"{', '.join(stacks)} on this CPU: {job.model.name} ({job.model.hidden_size} hidden, "
          f"seq {job.model.seq_length}, 2 micro-batches, 1 thread); median of {args.repeats} "
          f"unprofiled iterations, as the trace's own unprofiled time; {args.rounds} rounds; "
          f"load average {os.getloadavg()[0]:.1f}")
    results = {s: Results(layers) for s in stacks}
    for k in range(args.rounds):
        for stack in (stacks if k % 2 == 0 else stacks[::-1]):
            one_round(stack, job, layers, args.repeats, k, results[stack])
    print(f"load average {os.getloadavg()[0]:.1f}")
    for stack in stacks:
        results[stack].summary(stack)


@dataclass
class Results:
    layers: tuple[int, ...]
    own: list[float] = field(default_factory=list)
    own_profiled: list[float] = field(default_factory=list)
    deep: dict[int, list[float]] = field(default_factory=dict)
    deep_no_opt: dict[int, list[float]] = field(default_factory=dict)
    per_layer: list[tuple[float, float]] = field(default_factory=list)

    def summary(self, stack: str) -> None:
        print(stack)
        _summary("2-layer job from its own trace, profiler's cost taken out, vs unprofiled",
                 self.own, "within 3%")
        _summary("2-layer job from its own trace, profiled host times, vs the traced iteration",
                 self.own_profiled, "within 3%")
        for n in self.layers:
            _summary(f"{n} layers from the 2-layer trace", self.deep[n], "within 5%")
        for n in self.layers:
            _summary(f"{n} layers without the optimizer step (predicted and measured)",
                     self.deep_no_opt[n], "diagnostic")
        pred, meas = (statistics.median(x) for x in zip(*self.per_layer, strict=True))
        print(f"  one more layer (2 micro-batches): {pred * 1e3:.2f} ms predicted, "
              f"{meas * 1e3:.2f} ms measured between {min(self.layers)} and {max(self.layers)} "
              f"layers ({_err(pred, meas):+.1%})")


def one_round(stack: str, job: Job, layers: tuple[int, ...], repeats: int, k: int,
              out: Results) -> None:
    tmp = Path(tempfile.mkdtemp())
    req = TraceRequest((("tiny", job),), stack, "cpu", layers=2, micro_batches=2, warmup=2,
                       repeats=repeats, threads=1, seed=k)
    list(run_traces(req, tmp, None))
    traces = read_profile(tmp).traces
    assert traces is not None
    row = traces.iloc[0]
    shallow = validate_job(plan(req)[0].job)
    profiled = simulate_traced(shallow, str(tmp), TracedOptions(profiled_host=True))
    out.own_profiled.append(_err(profiled.iteration_time_s, float(row["iteration_s"])))
    out.own.append(_err(simulate_traced(shallow, str(tmp)).iteration_time_s,
                        float(row["measured_iteration_s"])))
    got: dict[int, tuple[float, float]] = {}
    opt: dict[int, tuple[float, float]] = {}
    for n in (layers if k % 2 == 0 else layers[::-1]):
        request = TraceRequest((("tiny", job),), stack, "cpu", layers=n, micro_batches=2,
                               warmup=2, repeats=repeats, threads=1, seed=k)
        item = plan(request)[0]
        run = prepare(item, request)
        _, wall = timed(run, repeats)
        result = simulate_traced(validate_job(item.job), str(tmp))
        got[n] = (result.iteration_time_s, statistics.median(wall))
        out.deep.setdefault(n, []).append(_err(*got[n]))
        opt[n] = (result.breakdown["optimizer"], statistics.median(run.optimizer_s[-repeats:]))
        out.deep_no_opt.setdefault(n, []).append(_err(got[n][0] - opt[n][0], got[n][1] - opt[n][1]))
    lo, hi = min(layers), max(layers)
    out.per_layer.append(((got[hi][0] - got[lo][0]) / (hi - lo),
                          (got[hi][1] - got[lo][1]) / (hi - lo)))
    print(f"  round {k + 1} {stack}: 2 layers {float(row['measured_iteration_s']) * 1e3:.1f} ms "
          f"measured, itself {out.own[-1]:+.1%} (profiled {out.own_profiled[-1]:+.1%}); "
          + "; ".join(f"{n} layers {got[n][0] * 1e3:.1f} ms predicted, {got[n][1] * 1e3:.1f} ms "
                      f"measured ({out.deep[n][-1]:+.1%})" for n in layers), flush=True)
    # the optimizer step's host time, predicted (the traced phase, scaled) and measured alone
    print("    optimizer step: " + "; ".join(
        f"{n} layers {opt[n][0] * 1e3:.1f} ms predicted, {opt[n][1] * 1e3:.1f} ms measured"
        for n in layers), flush=True)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
