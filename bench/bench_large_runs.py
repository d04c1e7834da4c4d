"""Published large training runs: predicted vs published, with the breakdown that explains it.

    python bench/bench_large_runs.py [--published DIR] [--modern DIR] [--no-scale-loss]

For every run of every family that `bench/published_runs.py` builds from `data/published/` (held
out: nothing is fitted to it; a missing folder skips its families with a line) and the
Megatron-LM H100 table of `../shared/data/modern/` (check only), prints the published metric
(iteration time, or MFU where only that is published), the prediction with shipped defaults,
the error, where the predicted time goes (shares of the iteration: compute = forward + backward +
recompute + host overhead; tp, pp, dp = exposed communication; bubble; scale = the expected
slowest rank, `scale_loss`) and the predicted peak memory per GPU. Then the MAPE per family and
the memory finding for Meta's Llama 3 405B layouts (`memory_finding`). `--no-scale-loss` repeats
the run with `cluster.jitter` zeroed, to show what the straggler term contributes.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from published_runs import ASSUMPTIONS, MODERN, PUBLISHED, Run, published_runs  # noqa: E402

from simulator import job_from_dict, simulate  # noqa: E402
from simulator.errors import VTrainError  # noqa: E402
from simulator.job.enums import CollectiveKind  # noqa: E402
from simulator.job.specs import GiB  # noqa: E402
from simulator.network.topology import dp_placement  # noqa: E402
from simulator.report.result import SimulationResult  # noqa: E402
from simulator.simulate import default_network  # noqa: E402

SHARES = (("compute", ("forward", "backward", "recompute", "overhead")), ("tp", ("tp_comm",)),
          ("pp", ("pp_comm",)), ("dp", ("dp_comm_exposed", "embedding_sync")),
          ("bubble", ("pipeline_bubble",)), ("opt", ("optimizer",)), ("scale", ("scale_loss",)))


def _with_jitter(job: dict[str, Any], off: bool) -> dict[str, Any]:
    if not off:
        return job
    cluster = {**job["cluster"], "jitter": {"gpu_speed_cv": 0.0, "kernel_time_cv": 0.0}}
    return {**job, "cluster": cluster}


def predict(run: Run, no_scale_loss: bool) -> SimulationResult:
    assert run.job is not None
    return simulate(job_from_dict(_with_jitter(run.job, no_scale_loss)))


def error(run: Run, result: SimulationResult) -> tuple[float, float]:
    """(predicted, signed error of the prediction in the published metric)."""
    pred = result.iteration_time_s if run.metric == "time_s" else result.mfu
    return pred, pred / run.published - 1.0


def shares(result: SimulationResult) -> str:
    total = result.iteration_time_s
    parts = [f"{name} {sum(result.breakdown.get(k, 0.0) for k in keys) / total:4.0%}"
             for name, keys in SHARES]
    return " ".join(parts)


def _row(run: Run, result: SimulationResult) -> str:
    pred, err = error(run, result)
    unit = "s" if run.metric == "time_s" else "MFU"
    fmt = (lambda x: f"{x:7.2f}") if run.metric == "time_s" else (lambda x: f"{x:7.1%}")
    memory = result.peak_memory_bytes / GiB
    fits = "" if result.fits_in_memory else f" > {result.memory_capacity_bytes / GiB:.0f}"
    return (f"  {run.label:44s} {unit:>3s} {fmt(run.published)} {fmt(pred)} {err:+7.1%}  "
            f"{shares(result)}  {memory:5.1f} GiB{fits}")


def report(runs: list[Run], no_scale_loss: bool) -> dict[str, list[float]]:
    errors: dict[str, list[float]] = defaultdict(list)
    family = None
    for run in runs:
        if run.job is None:
            continue
        if run.family != family:
            family = run.family
            print(f"\n{family}\n  assumptions: {ASSUMPTIONS.get(family, '')}")
            print(f"  {'run':44s} {'':3s} {'publ.':>7s} {'pred.':>7s} {'error':>7s}  "
                  f"shares of the predicted iteration{'':37s} peak/GPU")
        try:
            result = predict(run, no_scale_loss)
        except VTrainError as exc:
            print(f"  {run.label:44s} cannot simulate: {exc}")
            continue
        errors[family].append(error(run, result)[1])
        print(_row(run, result) + (f"   ({run.note})" if run.note else ""))
    return errors


def print_summary(errors: dict[str, list[float]], runs: list[Run]) -> None:
    print("\nper family (MAPE of the published metric; signed mean of predicted / published - 1: "
          "+ is slower for a time, faster for an MFU)")
    for family, errs in errors.items():
        mape = sum(abs(e) for e in errs) / len(errs)
        mean = sum(errs) / len(errs)
        verdict = "within 10%" if mape <= 0.10 else "MISSES 10%"
        print(f"  {family:46s} n={len(errs):2d}  MAPE {mape:6.1%}  mean {mean:+6.1%}  {verdict}")
    skipped: dict[str, int] = defaultdict(int)
    for run in runs:
        if run.job is None:
            skipped[run.skip] += 1
    for reason, n in skipped.items():
        print(f"  skipped {n:2d} row(s): {reason}")


def memory_finding(runs: list[Run]) -> None:
    """Meta's Llama 3 405B layouts: every term of the fullest GPU, and what the publication's
    own changes to the schedule would give (Llama Team 2024, Sec. 3.3.2)."""
    llama = [r for r in runs if r.family.startswith("Llama 3") and r.job is not None]
    if not llama:
        return
    print("\nLlama 3 405B memory (Meta trained these layouts on 80 GB H100 without activation "
          "recompute):")
    for run in llama:
        assert run.job is not None
        result = simulate(job_from_dict(run.job))
        stage = max(result.stages, key=lambda s: s.memory.total_bytes)
        mem = stage.memory.to_dict()
        terms = ("weights_bytes", "gradients_bytes", "optimizer_states_bytes", "activations_bytes",
                 "workspace_bytes", "context_bytes")
        listed = ", ".join(f"{k.removesuffix('_bytes')} {mem[k] / GiB:.1f}" for k in terms)
        print(f"  {run.label}: stage {stage.stage} peaks at {mem['total_bytes'] / GiB:.1f} GiB "
              f"({listed}) at the {mem['moment']} moment")
        _what_meta_changed(run, result, stage.stage)


def _what_meta_changed(run: Run, result: SimulationResult, stage: int) -> None:
    """Megatron's interleaved warm-up holds 2(p - s - 1) + (v - 1) N + 1 model chunks in flight,
    N = p by default in Megatron (`microbatch_group_size_per_vp_stage`); Meta made N tunable and
    shards the gradients (FSDP). The simulator's N follows Megatron-Core, which refuses N < p, so
    Meta's smaller N and the sharded gradients' memory are computed from the terms above; the
    sharded gradients' time is then simulated (`_per_microbatch_reduce_scatter`)."""
    assert run.job is not None
    par = run.job["parallel"]
    p, v = par["pp"], par["virtual_stages"]
    m = run.job["training"]["global_batch_size"] // par["dp"]
    mem = result.stages[stage].memory.to_dict()
    in_flight = min(2 * (p - stage - 1) + (v - 1) * p, m * v) + 1
    per_chunk = mem["activations_bytes"] / in_flight
    grads, dp = mem["gradients_bytes"], par["dp"]
    sharded = mem["total_bytes"] - grads + grads / dp + grads / v  # one chunk's buffer unsharded
    print(f"    chunks in flight on stage {stage}: {in_flight} (Megatron's N = pp = {p}), "
          f"{per_chunk / GiB:.2f} GiB each")
    print(f"    with FSDP-sharded fp32 gradients (Meta Sec. 3.3.2; one chunk unsharded): "
          f"{sharded / GiB:.1f} GiB")
    for n in (12, 8):
        fewer = min(2 * (p - stage - 1) + (v - 1) * n, m * v) + 1
        total = sharded - (in_flight - fewer) * per_chunk
        print(f"    ... and Meta's tunable N = {n} contiguous micro-batches: {fewer} chunks in "
              f"flight, {total / GiB:.1f} GiB")
    _per_microbatch_reduce_scatter(run, result, grads, m)


def _per_microbatch_reduce_scatter(run: Run, result: SimulationResult, grads: float, m: int) -> None:
    """Meta shards the gradients (Sec. 3.3.2), which Megatron-FSDP's `optim_grads` (ZeRO-2)
    does by reduce-scattering every micro-batch's FP32 gradients: simulated here, beside the
    NIC time those reductions take, so the two readings of Meta's text bracket its MFU."""
    assert run.job is not None
    job = job_from_dict(run.job)
    one = default_network(job).time(CollectiveKind.REDUCE_SCATTER, grads, dp_placement(job))
    compute = sum(result.breakdown[k] for k in ("forward", "backward", "recompute"))
    print(f"    reduce-scattering each micro-batch's FP32 gradients costs {one:.2f} s x {m} "
          f"micro-batches = {one * m:.1f} s of NIC time per iteration against {compute:.1f} s of "
          f"compute; the published MFU implies "
          f"{result.iteration_time_s * result.mfu / run.published:.1f} s per iteration")
    sharded = {**run.job, "parallel": {**run.job["parallel"], "data_parallel_sharding": "optim_grads"}}
    try:
        zero2 = simulate(job_from_dict(sharded))
    except VTrainError as exc:
        print(f"    data_parallel_sharding=optim_grads: not simulated ({exc})")
        return
    peak = max(stage.memory.total_bytes for stage in zero2.stages)
    print(f"    data_parallel_sharding=optim_grads (per-micro-batch reduce-scatter, simulated): "
          f"{zero2.iteration_time_s:.2f} s, MFU {zero2.mfu:.1%} ({zero2.mfu / run.published - 1:+.1%} "
          f"against the published {run.published:.1%}), {peak / GiB:.1f} GiB on the fullest GPU")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--published", type=Path, default=PUBLISHED)
    ap.add_argument("--modern", type=Path, default=MODERN)
    ap.add_argument("--no-scale-loss", action="store_true", help="zero cluster.jitter")
    args = ap.parse_args(argv)
    runs, missing = published_runs(args.published, args.modern)
    for line in missing:
        print(line)
    if not any(r.job is not None for r in runs):
        print("no published runs to check")
        return 0
    errors = report(runs, args.no_scale_loss)
    print_summary(errors, runs)
    memory_finding(runs)
    return 0 if all(math.isfinite(e) for errs in errors.values() for e in errs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
