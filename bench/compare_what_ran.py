"""Time the measured runs' own models beside this project's stacks, whole jobs, on one device.

The shared H100 runs (../shared/data/traces/h100/what_ran.py) are what every traced prediction
is scored against; `trace` and `bench_traces.py --measure-here` run this project's stacks
(profiler/stacks). If the two ran different work, a prediction could be "right" for our stack
and wrong for the runs. This script builds each job both ways -- what_ran's model (the copy in
tests/data/traces/what_ran_models.py) and our stack's whole model (every layer, every
micro-batch) -- and times them the way what_ran.py did (2 warm-up iterations, then the median of
`--iters` synchronized iterations), alternating which goes first, and prints the ratio.

Run: python bench/compare_what_ran.py --jobs data/measured/h100/jobs/gpt2_...yaml ... [--device cuda]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from simulator.job.enums import Recompute  # noqa: E402
from simulator.job.loaders import load_job  # noqa: E402
from simulator.job.specs import Job  # noqa: E402

WHAT_RAN = ROOT / "tests" / "data" / "traces" / "what_ran_models.py"
STACK = {"mgpt": "reference", "llama": "huggingface", "gpt2": "huggingface"}


def _what_ran() -> Any:
    spec = importlib.util.spec_from_file_location("what_ran_models", WHAT_RAN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _timed(step: Any, sync: Any, iters: int) -> float:
    for _ in range(2):
        step()
    sync()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def theirs(job: Job, kind: str, device: str, iters: int) -> float:
    import torch

    wr = _what_ran()
    m, t = job.model, job.training
    spec = {"hidden_size": m.hidden_size, "num_layers": m.num_layers, "vocab_size": m.vocab_size,
            "num_attention_heads": m.num_attention_heads, "seq_length": m.seq_length,
            "ffn_hidden_size": m.ffn, "num_query_groups": m.query_groups}
    torch.manual_seed(0)
    with torch.device(device):  # initialized on the device (what_ran moved it there): faster
        model, hf = wr.build(kind, spec, t.flash_attention, t.recompute is Recompute.FULL)
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device == "cuda")
    x = torch.randint(0, m.vocab_size, (t.micro_batch_size, m.seq_length), device=device)
    step = wr.make_step(model, hf, opt, x, job.num_microbatches, device)
    try:
        return _timed(step, _sync(device), iters)
    finally:
        del model, opt, step
        _free(device)


def ours(job: Job, kind: str, device: str, iters: int) -> float:
    from profiler.stacks.runner import TraceRequest, plan, prepare

    req = TraceRequest(((job.model.name, job),), STACK[kind], device,
                       micro_batch_sizes=(job.training.micro_batch_size,),
                       recomputes=(job.training.recompute,), layers=job.model.num_layers,
                       micro_batches=job.num_microbatches, warmup=0,
                       threads=1 if device == "cpu" else None)
    run = prepare(plan(req)[0], req)
    try:
        return _timed(run.step, run.sync, iters)
    finally:
        del run
        _free(device)


def _sync(device: str) -> Any:
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def _free(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", nargs="+", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--iters", type=int, default=4)
    args = ap.parse_args()
    if args.device == "cpu":  # both sides on one thread (the runner's CPU setting)
        import torch

        torch.set_num_threads(1)
    print(f"  {'job':45s} {'what_ran':>10s} {'ours':>10s} {'ours/what_ran':>14s}")
    for k, path in enumerate(args.jobs):
        job = load_job(path)
        kind = path.stem.split("_")[0]
        if kind not in STACK:
            raise SystemExit(f"{path}: the file name must start with one of the measured runs' "
                             f"prefixes ({', '.join(f'{k}_' for k in STACK)})")
        order = (theirs, ours) if k % 2 == 0 else (ours, theirs)
        got = {f.__name__: f(job, kind, args.device, args.iters) for f in order}
        print(f"  {path.stem:45s} {got['theirs'] * 1e3:8.1f} ms {got['ours'] * 1e3:8.1f} ms "
              f"{got['ours'] / got['theirs']:14.3f}", flush=True)


if __name__ == "__main__":
    main()
