"""`trace`: run real layers of a stack on this device under torch.profiler, then import the trace.

For each requested shape (job x tp x micro-batch x recompute x sequence parallelism) the chosen
stack builds one rank's shard (`profiler.stacks.shard`) with a few layers, runs `micro_batches`
micro-batches of forward + backward and one optimizer step (fused AdamW on CUDA) under
`torch.autocast`, as the shared H100 runs did: warm-up iterations, timed iterations without the
profiler (host time until the step returns, and the synchronized wall time), then one profiled
iteration exported as a Chrome trace, which goes through the same import path as a user's trace.
The unprofiled / profiled host time of the same iteration is the trace's ``host_ratio``: how much
the profiler inflated this stack's host time on this machine.
"""

from __future__ import annotations

import gzip
import logging
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from profiler.stacks import huggingface, megatron_core, reference
from profiler.stacks.shard import Shard, shard_job, shard_of
from profiler.trace.importer import (
    ImportedTrace,
    TraceSource,
    analyze,
    shape_columns,
    write_imported,
)
from simulator.costs.profile_format import META_FILE, TRACE_SHAPE_COLUMNS, read_profile
from simulator.errors import ConfigError
from simulator.job.enums import Precision, Recompute
from simulator.job.specs import Job

log = logging.getLogger(__name__)

STACKS: dict[str, Callable[[Shard], tuple[Any, Any]]] = {
    "reference": reference.build, "huggingface": huggingface.build,
    "megatron-core": megatron_core.build,
}
TRACES_DIR = "traces"
# profiled iterations in a trace: kernel times are averaged over them, host times come from the
# least-disturbed one (a profiled iteration can stall: profiler.trace.summary)
ACTIVE_STEPS = 3


@dataclass(frozen=True)
class TraceRequest:
    jobs: tuple[tuple[str, Job], ...]  # (label, job)
    stack: str
    device: str
    tps: tuple[int, ...] = (1,)
    micro_batch_sizes: tuple[int, ...] = (1,)
    recomputes: tuple[Recompute, ...] = (Recompute.NONE,)
    sequence_parallel: tuple[bool, ...] = (False,)
    attention: tuple[bool | None, ...] = (None,)  # None: the job's own choice
    layers: int = 2
    micro_batches: int = 2
    warmup: int = 2
    repeats: int = 3
    seed: int = 0
    resume: bool = False
    threads: int | None = None  # torch intra-op threads (None: torch's default)


@dataclass(frozen=True)
class Planned:
    label: str
    shard: Shard
    job: Job  # the shard's job (what the trace rows describe)

    @property
    def name(self) -> str:
        s = self.shard
        return (f"{self.label}_tp{s.tp}_mb{s.micro_batch}_{s.recompute.value}"
                f"{'_sp' if s.sequence_parallel else ''}_{'flash' if s.flash else 'unfused'}"
                f"_l{s.layers}")


def plan(request: TraceRequest) -> list[Planned]:
    """Every shape to trace, validated before anything runs."""
    if request.stack not in STACKS:
        raise ConfigError(f"--stack={request.stack!r}: use one of {', '.join(STACKS)}")
    if request.layers < 2:
        raise ConfigError(f"--layers={request.layers}: trace at least 2 layers (the importer finds "
                          f"layer boundaries from their repetition)")
    out = []
    for label, job in request.jobs:
        for tp in request.tps:
            for sp in request.sequence_parallel:
                if sp and tp == 1:
                    continue
                for mb in request.micro_batch_sizes:
                    for rec in request.recomputes:
                        for flash in request.attention:
                            use = job if flash is None else job.model_copy(update={
                                "training": job.training.model_copy(update={"flash_attention": flash})})
                            shard = shard_of(use, tp, mb, rec, request.layers, request.micro_batches,
                                             sp)
                            out.append(Planned(label, shard, shard_job(use, shard)))
    return out


def _shape_key(p: Planned) -> tuple[str, ...]:
    cols = shape_columns(p.job, p.shard.layers, p.shard.micro_batches)
    return tuple(_canonical(v) for v in cols.values())


def run_traces(request: TraceRequest, out: Path, hardware: str | None,
               progress: Callable[[int, int, str], None] | None = None) -> Iterator[ImportedTrace]:
    """Trace every planned shape and accumulate each into the profile at `out` as it finishes
    (a killed run keeps what it finished; --resume skips those shapes)."""
    planned = plan(request)
    done = _done_keys(out, request.stack) if request.resume else set()
    for i, item in enumerate(planned):
        if progress:
            progress(i, len(planned), item.name)
        if _shape_key(item) in done:
            continue
        source = record(item, request, out)
        imported = analyze(source)
        write_imported(out, [imported], hardware, {"stack": request.stack})
        yield imported


def _done_keys(out: Path, stack: str) -> set[tuple[str, ...]]:
    if not (out / META_FILE).is_file():
        return set()
    profile = read_profile(out)
    if profile.traces is None:
        return set()
    frame = profile.traces
    rows = frame[(frame["source"] == "trace") & (frame["stack"] == stack)]
    return {tuple(_canonical(v) for v in r) for r in rows[list(TRACE_SHAPE_COLUMNS)].itertuples(index=False)}


def _canonical(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(int(number)) if number.is_integer() else repr(number)


@dataclass
class Running:
    """A built shard on its device: one training iteration is `step()` (host seconds)."""

    step: Callable[[], float]
    sync: Callable[[], None]
    device: Any
    optimizer_s: list[float]  # the host seconds of each step's optimizer part (step + zero_grad)


def prepare(item: Planned, request: TraceRequest) -> Running:
    """Build the stack's shard, fused AdamW (CUDA), fixed random tokens, autocast as the job's
    precision; run the warm-up iterations."""
    import torch

    from profiler.device import resolve_device

    device = resolve_device(request.device)
    torch.manual_seed(request.seed)
    with device:  # parameters are created (and initialized) on the device: fast for big shards
        model, loss_fn = STACKS[request.stack](item.shard)
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    gen = torch.Generator().manual_seed(request.seed)
    ids = torch.randint(0, item.shard.vocab, (item.shard.micro_batch, item.shard.seq),
                        generator=gen).to(device)
    dtype = torch.float16 if item.job.training.precision is Precision.FP16 else torch.bfloat16

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    optimizer_s: list[float] = []
    # Host seconds: on a CUDA device the wall time until the step returns (the host thread's
    # work and its waits in the driver); on a CPU device, where the host does all the work in
    # this process, its CPU seconds: on a shared machine other processes take the core for
    # tens of percent of the wall time, and the profiler's cost per op (profiled host time less
    # unprofiled, measured minutes apart) came out anywhere from -6 to +6 us in wall seconds.
    clock = time.perf_counter if device.type == "cuda" else time.process_time

    def step() -> float:
        start = clock()
        for _ in range(item.shard.micro_batches):
            with torch.autocast(device.type, dtype=dtype):
                loss = loss_fn(model, ids)
            loss.backward()
        middle = clock()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end = clock()
        optimizer_s.append(end - middle)
        return end - start

    for _ in range(request.warmup):
        step()
    sync()
    return Running(step, sync, device, optimizer_s)


def timed(run: Running, repeats: int) -> tuple[list[float], list[float]]:
    """Host seconds until each iteration returned, and its synchronized wall seconds."""
    host, wall = [], []
    for _ in range(max(1, repeats)):
        run.sync()
        start = time.perf_counter()
        host.append(run.step())
        run.sync()
        wall.append(time.perf_counter() - start)
    return host, wall


def timed_cpu(run: Running, repeats: int) -> tuple[list[float], list[float]]:
    """Synchronized wall seconds and process CPU seconds of each iteration. On a CPU device
    with one thread the CPU seconds are the iteration's work without the time other processes
    took the core: the figure to compare between runs on a shared machine."""
    wall, cpu = [], []
    for _ in range(max(1, repeats)):
        run.sync()
        start, start_cpu = time.perf_counter(), time.process_time()
        run.step()
        run.sync()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def record(item: Planned, request: TraceRequest, out: Path) -> TraceSource:
    """Run one shard: warm up, time without the profiler, trace one iteration, with
    `request.threads` torch threads; the caller's thread count is restored after (a library
    call must not change the process's torch settings: a later profile in the same process
    would record another device name)."""
    import torch

    before = torch.get_num_threads()
    if request.threads:
        torch.set_num_threads(request.threads)
    try:
        return _record(item, request, out)
    finally:
        torch.set_num_threads(before)


def _record(item: Planned, request: TraceRequest, out: Path) -> TraceSource:
    import torch

    run = prepare(item, request)
    cuda = run.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    host, wall = timed(run, request.repeats)
    best = int(np.argmin(host))  # the least-disturbed iteration: contention only adds time
    unprofiled = (host[best], run.optimizer_s[-len(host):][best])
    peak = float(torch.cuda.max_memory_allocated()) if cuda else None
    path, profiled = _profiled(item, out, run)
    least = min(profiled, key=lambda h: h[0])
    return TraceSource(path, item.job, request.stack, source="trace",
                       measured_iteration_s=statistics.median(wall), peak_memory_bytes=peak,
                       host_s=unprofiled[0], profiled_host_s=least[0],
                       optimizer_host_s=unprofiled[1], profiled_optimizer_host_s=least[1],
                       profiled_hosts=profiled)


def _profiled(item: Planned, out: Path, run: Running
              ) -> tuple[Path, tuple[tuple[float, float], ...]]:
    """A warm-up and ACTIVE_STEPS profiled iterations (ProfilerStep annotations mark them);
    the trace gzipped under `out`/traces, and each active iteration's host seconds (all, and
    its optimizer part)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU]
    if run.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    folder = out / TRACES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    raw = folder / f"{item.name}.json"
    hosts: list[float] = []
    with profile(activities=activities, record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=ACTIVE_STEPS, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
        for _ in range(ACTIVE_STEPS + 2):  # warm-up, active steps, one that closes the window
            run.sync()
            hosts.append(run.step())
            run.sync()
            prof.step()
    opt = run.optimizer_s[-len(hosts):]
    active = tuple((hosts[k], opt[k]) for k in range(1, 1 + ACTIVE_STEPS))
    final = folder / f"{item.name}.json.gz"
    with raw.open("rb") as src, final.open("wb") as sink, \
            gzip.GzipFile(fileobj=sink, mode="wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return final, active
