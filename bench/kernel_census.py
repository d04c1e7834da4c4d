"""Count the GPU launches of each real H100 iteration trace, and what the eager graph predicts.

    python bench/kernel_census.py [TRACE_DIR]     (default ../shared/data/traces/h100)

A launch is a kernel, memset or memcpy event of the torch.profiler (Kineto) trace: each costs
the host a dispatch and the GPU a launch gap, which is what bounds small models. The model's
count is the graph's launches per micro-batch (embedding, layers, head, fractional for
accumulation that runs from the second micro-batch) times the micro-batches, plus the fused
AdamW launches. The per-layer launch counts of simulator/graph/eager.py were read off these
traces (one layer's forward kernels in order; backward by autograd node), not fitted.
Reads every trace whole (a few seconds each).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from simulator import load_job  # noqa: E402
from simulator.graph.blocks import build_graph  # noqa: E402
from simulator.memory.states import stage_param_counts  # noqa: E402
from simulator.timeline.tail import optimizer_op  # noqa: E402

LAUNCHES = ("kernel", "gpu_memset", "gpu_memcpy")


def trace_launches(path: Path) -> int:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return sum(1 for e in events if e.get("cat") in LAUNCHES)


def model_launches(job_file: Path) -> float:
    job = load_job(job_file)
    graph = build_graph(job)

    def per_microbatch(block) -> float:
        return sum(op.kernels for op in block.forward + block.backward + block.recompute)

    layers = job.model.num_layers * per_microbatch(graph.layer)
    per = layers + per_microbatch(graph.embedding) + per_microbatch(graph.head)
    return job.num_microbatches * per + optimizer_op(stage_param_counts(job)[0], job).kernels


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else ROOT.parent / "shared" / "data" / "traces" / "h100"
    jobs = ROOT / "data" / "measured" / "h100" / "jobs"
    print(f"{'trace':46s} {'launches':>8s} {'model':>8s} {'error':>7s}")
    for trace in sorted(folder.glob("*.json.gz")):
        name = trace.name.removesuffix(".json.gz")
        measured = trace_launches(trace)
        job = jobs / f"{name}.yaml"
        model = model_launches(job) if job.is_file() else float("nan")
        print(f"{name:46s} {measured:8d} {model:8.0f} {100 * (model / measured - 1):+6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
