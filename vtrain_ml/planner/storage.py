"""Where a search's study lives: Optuna storages by URL, and the default journal file.

The default is Optuna's JournalStorage on a file of its own per study
(``runs/studies/<study>.journal``): an append-only log of operations, replayed in memory, so
reading the study costs nothing per trial. SQLite through SQLAlchemy re-reads every trial from
the database whenever the sampler asks for the history (TPE asks every trial): on case study 1 it
made a 11 s search take 50-60 s (bench/bench_search.py --storage-only measures it).

Durability: every operation is appended and flushed to the operating system before the search
goes on, so a killed search loses no finished trial and resumes (`--resume`). What the journal
backend here batches is `fsync`, the wait for the disk: Optuna's file backend calls it on every
append (~10 per trial; on this machine that alone was 7 s of a 27 s search); here it runs at most
once per `SYNC_INTERVAL_S` and when the process ends, so only a power loss or OS crash could drop
the last second of trials -- the same trade as SQLite's WAL mode with synchronous=NORMAL.
Appends take Optuna's own lock file, so processes using Optuna's `JournalFileBackend` on the same
file interoperate. A process killed while it holds the lock leaves the lock file behind, and
Optuna breaks such a lock only after the journal has not changed for 30 s: every resumed search
waited those 30 s (a measured part of "a resumed search took 90 s where an uninterrupted one
took 44 s"). A holder holds the lock for one append (a write and at most one fsync), so here a
lock is taken as abandoned after `STALE_LOCK_S` without the journal changing.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import weakref
from collections.abc import Generator
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import BaseJournalBackend, JournalFileBackend, JournalFileSymlinkLock

from simulator.errors import ConfigError
from vtrain_ml.planner.config import JOURNAL, MEMORY, SQLITE

SYNC_INTERVAL_S = 1.0
STALE_LOCK_S = 5  # a lock file older than this, with the journal unchanged, is abandoned


def storage_path(url: str) -> Path | None:
    """The file a journal or SQLite URL names (None for memory or a database server)."""
    for prefix in (JOURNAL, SQLITE):
        if url.startswith(prefix):
            return Path(url.removeprefix(prefix))
    return None


def _fsync(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SyncBatchedJournalFile(BaseJournalBackend):
    """Optuna's journal file, appended and flushed at once, synced to disk at most once per
    `sync_interval_s` and at exit (see the module docstring)."""

    def __init__(self, path: str, sync_interval_s: float | None = None) -> None:
        self._path = path
        self._reader = JournalFileBackend(path)  # creates the file; reads it as Optuna does
        self._lock = JournalFileSymlinkLock(path, grace_period=STALE_LOCK_S)  # JournalFileBackend's file
        self._interval = SYNC_INTERVAL_S if sync_interval_s is None else sync_interval_s
        self._synced = time.monotonic()
        weakref.finalize(self, _fsync, path)

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        yield from self._reader.read_logs(log_number_from)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
        self._lock.acquire()
        try:
            with open(self._path, "ab") as handle:
                handle.write(text.encode("utf-8"))
                handle.flush()
                if time.monotonic() - self._synced >= self._interval:
                    os.fsync(handle.fileno())
                    self._synced = time.monotonic()
        finally:
            self._lock.release()


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An Optuna storage from a URL: a journal file (``journal:///path/to/file.journal``), any
    SQLAlchemy URL (SQLite, PostgreSQL, MySQL), or ``memory`` (fast, gone when the process ends).
    Failures become one `ConfigError` line."""
    if url == MEMORY:
        return optuna.storages.InMemoryStorage()
    try:
        path = storage_path(url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        if url.startswith(JOURNAL):
            assert path is not None
            return optuna.storages.JournalStorage(SyncBatchedJournalFile(str(path)))
        kwargs: dict[str, Any] = {}
        if url.startswith(SQLITE):
            assert path is not None
            sqlite_path = path
            kwargs = {"creator": lambda: _sqlite_connect(sqlite_path)}
        return _rdb_storage(url, kwargs)
    except Exception as exc:  # SQLAlchemy/driver/OS errors of every kind: one line for the user
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot open storage {url}: {first}") from None


def _rdb_storage(url: str, engine_kwargs: dict[str, Any], tries: int = 5) -> optuna.storages.RDBStorage:
    """Optuna's RDBStorage; two processes opening a new database at once race to create its
    tables and stamp its schema version (the loser sees "table ... already exists" or a UNIQUE
    constraint on alembic_version), so those errors are retried: by then the schema exists and
    the storage opens it."""
    for attempt in range(tries):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
        except Exception as exc:  # SQLAlchemy's OperationalError / IntegrityError, not imported here
            racing = type(exc).__name__ in ("OperationalError", "IntegrityError")
            if not racing or attempt == tries - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _sqlite_connect(path: Path) -> sqlite3.Connection:
    """SQLite tuned for a search: write-ahead log (readers never block the writer, several local
    processes share one study) and no fsync per commit (a committed trial survives a killed
    process; only an OS crash could lose the last ones). Waits up to 60 s for the write lock."""
    connection = sqlite3.connect(str(path), timeout=60)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection
