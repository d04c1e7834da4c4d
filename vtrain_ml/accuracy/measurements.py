"""Measured-iteration CSVs (vTrain's published layout) -> jobs under the runs' conditions.

Two layouts, told apart by the header: the single-node file and the multi-node file, which adds a
"Parameters (billion)" column. Conditions of every row (vTrain's Megatron-DeepSpeed runs): fp16,
full activation recompute, fused softmax / bias-GeLU, no flash attention, no sequence parallelism,
1F1B, data-parallel all-reduce after backward without bucketing, vocabulary 50257, learned position
embeddings, 8 GPUs per node on NVLink (150 GB/s), 800 Gbps between nodes, Adam.

The files do not say which A100 was used; `validate` defaults to the 80 GB part (a100-80gb)
because the runs could not have fit in 40 GB: 20 of the 51 multi-node rows need more than 40 GiB
per GPU (the simulator marks them as not fitting a100-40gb). E.g. the 3.6B model at tp = pp = 1
holds 16 bytes of weights, gradients and Adam state per parameter (58 GB) before activations.
The 80 GB part also has the faster HBM2e (2039 vs 1555 GB/s), which memory-bound kernels see.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from simulator.errors import DataError
from simulator.job.loaders import job_from_dict
from simulator.job.specs import Job

COLUMNS = {
    "# GPUs": "num_gpus",
    "global batch": "global_batch_size",
    "micro batch": "micro_batch_size",
    "hidden size": "hidden_size",
    "attention heads": "num_attention_heads",
    "# layers": "num_layers",
    "sequence length": "seq_length",
    "tensor parallelism": "tp",
    "data parallelism": "dp",
    "pipeline parallelism": "pp",
    "iteration time (ms)": "measured_ms",
}
OPTIONAL = {"Parameters (billion)": "params_billion"}

CONDITIONS = {
    "vocab_size": 50257,
    "gpus_per_node": 8,
    "intra_node_bandwidth_GBps": 150.0,
    "inter_node_bandwidth_Gbps": 800.0,
}


@dataclass(frozen=True)
class Measurements:
    """Valid rows (one per configuration) and one line per skipped row (file, row, column, why)."""

    rows: pd.DataFrame  # internal column names + source, row (1-based line in its file)
    problems: tuple[str, ...]
    content_hash: str  # sha256 of the files' bytes, in the order given

    @property
    def skipped(self) -> int:
        return len(self.problems)


def is_vtrain_header(header: list[str]) -> bool:
    """vTrain's published layout, told from a runs file by its header."""
    return "iteration time (ms)" in [c.strip() for c in header]


def read_measurements(paths: list[str | Path], require_rows: bool = True) -> Measurements:
    frames, problems, digest = [], [], hashlib.sha256()
    for path in paths:
        frame, bad = _read_one(Path(path))
        digest.update(Path(path).read_bytes())
        frames.append(frame)
        problems += bad
    rows = pd.concat(frames, ignore_index=True)
    if rows.empty and require_rows:
        first = f"; first: {problems[0]}" if problems else ""
        raise DataError(f"no valid measurement rows in {', '.join(map(str, paths))} "
                        f"({len(problems)} skipped{first})")
    return Measurements(rows, tuple(problems), digest.hexdigest()[:16])


def _read_one(path: Path) -> tuple[pd.DataFrame, list[str]]:
    if not path.is_file():
        raise DataError(f"measurement file {path} does not exist")
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a readable CSV ({exc})") from None
    header = [c.strip() for c in raw.columns]
    raw.columns = header
    missing = [c for c in COLUMNS if c not in header]
    unknown = [c for c in header if c not in COLUMNS and c not in OPTIONAL]
    if missing or unknown:
        parts = ([f"missing column(s) {missing}"] if missing else []) + (
            [f"unknown column(s) {unknown}"] if unknown else [])
        raise DataError(f"{path}: {'; '.join(parts)}; expected the vTrain layout: {list(COLUMNS)}")
    problems: list[str] = []
    keep = pd.Series(True, index=raw.index)
    for column in header:
        values = pd.to_numeric(raw[column].str.strip(), errors="coerce")
        for i in values.index[values.isna() & keep]:
            problems.append(f"{path}: row {i + 2}, column '{column}': {raw[column].iloc[i]!r} is not "
                            "a number; row skipped")
        keep &= values.notna()
        raw[column] = values
    frame = raw.rename(columns={**COLUMNS, **OPTIONAL})
    frame["source"] = path.name
    frame["row"] = frame.index + 2  # line number in the file (header is line 1)
    frame = frame[keep]
    product = frame.tp * frame.dp * frame.pp
    impossible = product != frame.num_gpus
    for _, r in frame[impossible].iterrows():
        problems.append(f"{path}: row {r.row}, column '# GPUs': tp*dp*pp = {int(r.tp * r.dp * r.pp)} != "
                        f"# GPUs = {int(r.num_gpus)}; row skipped")
    frame = frame[~impossible].reset_index(drop=True)
    int_columns = [c for c in COLUMNS.values() if c != "measured_ms"]
    frame[int_columns] = frame[int_columns].astype(int)
    return frame, sorted(problems, key=_row_order)


def _row_order(problem: str) -> int:
    return int(problem.split(": row ")[1].split(",")[0])


def row_to_job(row: pd.Series, hardware: str) -> Job:
    """A measured row as a job under the runs' conditions on `hardware` (name or file)."""
    return job_from_dict({
        "model": {"name": f"gpt-h{int(row.hidden_size)}-l{int(row.num_layers)}",
                  "num_layers": int(row.num_layers), "hidden_size": int(row.hidden_size),
                  "num_attention_heads": int(row.num_attention_heads),
                  "vocab_size": CONDITIONS["vocab_size"], "seq_length": int(row.seq_length)},
        "training": {"global_batch_size": int(row.global_batch_size),
                     "micro_batch_size": int(row.micro_batch_size), "precision": "fp16",
                     "recompute": "full", "flash_attention": False, "framework": "megatron-deepspeed"},
        "parallel": {"tp": int(row.tp), "pp": int(row.pp), "dp": int(row.dp), "schedule": "1f1b"},
        "cluster": {"gpu": hardware, "num_gpus": int(row.num_gpus),
                    "gpus_per_node": CONDITIONS["gpus_per_node"],
                    "intra_node_bandwidth_GBps": CONDITIONS["intra_node_bandwidth_GBps"],
                    "inter_node_bandwidth_Gbps": CONDITIONS["inter_node_bandwidth_Gbps"]},
    })
