"""`profile collectives`: time all-reduce, all-gather, reduce-scatter and send/recv with
`torch.distributed`, over message sizes and every group size the launch provides.

Run under ``torchrun --nproc-per-node N``: the backend is NCCL on GPUs and gloo on CPUs. Every
group of the first g ranks (g = 2..N) is measured; each rank times its own calls (CUDA events or
the monotonic clock, after a barrier) and the slowest rank's statistics are kept, since a
collective ends when its last rank does. Sizes are per-rank buffer bytes, as in nccl-tests and in
the simulator's `CommOp.bytes` (for all-gather and reduce-scatter: the full, gathered buffer).
Kinds the backend lacks (gloo has no reduce-scatter) are logged and skipped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from profiler.timing import Stats, TimingConfig, time_cpu, time_cuda
from simulator.errors import ConfigError
from simulator.job.enums import CollectiveKind

log = logging.getLogger(__name__)

KiB = 1024


@dataclass(frozen=True)
class CollectiveRun:
    min_bytes: int = KiB
    max_bytes: int = KiB**3
    factor: int = 4
    kinds: tuple[CollectiveKind, ...] = tuple(CollectiveKind)
    timing: TimingConfig = field(default_factory=lambda: TimingConfig(5, 20, 20, float("inf")))

    def sizes(self) -> list[int]:
        out, n = [], self.min_bytes
        while n <= self.max_bytes:
            out.append(n)
            n *= self.factor
        return out


def init_distributed() -> tuple[torch.device, str]:
    """Join the torchrun job (NCCL on GPUs, gloo otherwise); one clear error outside torchrun."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise ConfigError("profile collectives must run under torchrun, e.g. `torchrun "
                          "--nproc-per-node 8 -m vtrain_ml.profile collectives --out DIR`")
    if int(os.environ["WORLD_SIZE"]) < 2:
        raise ConfigError("profile collectives needs at least 2 ranks (torchrun --nproc-per-node >= 2)")
    if torch.cuda.is_available():  # pragma: no cover - GPU only
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl")
        return torch.device("cuda", local), "nccl"
    dist.init_process_group("gloo")
    return torch.device("cpu"), "gloo"


def _call(kind: CollectiveKind, nbytes: int, group: Any, device: torch.device) -> Callable[[], Any]:
    """The collective on a bf16 buffer of `nbytes` per rank (fresh random data)."""
    size = dist.get_world_size(group)
    numel = max(size, nbytes // 2 // size * size)
    gen = torch.Generator(device=device).manual_seed(dist.get_rank())
    buf = torch.randn(numel, generator=gen, device=device, dtype=torch.bfloat16)
    shard = torch.empty(numel // size, device=device, dtype=torch.bfloat16)
    if kind is CollectiveKind.ALL_REDUCE:
        return lambda: dist.all_reduce(buf, group=group)
    if kind is CollectiveKind.ALL_GATHER:
        return lambda: dist.all_gather_into_tensor(buf, shard, group=group)
    if kind is CollectiveKind.REDUCE_SCATTER:
        return lambda: dist.reduce_scatter_tensor(shard, buf, group=group)
    peer = 1 - dist.get_rank()  # groups are the first g global ranks: ranks 0 and 1 exchange

    def send_recv() -> None:
        if dist.get_rank() == 0:
            dist.send(buf, dst=peer)
        else:
            dist.recv(buf, src=peer)
    return send_recv


def _slowest(stats: Stats, device: torch.device) -> Stats:
    t = torch.tensor([stats.median_s, stats.p10_s, stats.p90_s], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return Stats(float(t[0]), float(t[1]), float(t[2]), stats.repeats)


def _measure(kind: CollectiveKind, nbytes: int, group: Any, device: torch.device,
             timing: TimingConfig) -> Stats | None:
    """Stats on every rank (None where this rank is not in the group or the kind is missing)."""
    ok = torch.ones(1, device=device)
    stats = Stats(0.0, 0.0, 0.0, 0)
    if group is not None:
        try:
            fn = _call(kind, nbytes, group, device)
            dist.barrier(group=group)
            stats = (time_cuda if device.type == "cuda" else time_cpu)(fn, _fixed(timing))
        except (RuntimeError, ValueError) as exc:  # backend without this collective
            log.warning("%s of %d bytes not measured: %s", kind.value, nbytes, str(exc).splitlines()[0])
            ok.zero_()
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)  # every rank agrees whether it worked
    slowest = _slowest(stats, device)
    return slowest if ok.item() > 0 else None


def _fixed(timing: TimingConfig) -> TimingConfig:
    """Collectives must run the same number of times on every rank: no time budget."""
    return TimingConfig(timing.warmup, timing.max_repeats, timing.max_repeats, float("inf"))


def measure_collectives(run: CollectiveRun, device: torch.device, backend: str,
                        done: set[tuple[str, int, int]], on_row: Callable[[dict[str, Any]], None]
                        ) -> int:
    """Measure every (kind, group size, bytes) not in `done` (the same set on every rank, read from
    the journal before starting); `on_row` gets each new row (rank 0 journals it). Returns the
    number of new rows."""
    world = dist.get_world_size()
    count = 0
    for g in range(2, world + 1):
        group = dist.new_group(list(range(g)))  # every rank must take part in creating it
        member = group if dist.get_rank() < g else None
        for kind in run.kinds:
            if kind is CollectiveKind.SEND_RECV and g != 2:
                continue  # point-to-point: one pair is enough
            for nbytes in run.sizes():
                if (kind.value, g, nbytes) in done:
                    continue
                stats = _measure(kind, nbytes, member, device, run.timing)
                if stats is None:
                    break
                on_row({"kind": kind.value, "group_size": g, "bytes": nbytes,
                        "median_s": stats.median_s, "p10_s": stats.p10_s,
                        "p90_s": stats.p90_s, "repeats": stats.repeats, "source": backend})
                count += 1
    return count
