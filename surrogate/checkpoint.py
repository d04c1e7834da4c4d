"""Checkpoints of a generation run: finished chunks, and parts of chunks saved on a timer.

A chunk (``chunk-NNNNN.parquet``, `chunk_size` samples) is simulated as several *tasks* of at
most `TASK_SAMPLES` samples, so that the parent sees results every few seconds. Whenever
`checkpoint_s` seconds pass without a save, the finished tasks of unfinished chunks are written
as part files (``part-NNNNN-FFFF-LLLL.parquet``: chunk NNNNN, tasks FFFF to LLLL), so a run killed
after a minute loses at most `checkpoint_s` of work, not a whole chunk. When a chunk's last task
arrives, its tasks (parts read back, the rest from memory) are concatenated in task order and
written as the chunk file, and its parts are deleted: the folder of a resumed run is the same, byte
for byte, as an uninterrupted one. Every file is written atomically (a temporary file, renamed);
a damaged file (cut by a full disk or a copy) is reported and simulated again.
"""

from __future__ import annotations

import itertools
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from surrogate.dataset import chunk_path, write_parquet_atomic

log = logging.getLogger(__name__)

TASK_SAMPLES = 250  # samples per task: a few seconds of simulation on one core
PART = re.compile(r"part-(\d{5})-(\d{4})-(\d{4})\.parquet$")


def task_ranges(n: int, task_samples: int = TASK_SAMPLES) -> list[tuple[int, int]]:
    """(start, end) of each task of a chunk of `n` samples: equal parts of at most `task_samples`."""
    count = max(1, -(-n // task_samples))
    bounds = [round(i * n / count) for i in range(count + 1)]
    return list(itertools.pairwise(bounds))


def part_path(folder: Path, chunk: int, first: int, last: int) -> Path:
    return folder / f"part-{chunk:05d}-{first:04d}-{last:04d}.parquet"


def readable(path: Path) -> bool:
    """Whether a Parquet file can be opened (its footer is intact)."""
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path)
    except Exception:  # pyarrow raises several types for a cut or foreign file
        return False
    return True


def finished_chunk(folder: Path, chunk: int) -> bool:
    """A chunk file exists and is readable; a damaged one is removed (and simulated again)."""
    path = chunk_path(folder, chunk)
    if not path.is_file():
        return False
    if readable(path):
        return True
    log.warning("%s is damaged (not a readable Parquet file); simulating its samples again", path)
    path.unlink()
    return False


def saved_parts(folder: Path, chunk: int) -> dict[int, Path]:
    """Task index -> the part file holding it, for the readable parts of `chunk`."""
    out: dict[int, Path] = {}
    for path in sorted(folder.glob(f"part-{chunk:05d}-*.parquet")):
        match = PART.search(path.name)
        if match is None:
            continue
        if not readable(path):
            log.warning("%s is damaged; simulating its samples again", path)
            path.unlink()
            continue
        for task in range(int(match[2]), int(match[3]) + 1):
            out[task] = path
    return out


@dataclass
class ChunkState:
    """One unfinished chunk: its tasks, those saved in part files, those only in memory."""

    tasks: int
    parts: dict[int, Path]
    fresh: dict[int, pd.DataFrame] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.parts) + len(self.fresh) == self.tasks

    def frame(self) -> pd.DataFrame:
        frames, read = [], {}
        for task in range(self.tasks):
            if task in self.fresh:
                frames.append(self.fresh[task])
                continue
            path = self.parts[task]
            if path not in read:
                read[path] = pd.read_parquet(path)
                frames.append(read[path])
        return pd.concat(frames, ignore_index=True)


class Checkpoints:
    """The parent's writer: finished chunks at once, parts of the others every `checkpoint_s`."""

    def __init__(self, folder: Path, chunk_tasks: dict[int, int], checkpoint_s: float) -> None:
        self.folder, self.checkpoint_s = folder, checkpoint_s
        self.states = {c: ChunkState(n, saved_parts(folder, c)) for c, n in chunk_tasks.items()}
        self.last_save = time.monotonic()

    def pending(self, chunk: int) -> list[int]:
        """Tasks of `chunk` not saved in a part file."""
        state = self.states[chunk]
        return [t for t in range(state.tasks) if t not in state.parts]

    def add(self, chunk: int, task: int, frame: pd.DataFrame) -> None:
        state = self.states[chunk]
        state.fresh[task] = frame
        if state.complete:
            write_parquet_atomic(state.frame(), chunk_path(self.folder, chunk))
            for path in set(state.parts.values()):
                path.unlink(missing_ok=True)
            del self.states[chunk]
        if time.monotonic() - self.last_save >= self.checkpoint_s:
            self.save_parts()

    def save_parts(self) -> None:
        """Write every task held only in memory to part files (one per run of tasks)."""
        for chunk, state in self.states.items():
            for run in _runs(sorted(state.fresh)):
                frame = pd.concat([state.fresh[t] for t in run], ignore_index=True)
                path = part_path(self.folder, chunk, run[0], run[-1])
                write_parquet_atomic(frame, path)
                for t in run:
                    state.parts[t] = path
                    del state.fresh[t]
        self.last_save = time.monotonic()


def _runs(tasks: Sequence[int]) -> list[list[int]]:
    """Consecutive task indices grouped: [0, 1, 3] -> [[0, 1], [3]]."""
    out: list[list[int]] = []
    for t in tasks:
        if out and out[-1][-1] == t - 1:
            out[-1].append(t)
        else:
            out.append([t])
    return out
