"""Records -> exact simulator answers, and the sample tables on disk (Parquet chunks).

A samples folder holds ``manifest.json`` (space, hardware specs and hashes, seed, method,
simulator version, rejection counts) and ``chunk-NNNNN.parquet`` files, each written atomically,
with the `JOB_COLUMNS`, the targets (`TARGETS`) and ``sample_index``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from simulator.errors import DataError
from simulator.fileio import read_json_file
from simulator.job.specs import HardwareSpec
from simulator.simulate import simulate
from surrogate.features import JOB_COLUMNS, record_to_job, with_new_defaults

TARGETS = ("iteration_time_s", "peak_memory_bytes", "fits_in_memory", "cost_per_iteration_usd", "mfu")
MANIFEST = "manifest.json"
SCHEMA_VERSION = 1


def simulator_version() -> str:
    import simulator

    version = getattr(simulator, "__version__", None)
    if version:
        return str(version)
    try:
        return metadata.version("vtrain-ml")
    except metadata.PackageNotFoundError:
        return "unknown"


def plan_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """Records sharing a pipeline plan (schedule, pp, micro-batches, v) reuse its cached rounds."""
    m = int(record["global_batch_size"]) // (int(record["dp"]) * int(record["micro_batch_size"]))
    return (str(record["schedule"]), int(record["pp"]), m, int(record["virtual_stages"]))


def simulate_records(records: Sequence[Mapping[str, Any]],
                     hardware: Mapping[str, HardwareSpec] | None = None) -> pd.DataFrame:
    """`JOB_COLUMNS` plus the exact simulator's `TARGETS`, one row per record, in input order.

    Invalid records raise `ConfigError`. Records are simulated grouped by pipeline plan so that
    the simulator's schedule cache is hit (a cold plan costs several times a warm one).
    """
    order = sorted(range(len(records)), key=lambda i: plan_key(records[i]))
    rows: list[dict[str, Any]] = [{} for _ in records]
    for i in order:
        result = simulate(record_to_job(records[i], hardware))
        rows[i] = {**{c: records[i][c] for c in JOB_COLUMNS},
                   "iteration_time_s": result.iteration_time_s,
                   "peak_memory_bytes": result.peak_memory_bytes,
                   "fits_in_memory": result.fits_in_memory,
                   "cost_per_iteration_usd": result.cost_per_iteration_usd, "mfu": result.mfu}
    return pd.DataFrame(rows, columns=[*JOB_COLUMNS, *TARGETS])


def write_parquet_atomic(df: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        df.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def chunk_path(folder: Path, index: int) -> Path:
    return folder / f"chunk-{index:05d}.parquet"


def read_manifest(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / MANIFEST
    data = read_json_file(path, DataError, f"{folder} is not a samples folder (no {MANIFEST}); create "
                          "one with `python -m vtrain_ml.surrogate generate`", "regenerate the samples")
    return dict(data)


def manifest_hardware(manifest: Mapping[str, Any]) -> dict[str, HardwareSpec]:
    return {name: HardwareSpec.model_validate(entry["spec"])
            for name, entry in manifest.get("hardware", {}).items()}


def read_samples(folder: str | Path) -> pd.DataFrame:
    """All complete chunks of a samples folder, in sample order."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    chunks = sorted(folder.glob("chunk-*.parquet"))
    if not chunks:
        raise DataError(f"{folder} holds no sample chunks yet; run generate (with --resume to continue)")
    df = with_new_defaults(pd.concat([_read_chunk(c) for c in chunks], ignore_index=True))
    missing = [c for c in (*JOB_COLUMNS, *TARGETS) if c not in df.columns]
    if missing:
        raise DataError(f"{folder} samples lack column(s) {', '.join(missing)}")
    expected = manifest.get("n")
    if expected is not None and len(df) < int(expected):
        import logging

        logging.getLogger(__name__).warning("%s holds %d of %d samples (an unfinished run; "
                                            "continue with generate --resume)", folder, len(df), expected)
    return df.sort_values("sample_index", kind="stable").reset_index(drop=True) \
        if "sample_index" in df.columns else df


def _read_chunk(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a cut or foreign file
        raise DataError(f"{path} is damaged ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}); "
                        "run generate again with --resume: it simulates a damaged chunk anew") from None


def data_hash(df: pd.DataFrame) -> str:
    """Content hash of a sample table (columns, order and values)."""
    cols = [c for c in (*JOB_COLUMNS, *TARGETS) if c in df.columns]
    digest = hashlib.sha256(",".join(cols).encode())
    digest.update(pd.util.hash_pandas_object(df[cols], index=False).to_numpy().tobytes())
    return digest.hexdigest()[:16]
