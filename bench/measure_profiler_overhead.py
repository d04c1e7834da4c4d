"""How much torch.profiler inflates the host time of an eager Megatron-structured training step.

Why: a Kineto trace's GPU kernel durations are real, its host timings are not -- every recorded
CPU op costs the profiler host time (record_shapes included). simulator.costs.traced takes that
inflation out of imported traces; without a measurement on the traced stack's own host (which
`python -m vtrain_ml.profile trace` records per trace) it uses this script's ratio of host time
without / with the profiler, measured on the reference stack (profiler/stacks/reference.py:
our Megatron-structured PyTorch GPT, the structure of the shared H100 runs' mgpt_ model) with
bf16 autocast and AdamW, on small shapes so that the host, not compute, is what is timed.
Best of several rounds (contention on a shared machine only adds time).

Run: python bench/measure_profiler_overhead.py [--rounds 5]   (needs torch; about a minute)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from profiler.stacks.runner import TraceRequest, plan, record  # noqa: E402
from profiler.trace.importer import analyze  # noqa: E402
from simulator.job.loaders import load_job  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()
    job = load_job(ROOT / "tests" / "data" / "traces" / "tiny_trace_gpt.yaml")
    ratios, per_op = [], []
    for k in range(args.rounds):
        request = TraceRequest((("tiny", job),), "reference", args.device, layers=args.layers,
                               micro_batches=2, warmup=3, repeats=7, threads=1, seed=k)
        with tempfile.TemporaryDirectory() as tmp:
            source = record(plan(request)[0], request, Path(tmp))
            row = analyze(source).rows["traces.csv"][0]
        ratios.append(row["host_ratio"])
        per_op.append(row["profiler_op_s"])
        print(f"  round {k + 1}: host {source.host_s * 1e3:.1f} ms without, "
              f"{source.profiled_host_s * 1e3:.1f} ms with the profiler: ratio {ratios[-1]:.3f}, "
              f"{per_op[-1] * 1e6:.2f} us per recorded op")
    print(f"reference stack, {args.layers} layers, {args.device}: host time without / with "
          f"torch.profiler(record_shapes=True) median {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}); "
          f"{statistics.median(per_op) * 1e6:.2f} us per recorded op")


if __name__ == "__main__":
    main()
