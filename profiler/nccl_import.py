"""Import collective timings measured by NVIDIA's nccl-tests into a profile's collectives table.

Two inputs are understood:

* the text output of ``all_reduce_perf`` / ``all_gather_perf`` / ``reduce_scatter_perf`` /
  ``sendrecv_perf`` (github.com/NVIDIA/nccl-tests): the column header line names the columns; the
  out-of-place ``time`` column is in microseconds; the group size is the number of ``# Rank``
  lines; the collective is taken from the "Collective test starting" line or the file name;
* vTrain's published look-up tables ``AR_GPU<n>_*.csv`` (size in bytes, out-of-place time in ns),
  the format of ``data/nccl/``.

nccl-tests report one average per size, so median, p10 and p90 are that average and `repeats` is
the ``iters`` of the run (0 where the source does not say).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.errors import DataError
from simulator.job.enums import CollectiveKind

SOURCE = "nccl-tests"
_KIND_PATTERNS = (
    (re.compile(r"all_?reduce|(^|[^a-z])ar_gpu", re.I), CollectiveKind.ALL_REDUCE),
    (re.compile(r"all_?gather", re.I), CollectiveKind.ALL_GATHER),
    (re.compile(r"reduce_?scatter", re.I), CollectiveKind.REDUCE_SCATTER),
    (re.compile(r"send_?recv", re.I), CollectiveKind.SEND_RECV),
)
_RANK = re.compile(r"^#\s+Rank\s+\d+.*?device\s+\d+\s+\[[^\]]*\]\s+(.*)$")
_ITERS = re.compile(r"(?<!warmup )(?<!agg )iters:\s*(\d+)")
_LUT = re.compile(r"AR_GPU(\d+)_.*\.csv$", re.I)


@dataclass(frozen=True)
class Imported:
    rows: tuple[dict[str, Any], ...]
    device_name: str  # GPU name from the rank lines ("" when the file does not say)


def detect_kind(text: str, path: Path) -> CollectiveKind:
    started = re.search(r"Collective test starting:\s*(\S+)", text)
    for candidate in ((started.group(1),) if started else ()) + (path.name,):
        for pattern, kind in _KIND_PATTERNS:
            if pattern.search(candidate):
                return kind
    raise DataError(f"{path}: cannot tell which collective it measured (no 'Collective test "
                    f"starting' line, file name without all_reduce/all_gather/reduce_scatter/"
                    f"sendrecv); rename the file, e.g. all_reduce_8gpu.txt")


def _row(kind: CollectiveKind, group: int, nbytes: int, seconds: float, repeats: int) -> dict[str, Any]:
    return {"kind": kind.value, "group_size": group, "bytes": nbytes, "median_s": seconds,
            "p10_s": seconds, "p90_s": seconds, "repeats": repeats, "source": SOURCE}


def _columns(lines: list[str], path: Path) -> list[str]:
    for line in lines:
        fields = line.lstrip("#").split()
        if "size" in fields and "time" in fields:
            return fields
    raise DataError(f"{path}: no nccl-tests column header ('# size count type ... time algbw "
                    f"busbw ...'); is this nccl-tests output?")


def parse_nccl_tests_text(path: Path) -> Imported:
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    kind = detect_kind(text, path)
    columns = _columns(lines, path)
    size_col, time_col = columns.index("size"), columns.index("time")
    names = [m.group(1).strip() for m in map(_RANK.match, lines) if m]
    group = len(names)
    if group < 2:
        raise DataError(f"{path}: found {group} '# Rank' lines; an nccl-tests run of at least 2 "
                        f"GPUs lists one per GPU")
    iters = _ITERS.search(text)
    rows = []
    for line in lines:
        fields = line.split()
        if line.startswith("#") or len(fields) <= time_col or not fields[size_col].isdigit():
            continue
        try:
            seconds = float(fields[time_col]) * 1e-6
        except ValueError:
            continue
        rows.append(_row(kind, group, int(fields[size_col]), seconds, int(iters.group(1)) if iters else 0))
    if not rows:
        raise DataError(f"{path}: no measurement rows under the nccl-tests header")
    return Imported(tuple(rows), names[0])


def parse_vtrain_lut(path: Path) -> Imported:
    """vTrain's AR_GPU<n>_*.csv: size(B), count, type, out-of-place time(ns), busbw, ..."""
    match = _LUT.search(path.name)
    assert match, "caller checks the name"
    rows = []
    for i, line in enumerate(path.read_text().splitlines()[1:], start=2):
        fields = line.split(",")
        try:
            rows.append(_row(CollectiveKind.ALL_REDUCE, int(match.group(1)), int(fields[0]),
                             float(fields[3]) * 1e-9, 0))
        except (ValueError, IndexError):
            raise DataError(f"{path}:{i}: expected 'size,count,type,time_ns,...', got {line!r}") from None
    return Imported(tuple(rows), "")


def import_files(paths: list[Path]) -> Imported:
    """Rows of every file (text output or vTrain LUT CSV), and the GPU name where one says it."""
    rows: list[dict[str, Any]] = []
    device = ""
    for path in paths:
        if not path.is_file():
            raise DataError(f"nccl-tests file {path} does not exist")
        part = parse_vtrain_lut(path) if _LUT.search(path.name) else parse_nccl_tests_text(path)
        rows.extend(part.rows)
        device = device or part.device_name
    return Imported(tuple(rows), device)
