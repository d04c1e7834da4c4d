"""Writing profile directories: a crash-safe journal while measuring, atomic tables at the end.

While a run measures, each finished row is appended (flushed and fsynced) to ``<table>.journal``
in the profile directory; a killed run loses at most the op it was measuring, and ``--resume``
reads the journal (and any finished table) and skips what is done. At the end every table is
written atomically, then ``metadata.json`` last (also atomically): a directory with metadata is
always complete and consistent with its hashes. See `simulator.costs.profile_format` for the schema.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.costs.profile_format import (
    META_FILE,
    SCHEMA_VERSION,
    STRING_COLUMNS,
    TABLE_COLUMNS,
    DeviceInfo,
    ProfileMeta,
    TableInfo,
    content_hash,
    file_sha256,
    read_meta,
    read_profile,
)
from simulator.errors import ProfileError
from simulator.fileio import write_json_atomic, write_text_atomic
from simulator.job.enums import Precision

STR_COLUMNS = STRING_COLUMNS


class Journal:
    """Append-only CSV of finished rows of one table, readable after a kill."""

    def __init__(self, out: Path, table: str) -> None:
        self.path = out / f"{table}.journal"
        self.columns = TABLE_COLUMNS[table]

    def exists(self) -> bool:
        return self.path.is_file()

    def rows(self) -> list[dict[str, str]]:
        """Complete rows only: a line cut off by a kill (wrong field count) is dropped."""
        if not self.exists():
            return []
        with self.path.open(newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header != list(self.columns):
                return []
            return [dict(zip(header, r, strict=True)) for r in reader if len(r) == len(header)]

    def append(self, row: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.exists() or self.path.stat().st_size == 0
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        if new:
            writer.writerow(self.columns)
        writer.writerow([row[c] for c in self.columns])
        with self.path.open("a", newline="") as handle:
            if not new and not _ends_with_newline(self.path):
                handle.write("\n")  # a previous run was killed mid-line
            handle.write(buf.getvalue())
            handle.flush()
            os.fsync(handle.fileno())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def check_fresh_or_resume(out: Path, table: str, resume: bool) -> None:
    """Refuse to overwrite a finished table or an unfinished run unless resuming."""
    if resume:
        return
    if Journal(out, table).exists():
        raise ProfileError(f"{out} holds an unfinished {table} run; pass --resume to continue it "
                           f"(or choose another --out)")
    if (out / META_FILE).is_file() and table in read_meta(out).tables:
        raise ProfileError(f"{out} already holds a {table} table; pass --resume to extend it "
                           f"(or choose another --out)")


def existing_rows(out: Path, table: str) -> list[dict[str, Any]]:
    """Rows of a finished table in `out` (to extend it on --resume), else none."""
    if not (out / META_FILE).is_file():
        return []
    profile = read_profile(out)
    frame = profile.ops if table == "ops.csv" else profile.collectives
    records: list[dict[str, Any]] = [] if frame is None else frame.to_dict("records")  # type: ignore[assignment]
    return records


def _compatible(out: Path, device: DeviceInfo, precision: Precision) -> ProfileMeta | None:
    if not (out / META_FILE).is_file():
        return None
    meta = read_meta(out)
    if meta.device.name != device.name:
        raise ProfileError(f"{out} was measured on '{meta.device.name}', this run on "
                           f"'{device.name}'; write to another --out")
    if meta.precision is not precision:
        raise ProfileError(f"{out} was measured in {meta.precision.value}, this run in "
                           f"{precision.value}; write to another --out")
    return meta


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Journal rows are strings, finished-table rows typed: one type per column before merging."""
    out = frame.copy()
    for col in out.columns:
        out[col] = out[col].astype(str) if col in STR_COLUMNS else pd.to_numeric(out[col])
    return out


def write_profile(out: Path, table: str, rows: Sequence[dict[str, Any]], key: Sequence[str],
                  device: DeviceInfo, hardware: str | None, precision: Precision, date: str,
                  selection: dict[str, Any] | None = None) -> ProfileMeta:
    """Write `rows` as `table` (deduplicated on `key`, last wins; sorted) and the metadata,
    keeping the other tables of an existing profile in `out`."""
    return write_tables(out, {table: (rows, key)}, device, hardware, precision, date, selection)


def write_tables(out: Path, tables: Mapping[str, tuple[Sequence[dict[str, Any]], Sequence[str]]],
                 device: DeviceInfo, hardware: str | None, precision: Precision, date: str,
                 selection: dict[str, Any] | None = None) -> ProfileMeta:
    """Write several tables (each deduplicated on its key, last wins; sorted), then the
    metadata once: a reader never sees some of them updated and others not."""
    previous = _compatible(out, device, precision)
    infos = dict(previous.tables) if previous else {}
    for table, (rows, key) in tables.items():
        columns = list(TABLE_COLUMNS[table])
        frame = _typed(pd.DataFrame(list(rows), columns=columns)).drop_duplicates(list(key),
                                                                                   keep="last")
        frame = frame.sort_values(list(key), kind="stable").reset_index(drop=True)
        write_text_atomic(out / table, frame.to_csv(index=False))
        infos[table] = TableInfo(rows=len(frame), sha256=file_sha256(out / table))
    meta = ProfileMeta(
        schema_version=SCHEMA_VERSION, device=device,
        hardware=hardware if hardware is not None else (previous.hardware if previous else None),
        precision=precision, date=date, tables=infos, content_hash=content_hash(infos),
        selection=selection if selection is not None else (previous.selection if previous else None))
    write_json_atomic(out / META_FILE, meta.model_dump(mode="json"))
    return meta
