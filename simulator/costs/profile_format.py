"""The on-disk format of a measured profile, and its reader.

A profile is a directory written by `profiler` (``python -m vtrain_ml.profile``)::

    metadata.json      ProfileMeta: schema version, device, precision, date, host, tables + hashes
    ops.csv            one row per unique measured operator (OPS_COLUMNS)
    collectives.csv    one row per (collective, group size, message size) (COLLECTIVE_COLUMNS)
    traces.csv         one row per imported or recorded trace of a real stack (TRACE_COLUMNS)
    phases.csv         one row per (trace, phase): kernel and host time (PHASE_COLUMNS)
    phase_kernels.csv  one row per (trace, phase, kernel class, scaling) (PHASE_KERNEL_COLUMNS)

Every table is optional; a profile holds what was measured into it. Schema version 2 added the
three trace tables (`python -m vtrain_ml.profile import-trace` / `trace`); version-1 profiles
(ops and collectives only) still load unchanged.

Schema of ``ops.csv`` (version 1). The key columns are exactly `simulator.graph.ops.Op.profile_key`, so
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

``traces.csv`` (version 2): ``trace`` (the first 16 hex digits of the trace file's sha256: the
same file imported twice is one row), ``file``, ``source`` (import-trace or trace), ``stack`` (a
label: reference, huggingface, megatron-core, or what the user called an imported stack); the
traced per-rank shape: ``hidden``, ``heads``, ``query_groups``, ``ffn``, ``gated_mlp``, ``norm``,
``use_bias``, ``position_embedding``, ``tied_embeddings``, ``vocab``, ``hidden_dropout``,
``attention_dropout``, ``seq``, ``micro_batch``, ``tp`` (heads, query groups, FFN and vocabulary
are divided by it), ``sequence_parallel``, ``recompute``, ``flash_attention``, ``precision``,
``framework``, ``layers`` and ``micro_batches`` (as traced); what the trace shows per iteration:
``iteration_s``, ``kernels``, ``kernel_s``, ``busy_s``, ``unattributed_kernels``,
``unattributed_kernel_s``, ``gpu_gap_s`` (median idle time between back-to-back queued kernels);
and, when known, ``host_ratio`` (host time of the iteration without the profiler / with it,
measured by `trace`), ``profiler_op_s`` (the host time the profiler added per recorded CPU op of
the forward and backward passes: the difference of the two host times over those ops),
``profiler_step_op_s`` (the same for the optimizer step's ops),
``measured_iteration_s`` (the job's unprofiled iteration time) and ``peak_memory_bytes``
(NaN when unknown).

``phases.csv``: ``trace``, ``phase`` (`TracePhase`), ``instances`` (how many the trace held, e.g.
layers x micro-batches); per instance (means): ``kernels``, ``kernel_s`` (sum of GPU event
durations), ``busy_s`` (their union), ``host_s`` (host time the phase's ops own, without waits in
synchronizing calls or on a full launch queue), ``host_p50_s`` (median over instances),
``cpu_ops``, ``launches``, ``runtime_s`` (CUDA runtime/driver call time), ``sync_s``,
``blocked_s`` (the waits taken out of host_s), ``host_lead_s`` (mean time from a launch call to
its kernel's start); ``first_kernels``, ``first_kernel_s``, ``first_host_s``: the same for the
first micro-batch's instances alone (added within version 2; NaN in older profiles, read as "no
different from the mean"). The first micro-batch differs for a reason, not by chance: with
``zero_grad(set_to_none=True)`` its backward finds no gradient to add to (autograd's
AccumulateGrad keeps the new gradient; later micro-batches launch one add per parameter).
``phase_kernels.csv``: ``trace``, ``phase``, ``kernel_class`` (gemm,
attention, elementwise, norm, reduction, copy, communication, memset), ``scales_with`` (tokens or
params: whether the launching op read a parameter-shaped tensor), ``kernels``, ``kernel_s``
(per phase instance).

Tables are CSV (diffable, no Parquet dependency in the simulator core). Every table's sha256 is in
the metadata together with a content hash over all tables, so that a profile edited after it was
written is detected, and so that saved artefacts can record which profile they came from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field

from simulator.errors import ProfileError
from simulator.fileio import read_json_file
from simulator.job.enums import Precision
from simulator.job.specs import Frozen, parse

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
META_FILE = "metadata.json"
OPS_TABLE = "ops.csv"
COLLECTIVES_TABLE = "collectives.csv"
TRACES_TABLE = "traces.csv"
PHASES_TABLE = "phases.csv"
PHASE_KERNELS_TABLE = "phase_kernels.csv"
STAT_COLUMNS = ("median_s", "p10_s", "p90_s", "repeats")
OPS_KEY = ("kind", "variant", "phase", "shape", "dtype_bytes")
OPS_COLUMNS = (*OPS_KEY, "flops", "bytes", *STAT_COLUMNS, "example")
COLLECTIVE_KEY = ("kind", "group_size", "bytes")
COLLECTIVE_COLUMNS = (*COLLECTIVE_KEY, *STAT_COLUMNS, "source")
TRACE_SHAPE_COLUMNS = ("hidden", "heads", "query_groups", "ffn", "gated_mlp", "norm", "use_bias",
                       "position_embedding", "tied_embeddings", "vocab", "hidden_dropout",
                       "attention_dropout", "seq", "micro_batch", "tp", "sequence_parallel",
                       "recompute", "flash_attention", "precision", "framework", "layers",
                       "micro_batches")
TRACE_COLUMNS = ("trace", "file", "source", "stack", *TRACE_SHAPE_COLUMNS, "iteration_s", "kernels",
                 "kernel_s", "busy_s", "unattributed_kernels", "unattributed_kernel_s", "gpu_gap_s",
                 "host_ratio", "profiler_op_s", "profiler_step_op_s", "measured_iteration_s",
                 "peak_memory_bytes")
PHASE_KEY = ("trace", "phase")
PHASE_COLUMNS = (*PHASE_KEY, "instances", "kernels", "kernel_s", "busy_s", "host_s", "host_p50_s",
                 "cpu_ops", "launches", "runtime_s", "sync_s", "blocked_s", "host_lead_s",
                 "first_kernels", "first_kernel_s", "first_host_s")
PHASE_KERNEL_KEY = ("trace", "phase", "kernel_class", "scales_with")
PHASE_KERNEL_COLUMNS = (*PHASE_KERNEL_KEY, "kernels", "kernel_s")
# columns a table of an older version-2 profile may lack: read as NaN (unknown)
OPTIONAL_COLUMNS = {PHASES_TABLE: ("first_kernels", "first_kernel_s", "first_host_s")}
TABLE_COLUMNS = {OPS_TABLE: OPS_COLUMNS, COLLECTIVES_TABLE: COLLECTIVE_COLUMNS,
                 TRACES_TABLE: TRACE_COLUMNS, PHASES_TABLE: PHASE_COLUMNS,
                 PHASE_KERNELS_TABLE: PHASE_KERNEL_COLUMNS}
STRING_COLUMNS = frozenset({"kind", "variant", "phase", "shape", "example", "source", "trace", "file",
                            "stack", "norm", "position_embedding", "recompute", "precision",
                            "framework", "kernel_class", "scales_with"})


class TracePhase(StrEnum):
    """Phases of a traced training iteration (profiler.trace.phases cuts them)."""

    EMBEDDING_FORWARD = "embedding_forward"
    LAYER_FORWARD = "layer_forward"
    HEAD_FORWARD = "head_forward"
    HEAD_BACKWARD = "head_backward"
    LAYER_RECOMPUTE = "layer_recompute"
    LAYER_BACKWARD = "layer_backward"
    EMBEDDING_BACKWARD = "embedding_backward"
    OPTIMIZER = "optimizer"
    UNATTRIBUTED = "unattributed"


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
    traces: pd.DataFrame | None = None
    phases: pd.DataFrame | None = None
    phase_kernels: pd.DataFrame | None = None

    @property
    def traced(self) -> bool:
        """Whether the profile holds phase costs of traced training iterations."""
        return self.traces is not None and self.phases is not None and len(self.traces) > 0


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
    if version not in READABLE_VERSIONS:
        raise ProfileError(f"profile {path} has schema version {version!r}, this vtrain-ml reads "
                           f"versions {', '.join(map(str, READABLE_VERSIONS))}; re-profile with "
                           f"this version")
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
    header = pd.read_csv(file, nrows=0).columns
    frame = pd.read_csv(file, keep_default_na=False, na_values={c: ["nan", "NaN", ""] for c in header
                                                               if c not in STRING_COLUMNS},
                        dtype={c: str for c in header if c in STRING_COLUMNS})
    for column in OPTIONAL_COLUMNS.get(name, ()):
        if column not in frame.columns:
            frame[column] = float("nan")
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
    return Profile(root, meta, tables.get(OPS_TABLE), tables.get(COLLECTIVES_TABLE),
                   tables.get(TRACES_TABLE), tables.get(PHASES_TABLE), tables.get(PHASE_KERNELS_TABLE))
