"""Pipeline schedules: the order in which each stage runs forward/backward micro-batch chunks.

Orders follow Megatron-LM (`schedules.py`): GPipe (all forwards, then all backwards), 1F1B
(PipeDream-Flush: p-s-1 warm-up forwards, then alternate), and interleaved 1F1B with v model
chunks per stage (Narayanan et al. 2021, Sec. 2.2.2). Ops are integers:
``((direction * v + chunk) * p + stage) * m + microbatch`` with direction 0 = forward, 1 = backward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simulator.job.enums import Schedule


@dataclass(frozen=True)
class OpIndex:
    p: int
    v: int
    m: int

    @property
    def count(self) -> int:
        return 2 * self.v * self.p * self.m

    def of(self, backward: int, chunk: int, stage: int, mb: int) -> int:
        return ((backward * self.v + chunk) * self.p + stage) * self.m + mb

    def decode(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(backward, chunk, stage, microbatch) arrays for every op id (ids enumerate the
        (direction, chunk, stage, micro-batch) grid in C order: repeats, not divisions)."""
        p, v, m = self.p, self.v, self.m
        backward = np.repeat(np.arange(2), v * p * m)
        chunk = np.tile(np.repeat(np.arange(v), p * m), 2)
        stage = np.tile(np.repeat(np.arange(p), m), 2 * v)
        mb = np.tile(np.arange(m), 2 * v * p)
        return backward, chunk, stage, mb


def stage_orders(schedule: Schedule, p: int, m: int, v: int, all_warmup: bool = False,
                 group: int | None = None) -> np.ndarray:
    """Array (p, 2*v*m) of op ids: the execution order on each stage. `all_warmup`: every stage
    runs all its forwards first (Megatron's interleaved schedule before Nov 2024 when m == p).
    `group`: the interleaved schedule's micro-batches per model chunk at a time (None: p)."""
    idx = OpIndex(p, v, m)
    orders: list[list[int] | np.ndarray]
    if schedule is Schedule.INTERLEAVED_1F1B:
        table = interleaved_table(m, v, p if group is None else group)
        orders = [_interleaved(idx, s, table, all_warmup) for s in range(p)]
    else:
        orders = [_ORDERS[schedule](idx, s) for s in range(p)]
    return np.asarray(orders, dtype=np.int64)


def _gpipe(idx: OpIndex, s: int) -> list[int]:
    return [idx.of(0, 0, s, j) for j in range(idx.m)] + [idx.of(1, 0, s, j) for j in range(idx.m)]


def _one_f_one_b(idx: OpIndex, s: int) -> list[int]:
    m = idx.m
    warm = min(idx.p - s - 1, m)
    order = [idx.of(0, 0, s, j) for j in range(warm)]
    for i in range(m - warm):
        order += [idx.of(0, 0, s, warm + i), idx.of(1, 0, s, i)]
    return order + [idx.of(1, 0, s, j) for j in range(m - warm, m)]


def interleaved_table(m: int, v: int, group: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(micro-batch, chunk) of the interleaved schedule's k-th forward for every k < m v, and
    the group: Megatron-Core's `schedules.py::get_schedule_table` runs `group` micro-batches on
    chunk 0, the same on chunk 1, ..., then the next group (the last one holds what is left).
    With group == p and m a multiple of p: micro-batch (k // (p v)) p + k % p on chunk
    (k // p) % v, the schedule of Narayanan et al. (2021)."""
    starts = np.arange(0, m, group)
    sizes = np.minimum(starts + group, m) - starts
    mb = np.concatenate([np.tile(np.arange(a, a + n), v) for a, n in zip(starts, sizes, strict=True)])
    chunk = np.concatenate([np.repeat(np.arange(v), n) for n in sizes])
    return mb.astype(np.int64), chunk.astype(np.int64), group


def _interleaved(idx: OpIndex, s: int, table: tuple[np.ndarray, np.ndarray, int],
                 all_warmup: bool = False) -> np.ndarray:
    """Megatron's interleaved order on stage s, for all k at once: the k-th forward runs the
    `table`'s k-th (micro-batch, chunk), the k-th backward the same micro-batch on chunk
    v - 1 - chunk (`get_model_chunk_id(..., forward=False)`)."""
    p, v, m = idx.p, idx.v, idx.m
    total = m * v
    mb, chunk, group = table
    fwd = (chunk * p + s) * m + mb  # idx.of(0, chunk, s, mb)
    bwd = ((2 * v - 1 - chunk) * p + s) * m + mb  # idx.of(1, v - 1 - chunk, s, mb)
    # Megatron's get_pp_rank_microbatches: 2 (p - s - 1) + (v - 1) group warm-up forwards
    warm = total if all_warmup else min((p - s - 1) * 2 + (v - 1) * group, total)
    steady = np.empty(2 * (total - warm), dtype=np.int64)
    steady[0::2], steady[1::2] = fwd[warm:], bwd[:total - warm]
    return np.concatenate((fwd[:warm], steady, bwd[total - warm:]))


_ORDERS: dict[Schedule, Callable[[OpIndex, int], list[int] | np.ndarray]] = {
    Schedule.GPIPE: _gpipe,
    Schedule.ONE_F_ONE_B: _one_f_one_b,
}  # the interleaved order takes its micro-batch groups too (`stage_orders`)


def dependencies(p: int, m: int, v: int,
                 decoded: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """For every op: the op it waits for on another stage (-1: none) and the pipeline boundary
    its input crosses (-1: none; b < p-1: between stages b and b+1; p-1: last -> first stage).
    `decoded`: `OpIndex(p, v, m).decode()` when the caller has it already."""
    idx = OpIndex(p, v, m)
    backward, chunk, stage, mb = decoded if decoded is not None else idx.decode()
    dep = np.full(idx.count, -1, dtype=np.int64)
    edge = np.full(idx.count, -1, dtype=np.int64)
    f, b = backward == 0, backward == 1
    # forward: previous stage of the same chunk, or the last stage of the previous chunk
    inner = f & (stage > 0)
    dep[inner] = idx.of(0, 0, 0, 0) + ((chunk[inner] * p + stage[inner] - 1) * m + mb[inner])
    edge[inner] = stage[inner] - 1
    wrap = f & (stage == 0) & (chunk > 0)
    dep[wrap] = ((chunk[wrap] - 1) * p + p - 1) * m + mb[wrap]
    edge[wrap] = p - 1
    # backward: next stage of the same chunk, or the first stage of the next chunk, or (last
    # chunk on the last stage) its own forward
    inner = b & (stage < p - 1)
    dep[inner] = ((v + chunk[inner]) * p + stage[inner] + 1) * m + mb[inner]
    edge[inner] = stage[inner]
    wrap = b & (stage == p - 1) & (chunk < v - 1)
    dep[wrap] = ((v + chunk[wrap] + 1) * p + 0) * m + mb[wrap]
    edge[wrap] = p - 1
    turn = b & (stage == p - 1) & (chunk == v - 1)
    dep[turn] = ((v - 1) * p + p - 1) * m + mb[turn]
    return dep, edge
