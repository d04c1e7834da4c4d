"""Rebuild a traced profile's tables from its raw traces with the current importer.

A profile written by `profile trace` keeps the raw torch.profiler traces under `traces/`; the
tables are derived from them. When the importer learns something (issue 10 follow-up: host times
from the least-disturbed iteration, launch-queue waits and back-pressure taken out), this rebuilds
the tables without a GPU: every trace is analysed again, and what `trace` measured beside it and
no trace holds (the unprofiled iteration, the peak memory, the profiler's cost per op and the
host-time ratio) is carried over from the old row.

--recorded-padded-vocab: the shapes were traced before the stacks kept a plain PyTorch / Hugging
Face vocabulary unpadded (commit c8c5569): the shards ran Megatron's padded vocabulary (50,304
columns for GPT-2's 50,257 at tp 1), so the rebuilt rows say so, and a simulation of the real
(unpadded, unaligned) job scales the logits from the shape that actually ran.

Run: python bench/reimport_traced_profile.py data/profiles/h100-traced-reference [OUT]
         [--recorded-padded-vocab]   (OUT defaults to rebuilding in place)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from profiler.trace.importer import TraceSource, analyze, write_imported  # noqa: E402
from simulator.costs.profile_format import TRACES_TABLE, read_profile  # noqa: E402
from simulator.costs.traced_shapes import traced_job  # noqa: E402
from simulator.graph.params import padded_vocab  # noqa: E402
from simulator.job.enums import Framework  # noqa: E402
from simulator.job.loaders import load_job  # noqa: E402
from simulator.job.specs import Job  # noqa: E402

JOBS = ROOT / "data" / "measured" / "h100" / "jobs"
TRACES_DIR_NAME = "traces"  # where `trace` keeps the raw traces (profiler.stacks.runner)
CARRIED = ("host_ratio", "profiler_op_s", "profiler_step_op_s")


def base_job(file: str) -> Job:
    """The measured job a `trace` file name starts with (`<job>_tp<k>_mb...json.gz`)."""
    name = file.split("_tp")[0]
    path = JOBS / f"{name}.yaml"
    if not path.is_file():
        raise SystemExit(f"{file}: no job {path} to rebuild its shape from")
    return load_job(path)


def as_recorded(job: Job, row: dict, padded: bool) -> Job:
    shard = traced_job(job, row)
    if padded and shard.training.framework is Framework.PYTORCH:
        model = shard.model.model_copy(update={
            "vocab_size": padded_vocab(shard.model, shard.parallel.tp)})
        shard = shard.model_copy(update={"model": model})
    return shard


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile", type=Path)
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--recorded-padded-vocab", action="store_true")
    args = ap.parse_args()
    old = read_profile(args.profile)
    assert old.traces is not None, f"{args.profile} holds no traces"
    hardware = old.meta.hardware
    rows = old.traces.to_dict("records")
    staging = Path(tempfile.mkdtemp())
    for row in rows:
        job = as_recorded(base_job(str(row["file"])), row, args.recorded_padded_vocab)
        source = TraceSource(args.profile / TRACES_DIR_NAME / str(row["file"]), job,
                             str(row["stack"]), source=str(row["source"]),
                             measured_iteration_s=row["measured_iteration_s"],
                             peak_memory_bytes=row["peak_memory_bytes"])
        item = analyze(source)
        item.rows[TRACES_TABLE][0].update({c: row[c] for c in CARRIED})
        write_imported(staging, [item], hardware, old.meta.selection)
        s = item.summary
        print(f"  {row['file']}: host of iteration {s.host_iteration + 1} of {s.iterations} "
              f"({', '.join(f'{h * 1e3:.1f}' for h in s.host_by_iteration_s)} ms), back-pressure "
              f"slowdown {s.pressure_slowdown:.2f}", flush=True)
    out = args.out or args.profile
    out.mkdir(parents=True, exist_ok=True)
    for table in staging.iterdir():
        shutil.copy2(table, out / table.name)
    if out != args.profile and not (out / TRACES_DIR_NAME).exists():
        shutil.copytree(args.profile / TRACES_DIR_NAME, out / TRACES_DIR_NAME)
    print(f"rebuilt {len(rows)} traces into {out}")


if __name__ == "__main__":
    main()
