"""A job trace: one training job per row, read from CSV or YAML and checked row by row.

Columns (`TraceRow`): ``name, arrival_s, model, train_tokens, global_batch_size`` and either
``deadline_s`` (absolute, seconds from the trace's start) or ``deadline_factor`` (a multiple of
the job's duration on its best plan at its largest useful GPU count, resolved later by
`vtrain_ml.scheduler.workload`), optionally ``seq_length`` (overrides the model's), ``priority``
(weight of the job's marginal gain in the elastic policy) and ``gpus`` (the fixed request the
FIFO/EDF baselines use; by default derived from the deadline).

A YAML trace is a list of rows, or a mapping ``{jobs: [...], cluster: {gpus, gpu}}`` whose
cluster section gives the defaults of ``--gpus`` and ``--gpu``. Every problem is reported as one
line naming the file, the row (1-based, in file order), the job and the field.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError

from simulator.errors import ConfigError
from simulator.job.catalog import read_yaml

MAX_REPORTED = 3  # rows quoted in one error line; the rest are counted


class TraceRow(BaseModel):
    """One job of a trace, as written (deadlines not yet resolved, model not yet loaded)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    arrival_s: float = Field(ge=0, allow_inf_nan=False)
    model: str = Field(min_length=1)
    train_tokens: PositiveFloat = Field(allow_inf_nan=False)
    global_batch_size: PositiveInt
    deadline_s: float | None = Field(default=None, allow_inf_nan=False)
    deadline_factor: PositiveFloat | None = Field(default=None, allow_inf_nan=False)
    seq_length: PositiveInt | None = None
    priority: PositiveFloat = 1.0
    gpus: PositiveInt | None = None


@dataclass(frozen=True)
class ClusterDefaults:
    """The optional ``cluster`` section of a YAML trace."""

    gpus: int | None = None
    gpu: str | None = None


@dataclass(frozen=True)
class Trace:
    """Validated rows plus where they came from (model files are resolved relative to it)."""

    rows: tuple[TraceRow, ...]
    source: str
    folder: Path
    cluster: ClusterDefaults = ClusterDefaults()

    def where(self, index: int) -> str:
        """'FILE row N (job NAME)' for the row at 0-based `index`."""
        return row_label(self.source, index, self.rows[index].name)


def row_label(source: str, index: int, name: Any) -> str:
    job = f" (job {name!r})" if isinstance(name, str) and name else ""
    return f"{source} row {index + 1}{job}"


def _describe(err: Any) -> str:
    field = ".".join(str(p) for p in err["loc"]) or "row"
    if err["type"] == "extra_forbidden":
        return (f"unknown column {field!r}; columns: {', '.join(TraceRow.model_fields)}")
    if err["type"] == "missing":
        return f"missing {field}"
    return f"{field}={err.get('input')!r}: {err['msg']}"


def _row_problems(data: Any) -> tuple[TraceRow | None, list[str]]:
    if not isinstance(data, dict):
        return None, [f"a row must be a mapping of column to value, got {type(data).__name__}"]
    try:
        row = TraceRow.model_validate(data)
    except ValidationError as exc:
        return None, [_describe(e) for e in exc.errors()]
    problems = []
    if (row.deadline_s is None) == (row.deadline_factor is None):
        problems.append("give exactly one of deadline_s (absolute) or deadline_factor "
                        f"(got deadline_s={row.deadline_s}, deadline_factor={row.deadline_factor})")
    elif row.deadline_s is not None and row.deadline_s <= row.arrival_s:
        problems.append(f"deadline_s={row.deadline_s:g} is not after arrival_s={row.arrival_s:g}; "
                        f"give a deadline later than the arrival")
    return row, problems


def parse_rows(raw: list[Any], source: str) -> tuple[TraceRow, ...]:
    """Validate every row; all problems of the first bad rows go into one `ConfigError` line."""
    rows: list[TraceRow] = []
    bad: list[str] = []
    seen: dict[str, int] = {}
    for index, data in enumerate(raw):
        row, problems = _row_problems(data)
        name = data.get("name") if isinstance(data, dict) else None
        if row is not None:
            if row.name in seen:
                problems.append(f"name {row.name!r} repeats row {seen[row.name] + 1}; names must be unique")
            seen.setdefault(row.name, index)
            rows.append(row)
        if problems:
            bad.append(f"{row_label(source, index, name)}: {'; '.join(problems)}")
    if bad:
        more = f" (and {len(bad) - MAX_REPORTED} more rows)" if len(bad) > MAX_REPORTED else ""
        raise ConfigError(" | ".join(bad[:MAX_REPORTED]) + more)
    if not rows:
        raise ConfigError(f"{source} has no jobs; a trace needs at least one row")
    return tuple(rows)


def _csv_rows(text: str) -> list[dict[str, Any]]:
    """CSV rows with empty cells dropped (an empty deadline_s means 'not given')."""
    reader = csv.DictReader(io.StringIO(text))
    out = []
    for record in reader:
        row = {k.strip(): v.strip() for k, v in record.items() if k is not None and v not in (None, "")}
        if None in record:
            row["<extra cells>"] = record[None]  # type: ignore[index]
        out.append(row)
    return out


def _yaml_content(path: Path) -> tuple[list[Any], ClusterDefaults]:
    data = read_yaml(path)
    if isinstance(data, list):
        return data, ClusterDefaults()
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise ConfigError(f"{path} must be a list of job rows or a mapping with a 'jobs' list")
    unknown = sorted(set(data) - {"jobs", "cluster", "description", "generator"})
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key(s) {', '.join(unknown)}; "
                          f"known: jobs, cluster, description, generator")
    cluster = data.get("cluster") or {}
    if not isinstance(cluster, dict) or set(cluster) - {"gpus", "gpu"}:
        raise ConfigError(f"{path}: cluster must be a mapping with keys gpus and gpu, got {cluster!r}")
    gpus = cluster.get("gpus")
    if gpus is not None and (not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1):
        raise ConfigError(f"{path}: cluster.gpus={gpus!r} must be a positive integer")
    return data["jobs"], ClusterDefaults(gpus, None if cluster.get("gpu") is None else str(cluster["gpu"]))


def load_trace(path: str | Path) -> Trace:
    """Read and validate a CSV (``.csv``) or YAML/JSON trace file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"trace file {path} does not exist; give a .csv or .yaml job trace")
    if path.suffix.lower() == ".csv":
        try:
            raw: list[Any] = _csv_rows(path.read_text())
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise ConfigError(f"cannot read {path} as CSV: {exc}") from None
        cluster = ClusterDefaults()
    else:
        raw, cluster = _yaml_content(path)
    return Trace(parse_rows(raw, str(path)), str(path), path.resolve().parent, cluster)


def trace_from_rows(rows: list[dict[str, Any]], source: str = "trace") -> Trace:
    """A trace from in-memory rows (the generator's, or a test's)."""
    return Trace(parse_rows(rows, source), source, Path.cwd())


def iterations(row: TraceRow, seq_length: int) -> int:
    """Training iterations of the token budget: ceil(tokens / (global batch * sequence))."""
    return max(1, math.ceil(row.train_tokens / (row.global_batch_size * seq_length)))
