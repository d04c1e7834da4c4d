"""Many jobs in one call: every job file of the given files and directories, times every variant
of the command-line overrides, simulated in one process -- one row each, with that job's result
or its error. One bad file never stops the batch.

Rows are plain dicts (CSV and JSON ready); `rows_table` is their text view. Status: "ok",
"rejected" (vTrain's own `validate_config` rejects the file too), or "error".
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.errors import VTrainError
from simulator.job.loaders import read_job
from simulator.job.specs import GiB, Job
from simulator.job.vtrain_config import VTrainRejects
from simulator.report.render import duration, usd
from simulator.report.result import SimulationResult
from vtrain_ml.jobs import Overrides, apply

log = logging.getLogger(__name__)

JOB_SUFFIXES = (".json", ".yaml", ".yml")
COLUMNS = ("path", "variant", "status", "model", "gpu", "num_gpus", "tp", "pp", "dp", "cp", "ep",
           "expert_tp", "micro_batch_size", "num_microbatches", "global_batch_size", "schedule",
           "recompute", "precision", "low_precision_recipe", "data_parallel_sharding",
           "cross_entropy_fusion", "iteration_time_s", "tokens_per_s", "mfu", "tp_comm_s",
           "ep_comm_s", "cp_comm_s",
           "fsdp_comm_s", "dp_comm_exposed_s", "grad_bucket_mb", "param_gather_wait_s",
           "peak_memory_GiB",
           "memory_capacity_GiB", "fits", "cost_per_iteration_usd", "usd_per_million_tokens", "notes",
           "error")


@dataclass(frozen=True)
class Task:
    path: Path
    overrides: Overrides


def job_files(sources: Sequence[str | Path]) -> list[Path]:
    """The given files, and every .json/.yaml/.yml file under the given directories (sorted);
    a path that does not exist stays in the list (its row says so)."""
    out: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.suffix.lower() in JOB_SUFFIXES and p.is_file())
        else:
            out.append(path)
    return out


def tasks(files: Iterable[Path], variants: Sequence[Overrides]) -> list[Task]:
    return [Task(f, v) for f in files for v in variants]


def run_task(task: Task, simulate_job: Callable[[Job], SimulationResult],
             debug: bool = False) -> dict[str, Any]:
    """One row: the job's layout and result, or why it could not be simulated."""
    row: dict[str, Any] = {"path": str(task.path), "variant": task.overrides.label()}
    try:
        loaded = read_job(task.path)
        job = apply(loaded.job, task.overrides)
        result = simulate_job(job)
    except VTrainRejects as exc:
        return {**row, "status": "rejected", "error": _without_path(str(exc), task.path)}
    except VTrainError as exc:
        return {**row, "status": "error", "error": _without_path(str(exc), task.path)}
    except Exception as exc:  # a bug must not stop the batch; it is reported in the row
        if debug:
            raise
        log.debug("internal error on %s", task.path, exc_info=True)
        return {**row, "status": "error", "error": f"internal error {type(exc).__name__}: {exc}"}
    return ok_row(task, result, loaded.notes)


def ok_row(task: Task, result: SimulationResult, notes: Sequence[str]) -> dict[str, Any]:
    """The row of a job that simulated."""
    return {"path": str(task.path), "variant": task.overrides.label(), "status": "ok",
            **result_columns(result), "notes": " | ".join(notes)}


def _without_path(message: str, path: Path) -> str:
    return message.removeprefix(f"{path}: ")


def result_columns(result: SimulationResult) -> dict[str, Any]:
    j = result.job
    return {
        "model": j["model"], "num_gpus": j["num_gpus"], "tp": j["tp"], "pp": j["pp"], "dp": j["dp"],
        "cp": j.get("cp", 1), "ep": j.get("ep", 1), "expert_tp": j.get("expert_tp", ""),
        "tp_comm_s": result.breakdown["tp_comm"], "ep_comm_s": result.breakdown.get("ep_comm", 0.0),
        "cp_comm_s": result.breakdown.get("cp_comm", 0.0),
        "fsdp_comm_s": result.breakdown.get("fsdp_comm", 0.0),
        "dp_comm_exposed_s": result.breakdown["dp_comm_exposed"],
        "grad_bucket_mb": j.get("grad_bucket_mb", ""),  # overlapped reductions only
        # overlap_param_gather only: what the critical stage's first forwards waited for
        "param_gather_wait_s": ("" if result.param_gather_wait_s is None
                                else float(result.param_gather_wait_s[result.critical_stage].sum())),
        "micro_batch_size": j["micro_batch_size"], "num_microbatches": result.num_microbatches,
        "global_batch_size": j["global_batch_size"], "schedule": j["schedule"],
        "microbatch_group_size_per_vp_stage": j.get("microbatch_group_size_per_vp_stage", ""),
        "recompute": j["recompute"],
        "gpu": j["gpu"], "precision": j["precision"],
        "low_precision_recipe": j.get("low_precision_recipe", ""),
        "data_parallel_sharding": j.get("data_parallel_sharding",
                                        "optim" if j["distributed_optimizer"] else "no_shard"),
        "cross_entropy_fusion": j.get("cross_entropy_fusion", "none"),
        "iteration_time_s": result.iteration_time_s, "tokens_per_s": result.tokens_per_s, "mfu": result.mfu,
        "peak_memory_GiB": result.peak_memory_bytes / GiB,
        "memory_capacity_GiB": result.memory_capacity_bytes / GiB,
        "fits": result.fits_in_memory, "cost_per_iteration_usd": result.cost_per_iteration_usd,
        "usd_per_million_tokens": result.usd_per_million_tokens,
    }


def run_batch(work: Sequence[Task], simulate_job: Callable[[Job], SimulationResult],
              progress: Callable[[Iterable[Task]], Iterable[Task]] = iter, debug: bool = False
              ) -> list[dict[str, Any]]:
    return [run_task(t, simulate_job, debug) for t in progress(work)]


def counts(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    out = {"ok": 0, "rejected": 0, "error": 0}
    for row in rows:
        out[row["status"]] += 1
    return out


def summary(rows: Sequence[dict[str, Any]]) -> str:
    c = counts(rows)
    return (f"{len(rows)} jobs: {c['ok']} simulated, {c['rejected']} rejected (vTrain rejects them "
            f"too), {c['error']} failed")


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, "") for k in COLUMNS})
    return buffer.getvalue()


def rows_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows side by side: layout, iteration time, MFU, memory, cost; errors in full."""
    label_of = _labels(rows)
    header = ("job", "gpus", "tp", "pp", "dp", "mb x n", "recompute", "iteration", "MFU", "peak GiB",
              "fits", "$/iter", "$/M tokens")
    body: list[tuple[str, ...]] = []
    errors: list[str] = []
    for row in rows:
        label = label_of(row)
        if row["status"] != "ok":
            body.append((label, *["-"] * 9, row["status"], "", ""))
            errors.append(f"  {label}: {row['status']}: {row['error']}")
            continue
        body.append((label, str(row["num_gpus"]), str(row["tp"]), str(row["pp"]), str(row["dp"]),
                     f"{row['micro_batch_size']} x {row['num_microbatches']}", row["recompute"],
                     duration(row["iteration_time_s"]), f"{row['mfu']:.1%}",
                     f"{row['peak_memory_GiB']:.1f}", "yes" if row["fits"] else "NO",
                     usd(row["cost_per_iteration_usd"]), usd(row["usd_per_million_tokens"])))
    widths = [max(len(r[i]) for r in (header, *body)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(r, widths, strict=True)))
             for r in (header, *body)]
    return "\n".join([*lines, *errors])


def _labels(rows: Sequence[dict[str, Any]]) -> Callable[[dict[str, Any]], str]:
    paths = {r["path"] for r in rows}
    variants = {r["variant"] for r in rows}

    def label(row: dict[str, Any]) -> str:
        parts = [row["path"]] if len(paths) > 1 or not row["variant"] else []
        if len(variants) > 1 or (row["variant"] and len(paths) == 1):
            parts.append(row["variant"] or "(as in the file)")
        return " ".join(parts)

    return label
