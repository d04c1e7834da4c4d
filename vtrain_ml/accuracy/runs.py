"""A runs file: measured training runs of any stack and GPU, one row per run -> jobs + measurements.

CSV (or YAML: a list of mappings, or ``runs:`` holding one), one row per measured run::

    job,iteration_ms,peak_memory_GiB,reserved_GiB,oom,tag
    jobs/llama_h2048_mb1.yaml,160.22,31.612,33.1,,llama
    jobs/llama_h2048_mb8.yaml,,,,true,llama

- ``job``: a native job file or a vTrain JSON config, its path relative to the runs file. The job
  states the stack (``training.framework``, ``fused_softmax``, dropout, ...) and the GPU.
- ``iteration_s`` or ``iteration_ms``: measured time of one iteration (median of several).
- ``peak_memory_GiB``: peak allocated memory (``torch.cuda.max_memory_allocated``), optional.
- ``reserved_GiB``: peak reserved by the caching allocator (``torch.cuda.max_memory_reserved``).
- ``oom``: true when the run ran out of memory (such a row has no time).
- ``tag``: free text to group rows by (stack, sweep, ...).
- ``iteration_ms_min`` / ``iteration_ms_max``: the spread of the timed iterations (informational).

vTrain's published CSV layout (`measurements.py`) is detected by its header and keeps working.
A bad row (missing or invalid job file, non-numeric time, negative memory, ...) becomes one line
naming file, row and column, and is skipped; `Runs.problems` holds those lines. Every row gets a
fingerprint of its job (GPU excluded) and measurements, so that a hardware file calibrated on
some rows can tell later which rows it has seen (`data_hash`, in-sample warnings).
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from simulator.errors import ConfigError, DataError
from simulator.job.catalog import resolve_hardware
from simulator.job.later_fields import without_unused_fields
from simulator.job.loaders import load_job
from simulator.job.specs import GiB, Job
from vtrain_ml.accuracy.measurements import is_vtrain_header, read_measurements, row_to_job
from vtrain_ml.jobs import with_overrides

VTRAIN_DEFAULT_GPU = "a100-80gb"  # vTrain's runs need the 80 GB A100 (measurements.py)
TIME_COLUMNS = ("iteration_s", "iteration_ms")
KNOWN_COLUMNS = ("job", *TIME_COLUMNS, "peak_memory_GiB", "reserved_GiB", "oom", "tag",
                 "iteration_ms_min", "iteration_ms_max")
TRUE_WORDS, FALSE_WORDS = {"true", "yes", "1"}, {"false", "no", "0", ""}


@dataclass(frozen=True)
class Run:
    """One measured run: the job as simulated and what was measured (SI units)."""

    job: Job
    source: str  # runs file name
    row: int  # line in a CSV (header = 1), entry number in a YAML list (first = 1)
    job_path: str  # as written in the runs file ("" for a vTrain CSV row)
    iteration_s: float | None
    peak_allocated_bytes: float | None
    peak_reserved_bytes: float | None
    oom: bool
    tag: str
    fingerprint: str
    measured_gpu: str = ""  # the GPU its job file names ("" for a vTrain CSV row: not stated)
    time_column: str = ""  # the column its time was read from (iteration_ms, iteration_s, ...)


@dataclass(frozen=True)
class Runs:
    runs: tuple[Run, ...]
    problems: tuple[str, ...]  # one line per skipped row
    file_hash: str  # sha256 of the files' bytes (what calibrate recorded before fingerprints)
    sources: tuple[str, ...] = field(default=())

    @property
    def skipped(self) -> int:
        return len(self.problems)

    @property
    def data_hash(self) -> str:
        """Order-independent hash of the rows (jobs and measurements), not of the file bytes."""
        return _digest(sorted(r.fingerprint for r in self.runs))[:16]

    def timed(self) -> list[Run]:
        return [r for r in self.runs if r.iteration_s is not None]

    def require_rows(self) -> Runs:
        if not self.runs:
            raise DataError(f"no valid rows in {', '.join(self.sources)} ({self.skipped} skipped, "
                            "each named above); fix the rows or the job files they name")
        return self

    def table(self) -> pd.DataFrame:
        """One row per run: source, row, job, tag, layout, measured values (ms, GiB), oom."""
        return pd.DataFrame([{
            "source": r.source, "row": r.row, "job": r.job_path, "tag": r.tag,
            "tp": r.job.parallel.tp, "dp": r.job.dp, "pp": r.job.parallel.pp,
            "num_gpus": r.job.cluster.num_gpus,
            "measured_ms": r.iteration_s * 1e3 if r.iteration_s is not None else math.nan,
            "measured_GiB": _gib(r.peak_allocated_bytes),
            "measured_reserved_GiB": _gib(r.peak_reserved_bytes),
            "oom": r.oom, "fingerprint": r.fingerprint,
        } for r in self.runs])


def read_runs(paths: list[str | Path], hardware: str | None = None) -> Runs:
    """Read runs files (native CSV/YAML or vTrain CSV). `hardware` (a GPU name or hardware file)
    replaces every job's GPU; without it, jobs keep theirs and vTrain rows get a100-80gb."""
    if hardware is not None:  # once, not once per row: a wrong name is one line, not one per run
        try:
            resolve_hardware(hardware)
        except ConfigError as exc:
            raise ConfigError(f"--hardware {hardware}: {exc}") from None
    runs: list[Run] = []
    problems: list[str] = []
    digest = hashlib.sha256()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            raise DataError(f"runs file {path} is a directory; give the CSV or YAML file inside it")
        if not path.is_file():
            raise DataError(f"runs file {path} does not exist")
        digest.update(path.read_bytes())
        found, bad = _read_file(path, hardware)
        runs += found
        problems += bad
    unique, copies = _without_copies(runs)
    return Runs(tuple(unique), tuple(problems + copies), digest.hexdigest()[:16],
                tuple(str(p) for p in paths))


def _without_copies(runs: list[Run]) -> tuple[list[Run], list[str]]:
    """A row pasted twice (the same job file and measurements) is counted once, with a warning:
    kept twice, it would weigh double in a fit and sit on both sides of a cross-validation fold.
    (Rows of one job measured apart, or of two files holding the same job, stay; cross-validation
    keeps all rows of one job in one fold: calibration.job_groups.)"""
    first: dict[tuple[str, str], Run] = {}
    unique, copies = [], []
    for run in runs:
        seen = first.setdefault((run.job_path, run.fingerprint), run)
        if seen is run:
            unique.append(run)
        else:
            copies.append(f"{run.source}: row {run.row}: the same job and measurements as {seen.source} "
                          f"row {seen.row}; counted once")
    return unique, copies


def _read_file(path: Path, hardware: str | None) -> tuple[list[Run], list[str]]:
    if path.suffix.lower() in {".yaml", ".yml"}:
        return _read_entries(path, _yaml_entries(path), hardware)
    lines = _text(path).splitlines()
    first = next((line for line in lines if line.strip()), "")
    if is_vtrain_header(next(csv.reader([first]), [])):  # its header starts with '# GPUs'
        return _read_vtrain(path, hardware)
    header, entries = _csv_entries(path, lines)
    _check_columns(path, header)
    return _read_entries(path, entries, hardware)


def _read_vtrain(path: Path, hardware: str | None) -> tuple[list[Run], list[str]]:
    data = read_measurements([path], require_rows=False)
    gpu = hardware or VTRAIN_DEFAULT_GPU
    runs = []
    for _, r in data.rows.iterrows():
        job = row_to_job(r, gpu)
        seconds = float(r.measured_ms) / 1e3
        runs.append(Run(job, path.name, int(r.row), "", seconds, None, None, False, path.stem,
                        fingerprint(job, seconds, None, None, False), time_column="iteration time (ms)"))
    return runs, list(data.problems)


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise DataError(f"{path} is not a text file; a runs file is a CSV or YAML file") from None


def _csv_entries(path: Path, lines: list[str]) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Header and (line number, cells) of every data line; '#' lines are comments."""
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip() and
                not line.lstrip().startswith("#")]
    if not numbered:
        raise DataError(f"{path} is empty; a runs file starts with a header such as "
                        "'job,iteration_ms,peak_memory_GiB'")
    rows = list(csv.reader([line for _, line in numbered], skipinitialspace=True))
    header = [c.strip() for c in rows[0]]
    entries = []
    for (number, _), cells in zip(numbered[1:], rows[1:], strict=True):
        if len(cells) > len(header):
            entries.append((number, {"__extra__": ",".join(cells[len(header):])}))
            continue
        entries.append((number, {h: c.strip() for h, c in zip(header, cells, strict=False)}))
    return header, entries


def _check_columns(path: Path, header: list[str]) -> None:
    unknown = [c for c in header if c not in KNOWN_COLUMNS]
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, KNOWN_COLUMNS, n=1, cutoff=0.6)
            hints.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise DataError(f"{path}: unknown column(s) {', '.join(hints)}; a runs file has "
                        f"{', '.join(KNOWN_COLUMNS)} (or vTrain's CSV layout)")
    if "job" not in header:
        raise DataError(f"{path}: no 'job' column; each row names its job file (relative to the runs file)")
    if not any(c in header for c in (*TIME_COLUMNS, "oom")):
        raise DataError(f"{path}: no 'iteration_ms' or 'iteration_s' column (nor 'oom'); add the "
                        "measured iteration time")


def _yaml_entries(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        data = yaml.safe_load(_text(path))
    except yaml.YAMLError as exc:
        raise DataError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if isinstance(data, dict) and set(data) == {"runs"}:
        data = data["runs"]
    if not isinstance(data, list):
        raise DataError(f"{path}: a YAML runs file is a list of runs (or 'runs:' holding one), each "
                        "with job, iteration_ms, ...")
    return [(i + 1, e if isinstance(e, dict) else {"__not_a_mapping__": e}) for i, e in enumerate(data)]


class _RowProblem(Exception):
    def __init__(self, column: str, message: str) -> None:
        super().__init__(message)
        self.column, self.message = column, message


def _read_entries(path: Path, entries: list[tuple[int, dict[str, Any]]], hardware: str | None
                  ) -> tuple[list[Run], list[str]]:
    runs, problems = [], []
    loader = _JobLoader(path.parent, hardware)
    for number, entry in entries:
        try:
            runs.append(_entry_to_run(path, number, entry, loader))
        except _RowProblem as bad:
            column = f", column '{bad.column}'" if bad.column else ""
            problems.append(f"{path}: row {number}{column}: {bad.message}; row skipped")
    return runs, problems


def _entry_to_run(path: Path, number: int, entry: dict[str, Any], loader: _JobLoader) -> Run:
    if "__not_a_mapping__" in entry:
        raise _RowProblem("", f"{entry['__not_a_mapping__']!r} is not a mapping of column: value")
    if "__extra__" in entry:
        raise _RowProblem("", f"more cells than columns ({entry['__extra__']!r} left over); quote "
                              "cells that hold commas")
    unknown = [k for k in entry if k not in KNOWN_COLUMNS]
    if unknown:
        raise _RowProblem(str(unknown[0]), f"unknown key; a run has {', '.join(KNOWN_COLUMNS)}")
    oom = _flag(entry.get("oom"), "oom")
    seconds, time_column = _time(entry, oom)
    peak = _memory(entry, "peak_memory_GiB")
    reserved = _memory(entry, "reserved_GiB")
    if peak is not None and reserved is not None and reserved < peak:
        raise _RowProblem("reserved_GiB", f"{reserved / GiB:g} GiB reserved is below the "
                                          f"{peak / GiB:g} GiB allocated (reserved holds the allocated)")
    for column in ("iteration_ms_min", "iteration_ms_max"):
        _number(entry.get(column), column, positive=True)
    job_path = str(entry.get("job") or "").strip()
    job, measured_gpu, capacity = loader.load(job_path)
    for column, value in (("peak_memory_GiB", peak), ("reserved_GiB", reserved)):
        _within_capacity(column, value, capacity, measured_gpu)
    tag = "" if entry.get("tag") is None else str(entry["tag"]).strip()
    return Run(job, path.name, number, job_path, seconds, peak, reserved, oom, tag,
               fingerprint(job, seconds, peak, reserved, oom), measured_gpu, time_column)


def _within_capacity(column: str, value: float | None, capacity: float, gpu: str) -> None:
    """A measured peak cannot exceed the memory of the GPU it was measured on."""
    if value is None or value <= capacity:
        return
    gib = value / GiB
    hint = (f" (if the value is in MiB, it is {gib / 1024:.1f} GiB)" if gib / 1024 <= capacity / GiB else "")
    raise _RowProblem(column, f"{gib:g} GiB is more than the {capacity / GiB:g} GiB of {gpu}, the GPU "
                              f"its job file names; give GiB{hint}")


def _time(entry: dict[str, Any], oom: bool) -> tuple[float | None, str]:
    given = {c: _number(entry.get(c), c, positive=True) for c in TIME_COLUMNS}
    present = {c: v for c, v in given.items() if v is not None}
    if oom:
        if present:
            column = next(iter(present))
            raise _RowProblem(column, "a run that ran out of memory has no time; empty the cell or "
                                      "set oom to false")
        return None, ""
    if not present:
        raise _RowProblem("iteration_ms", "no measured time; give iteration_ms (or iteration_s), or "
                                          "oom: true for a run that ran out of memory")
    if len(present) == 2:
        raise _RowProblem("iteration_s", "both iteration_s and iteration_ms are given; keep one")
    column, value = next(iter(present.items()))
    return (value if column == "iteration_s" else value / 1e3), column


def _memory(entry: dict[str, Any], column: str) -> float | None:
    value = _number(entry.get(column), column, positive=True)
    return None if value is None else value * GiB


def _number(value: Any, column: str, positive: bool) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise _RowProblem(column, f"{value!r} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _RowProblem(column, f"{value!r} is not a number") from None
    if not math.isfinite(number):
        raise _RowProblem(column, f"{value!r} is not a finite number")
    if positive and number <= 0:
        raise _RowProblem(column, f"{value!r} must be positive")
    return number


def _flag(value: Any, column: str) -> bool:
    if isinstance(value, bool):
        return value
    text = "" if value is None else str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise _RowProblem(column, f"{value!r} is not true or false")


@dataclass
class _JobLoader:
    """Job files relative to the runs file, each loaded (and put on `hardware`) once."""

    base: Path
    hardware: str | None
    cache: dict[str, tuple[Job, str, float] | str] = field(default_factory=dict)

    def load(self, job_path: str) -> tuple[Job, str, float]:
        """The job (on `hardware` if given), the GPU its file names and that GPU's memory (bytes)."""
        if not job_path:
            raise _RowProblem("job", "empty; give the job file's path relative to the runs file")
        if job_path not in self.cache:
            self.cache[job_path] = self._load(job_path)
        hit = self.cache[job_path]
        if isinstance(hit, str):
            raise _RowProblem("job", hit)
        return hit

    def _load(self, job_path: str) -> tuple[Job, str, float] | str:
        path = self.base / job_path
        if path.is_dir():
            return f"{job_path} is a directory ({path}); name the job file inside it"
        if not path.is_file():
            return f"job file {job_path} does not exist (looked for {path})"
        try:
            job = load_job(path)
            gpu, capacity = job.hardware.name, job.hardware.memory_bytes
            return (with_overrides(job, hardware=self.hardware) if self.hardware else job), gpu, capacity
        except ConfigError as exc:
            where = f" on --hardware {self.hardware}" if self.hardware else ""
            return f"job file {job_path} does not validate{where}: {exc}"


def fingerprint(job: Job, seconds: float | None, peak: float | None, reserved: float | None,
                oom: bool) -> str:
    """Hash of what a row says (the job without its GPU, which validate may replace, and the
    measurements): equal rows have equal fingerprints whatever file or order they come in."""
    spec = without_unused_fields(job.model_dump(mode="json",
                                                exclude={"hardware": True, "cluster": {"gpu"}}))
    return _digest([json.dumps(spec, sort_keys=True), repr((seconds, peak, reserved, oom))])[:12]


def _digest(parts: list[str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\n")
    return h.hexdigest()


def _gib(value: float | None) -> float:
    return value / GiB if value is not None else math.nan

