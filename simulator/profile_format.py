"""The on-disk format of a measured profile, and its reader.

A profile is a directory written by `profiler` (``python -m vtrain_ml.profile``)::

    metadata.json      ProfileMeta: schema version, device, precision, date, host, tables + hashes
    ops.csv            one row per unique measured operator (OPS_COLUMNS)
    collectives.csv    one row per (collective, group size, message size) (COLLECTIVE_COLUMNS)

Schema of ``ops.csv`` (version 1). The key columns are exactly `simulator.ops.Op.profile_key`, so
an op of any job graph finds its measurement by lookup:

=============  ==============================================================================
kind           `OpKind` value (gemm, bmm, flash_attention, norm, ...)
variant        `Op.variant` (layernorm, swiglu, causal, ...; empty for GEMMs)
phase          `Phase` value (fwd, bwd_data, bwd_weight, bwd, step)
shape          `Op.shape` joined by 'x' (GEMM: batch x M x N x K; pointwise: numel)
dtype_bytes    element size of the activations (2 for fp16/bf16, 4 for the fp32 Adam step)
flops, bytes   the op's FLOPs and HBM bytes as the simulator's graph counts them
median_s       median duration of one call, seconds (CUDA events on GPU, monotonic clock on CPU)
p10_s, p90_s   10th and 90th percentile, seconds
repeats        number of timed calls
example        the name of one graph op with this key (for reading the table)
=============  ==============================================================================

``collectives.csv``: kind (`CollectiveKind` value), group_size, bytes (buffer per rank), median_s,
p10_s, p90_s, repeats, source (torch.distributed backend name, or nccl-tests).

Tables are CSV (diffable, no Parquet dependency in the simulator core). Every table's sha256 is in
the metadata together with a content hash over all tables, so that a profile edited after it was
written is detected, and so that saved artefacts can record which profile they came from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field

from simulator.enums import Precision
from simulator.errors import ProfileError
from simulator.fileio import read_json_file
from simulator.specs import Frozen, parse

SCHEMA_VERSION = 1
META_FILE = "metadata.json"
OPS_TABLE = "ops.csv"
COLLECTIVES_TABLE = "collectives.csv"
STAT_COLUMNS = ("median_s", "p10_s", "p90_s", "repeats")
OPS_KEY = ("kind", "variant", "phase", "shape", "dtype_bytes")
OPS_COLUMNS = (*OPS_KEY, "flops", "bytes", *STAT_COLUMNS, "example")
COLLECTIVE_KEY = ("kind", "group_size", "bytes")
COLLECTIVE_COLUMNS = (*COLLECTIVE_KEY, *STAT_COLUMNS, "source")
TABLE_COLUMNS = {OPS_TABLE: OPS_COLUMNS, COLLECTIVES_TABLE: COLLECTIVE_COLUMNS}


class DeviceInfo(Frozen):
    """Where the measurements were taken."""

    kind: str  # "cuda" or "cpu"
    name: str
    memory_bytes: float = Field(0.0, ge=0)
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    host: str = ""


class TableInfo(Frozen):
    rows: int = Field(ge=0)
    sha256: str


class ProfileMeta(Frozen):
    schema_version: int
    device: DeviceInfo
    hardware: str | None = None  # catalog id of the measured GPU (None: no catalog entry, e.g. CPU)
    precision: Precision
    date: str
    tables: dict[str, TableInfo]
    content_hash: str
    selection: dict[str, Any] | None = None  # what was asked for and unique/total op counts


@dataclass(frozen=True)
class Profile:
    """A profile read from disk: metadata and its tables (None when the profile lacks one)."""

    path: Path
    meta: ProfileMeta
    ops: pd.DataFrame | None
    collectives: pd.DataFrame | None


def shape_to_str(shape: tuple[int, ...]) -> str:
    return "x".join(str(int(d)) for d in shape)


def shape_from_str(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in str(text).split("x"))


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def content_hash(tables: dict[str, TableInfo]) -> str:
    """One hash over every table's hash (order-independent), 16 hex digits."""
    joined = "".join(f"{name}:{info.sha256};" for name, info in sorted(tables.items()))
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


def _how_to_make(path: Path) -> str:
    return f"create it with `python -m vtrain_ml.profile ops --out {path}`"


def read_meta(path: Path) -> ProfileMeta:
    if not path.is_dir():
        raise ProfileError(f"profile directory {path} does not exist; {_how_to_make(path)}")
    meta_path = path / META_FILE
    data = read_json_file(meta_path, ProfileError,
                          f"{path} has no {META_FILE}: not a finished profile (rerun the profiler with "
                          f"--resume to finish it, or {_how_to_make(path)})", "re-profile")
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise ProfileError(f"profile {path} has schema version {version!r}, this vtrain-ml reads "
                           f"version {SCHEMA_VERSION}; re-profile with this version")
    try:
        return parse(ProfileMeta, data, f"{meta_path}")
    except Exception as exc:  # ConfigError from parse: the file is malformed, not the job
        raise ProfileError(str(exc)) from None


def _read_table(path: Path, name: str, info: TableInfo) -> pd.DataFrame:
    file = path / name
    if not file.is_file():
        raise ProfileError(f"profile {path} lists table {name} but the file is missing; "
                           f"re-profile (or restore the file)")
    if file_sha256(file) != info.sha256:
        raise ProfileError(f"table {file} changed after the profile was written (sha256 mismatch "
                           f"with {META_FILE}); re-profile instead of editing tables")
    frame = pd.read_csv(file, keep_default_na=False, dtype={"variant": str, "shape": str})
    missing = [c for c in TABLE_COLUMNS.get(name, ()) if c not in frame.columns]
    if missing:
        raise ProfileError(f"table {file} lacks columns {', '.join(missing)}; re-profile")
    return frame


def read_profile(path: str | Path) -> Profile:
    """Read and verify a profile directory (schema version, table presence, hashes, columns)."""
    root = Path(path)
    meta = read_meta(root)
    unknown = [n for n in meta.tables if n not in TABLE_COLUMNS]
    if unknown:
        raise ProfileError(f"profile {root} lists unknown tables {', '.join(unknown)}; re-profile")
    tables = {n: _read_table(root, n, info) for n, info in meta.tables.items()}
    return Profile(root, meta, tables.get(OPS_TABLE), tables.get(COLLECTIVES_TABLE))
