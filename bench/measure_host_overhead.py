"""Measure the host (framework + dispatch) cost per kernel launch of a training stack.

Why: on small layers training is bound by the host dispatching kernels, not by the GPU. The
simulator charges `Efficiency.host_overhead_s` per launch of its graph, weighted per direction by
the stack's `FrameworkSemantics.host_launch_cost` (simulator/timeline/lowering.py,
simulator/job/framework.py); both come from the two measurements below, never from the iteration
times we validate against.
A cost per launch is only meaningful together with the graph that counts the launches, so both
divide measured host time by the CURRENT graph's launches of the same work.

1. Megatron-style layer (default; needs torch): one transformer layer with Megatron-LM's Python
   structure, which is what costs host time -- linear layers as custom autograd Functions
   (LinearWithGradAccumulationAndAsyncCommunication), TorchScript bias-GeLU and bias-dropout-add,
   a scale-mask-softmax Function, reentrant activation checkpointing (full recompute), weight
   gradients added into `main_grad` buffers. Tensors are tiny, so the GPU is idle and the time is
   the host's. The time of forward + recompute + backward (and the script's `.sum()` loss and its
   seed gradient) is divided by the launches the simulator's graph counts for exactly this layer
   (`measured_layer_job`: h 64, 4 heads, sequence 16, micro-batch 1, fp16, full recompute,
   dropout 0.1, gradient accumulation not fused, as `main_grad.add_` does) plus those 2. On a GPU
   host (`--device cuda`) it also counts the launches the iteration really made (torch.profiler:
   kernels, memsets, memcpys of one profiled step) and prints both. On CPU it omits the CUDA
   launch path and the caching allocator, so it is a lower bound there.
2. Eager PyTorch (`--traced PROFILE ...`, no torch needed): the traced profiles that
   `python -m vtrain_ml.profile trace` writes on a GPU (data/profiles/h100-traced-*) hold, per
   traced shape, the host time of each phase under the profiler, the CPU ops it recorded and the
   host time the profiler added per op (`profiler_op_s`); `trace` also timed the iteration's host
   time WITHOUT the profiler and printed it ("host X ms without", the session log
   data/profiles/h100-traced-gpu-session-parts.log, `--host-log`). Each phase's share of the
   host time is its profiled time less the profiler's per-op cost; the shares split the
   unprofiled host time of the iteration. Pooled over the tp-1 shapes this gives the host
   time per launch of forward launches, backward launches (autograd's C++ engine: no Python),
   and the recompute launches of full recompute with everything the checkpoint machinery adds
   to the checkpointed layer's forward and backward (torch.utils.checkpoint, non-reentrant).
   Shapes whose iteration waited on the GPU (synchronizing calls) are left out: their host time
   without the profiler includes the wait.

Run: python bench/measure_host_overhead.py [--device cuda]
     python bench/measure_host_overhead.py --traced data/profiles/h100-traced-reference \
         data/profiles/h100-traced-huggingface --host-log data/profiles/h100-traced-gpu-session-parts.log
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from simulator import Job, job_from_dict
from simulator.costs.profile_format import read_profile
from simulator.graph.dense import build_layer

LOSS_LAUNCHES = 2  # the script's `.sum()` and the seed gradient of `.backward()`
H, HEADS, SEQ = 64, 4, 16
CLASSES = {"layer_forward": "forward", "embedding_forward": "forward", "head_forward": "forward",
           "layer_backward": "backward", "embedding_backward": "backward", "head_backward": "backward",
           "layer_recompute": "recompute", "optimizer": "optimizer"}
HOST_LOG = Path(__file__).resolve().parents[1] / "data" / "profiles" / "h100-traced-gpu-session-parts.log"
SYNC_LIMIT_S = 1e-3  # an iteration that waited longer than this on the GPU is left out
HOST_LINE = re.compile(r"traced (\S+): iteration [\d.]+ ms without the profiler, [\d.]+ ms traced; "
                       r"host ([\d.]+) ms without")


def measured_layer_job() -> Job:
    """The job whose one layer is the Megatron-style layer this script times."""
    return job_from_dict({
        "model": {"num_layers": 1, "hidden_size": H, "num_attention_heads": HEADS, "seq_length": SEQ,
                  "vocab_size": 128},
        "training": {"global_batch_size": 1, "micro_batch_size": 1, "precision": "fp16",
                     "recompute": "full", "framework": "megatron-lm",
                     "gradient_accumulation_fusion": False},
        "parallel": {"tp": 1, "pp": 1, "dp": 1},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 1}})


def graph_launches() -> int:
    """Launches of the measured iteration as the simulator's graph counts them."""
    block = build_layer(measured_layer_job())
    return sum(op.kernels for op in (*block.forward, *block.recompute, *block.backward)) + LOSS_LAUNCHES


def megatron_layer(device_name: str) -> None:
    import torch
    from megatron_style_layer import Layer  # the layer lives beside this script

    device = torch.device(device_name)
    where: dict[str, Any] = {"device": device,
                             "dtype": torch.float16 if device.type == "cuda" else torch.float32}
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layer = Layer(H, HEADS, **where)
    x = torch.randn(SEQ, 1, H, requires_grad=True, **where)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def step() -> None:
        torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=True).sum().backward()

    for _ in range(50):
        step()
    reps, blocks = 100, 9
    timings = []
    for _ in range(blocks):  # the fastest block: the machine is shared, contention only adds time
        sync()
        start = time.perf_counter()
        for _ in range(reps):
            step()
        sync()
        timings.append((time.perf_counter() - start) / reps)
    per_layer = min(timings)
    launches = graph_launches()
    print(f"Megatron-style layer, fwd + recompute + bwd: {per_layer * 1e6:.0f} us over {launches} "
          f"graph launches -> {per_layer / launches * 1e6:.1f} us host time per launch "
          f"(torch {torch.__version__}, {device.type}, best of {blocks} blocks of {reps})")
    if device.type == "cuda":
        real = cuda_launches(step)
        print(f"launches of one iteration on this GPU (torch.profiler): {real} -> "
              f"{per_layer / real * 1e6:.1f} us per real launch")


def cuda_launches(step: Any) -> int:
    """Kernels, memsets and memcpys one iteration launches on the GPU."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


def unprofiled_host(log: Path) -> dict[str, float]:
    """Trace file -> host seconds of an iteration without the profiler, as `trace` printed it."""
    return {m.group(1): float(m.group(2)) * 1e-3 for m in HOST_LINE.finditer(log.read_text())}


def traced_costs(profiles: list[Path], host_log: Path) -> pd.DataFrame:
    """Unprofiled host seconds and launches per class (forward, backward, recompute, optimizer)
    of every tp-1 traced shape without GPU waits, one row per shape."""
    unprofiled = unprofiled_host(host_log)
    rows = []
    for folder in profiles:
        prof = read_profile(folder)
        assert prof.traces is not None and prof.phases is not None, f"{folder} is not a traced profile"
        for _, t in prof.traces.iterrows():
            ph = prof.phases[(prof.phases.trace == t.trace) & prof.phases.phase.isin(CLASSES)]
            iterations = ph.loc[ph.phase == "optimizer", "instances"].sum() or 1
            waited = float((ph.instances * (ph.sync_s + ph.blocked_s)).sum()) / iterations
            if t.tp != 1 or t.file not in unprofiled or waited > SYNC_LIMIT_S:
                continue
            per_op = 0.0 if np.isnan(t.profiler_op_s) else float(t.profiler_op_s)
            own = ((ph.host_s - ph.cpu_ops * per_op).clip(lower=0) * ph.instances / iterations)
            host = own * (unprofiled[t.file] / own.sum())  # the shares split the measured host
            row = {"stack": t.stack, "file": t.file, "recompute": t.recompute}
            for cls in ("forward", "backward", "recompute", "optimizer"):
                part = ph.phase.map(CLASSES) == cls
                row[f"{cls}_s"] = float(host[part].sum())
                row[f"{cls}_launches"] = float((ph.kernels * ph.instances)[part].sum() / iterations)
            rows.append(row)
    return pd.DataFrame(rows)


def eager_stack(profiles: list[Path], host_log: Path) -> None:
    df = traced_costs(profiles, host_log)
    print(f"{len(df)} traced tp-1 shapes without GPU waits")
    for stack, g in df.groupby("stack"):
        none, full = g[g.recompute == "none"], g[g.recompute == "full"]
        fwd = none.forward_s.sum() / none.forward_launches.sum()
        bwd = none.backward_s.sum() / none.backward_launches.sum()
        line = (f"{stack}: {len(none)} shapes without recompute: {fwd * 1e6:.1f} us per forward launch, "
                f"{bwd * 1e6:.1f} us per backward launch (x{bwd / fwd:.2f})")
        if len(full):
            beyond = (full.forward_s + full.backward_s + full.recompute_s
                      - fwd * full.forward_launches - bwd * full.backward_launches).sum()
            rec = beyond / full.recompute_launches.sum()
            line += (f"; {len(full)} with full recompute: {rec * 1e6:.1f} us per recompute launch, "
                     f"checkpointing included (x{rec / fwd:.2f})")
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", help="cpu or cuda (a GPU host: fp16, like the runs)")
    ap.add_argument("--traced", nargs="+", type=Path, help="traced profile folders (eager stacks)")
    ap.add_argument("--host-log", type=Path, default=HOST_LOG,
                    help="the `profile trace` session output with the host times without the profiler")
    args = ap.parse_args()
    if args.traced:
        eager_stack(args.traced, args.host_log)
    else:
        megatron_layer(args.device)


if __name__ == "__main__":
    main()
