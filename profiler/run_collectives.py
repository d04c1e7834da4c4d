"""`profile collectives` and `profile import-nccl-tests`: fill a profile's collectives table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.device import catalog_hardware, now_iso
from profiler.nccl_import import import_files
from profiler.store import Journal, check_fresh_or_resume, existing_rows, write_profile
from simulator.costs.profile_format import (
    COLLECTIVE_KEY,
    COLLECTIVES_TABLE,
    META_FILE,
    DeviceInfo,
    ProfileMeta,
    read_meta,
)
from simulator.errors import ProfileError
from simulator.job.enums import Precision


@dataclass(frozen=True)
class CollectivesReport:
    measured_now: int
    total_rows: int
    meta: ProfileMeta | None  # None on ranks other than 0


def _key(row: dict[str, Any]) -> tuple[str, int, int]:
    return (str(row["kind"]), int(row["group_size"]), int(row["bytes"]))


def run_collectives(out: Path, run: Any, resume: bool, precision: Precision,
                    hardware: str | None) -> CollectivesReport:
    """Measure under torchrun (every rank calls this); rank 0 journals and writes the table."""
    import torch.distributed as dist

    from profiler.collectives import init_distributed, measure_collectives
    from profiler.device import device_info

    device, backend = init_distributed()
    rank = dist.get_rank()
    journal = Journal(out, COLLECTIVES_TABLE)
    try:
        if rank == 0:
            check_fresh_or_resume(out, COLLECTIVES_TABLE, resume)
        dist.barrier()
        done = (existing_rows(out, COLLECTIVES_TABLE) if resume else []) + journal.rows()
        dist.barrier()  # everyone has read the journal before rank 0 appends to it
        rows: list[dict[str, Any]] = list(done)

        def keep(row: dict[str, Any]) -> None:
            if rank == 0:
                journal.append(row)
                rows.append(row)
        count = measure_collectives(run, device, backend, {_key(r) for r in done}, keep)
        meta = None
        if rank == 0:
            info = device_info(device)
            hw = hardware or (catalog_hardware(info.name) if info.kind == "cuda" else None)
            meta = write_profile(out, COLLECTIVES_TABLE, rows, COLLECTIVE_KEY, info, hw, precision,
                                 now_iso())
            journal.remove()
        return CollectivesReport(count, len(rows), meta)
    finally:
        dist.destroy_process_group()


def import_nccl_tests(paths: list[Path], out: Path, hardware: str | None,
                      precision: Precision) -> CollectivesReport:
    """Add nccl-tests measurements to the collectives table of `out` (created if needed)."""
    imported = import_files(paths)
    previous = read_meta(out) if (out / META_FILE).is_file() else None
    if previous is not None:
        if imported.device_name and imported.device_name != previous.device.name:
            raise ProfileError(f"{out} was measured on '{previous.device.name}' but the "
                               f"nccl-tests output ran on '{imported.device_name}'; import into "
                               f"another --out")
        device = previous.device
        precision = previous.precision
    else:
        name = imported.device_name or (f"{hardware} (nccl-tests import)" if hardware else
                                        "unknown GPU (nccl-tests import)")
        device = DeviceInfo(kind="cuda", name=name)
    hw = hardware or (previous.hardware if previous else catalog_hardware(device.name))
    rows = existing_rows(out, COLLECTIVES_TABLE) + list(imported.rows)
    meta = write_profile(out, COLLECTIVES_TABLE, rows, COLLECTIVE_KEY, device, hw, precision, now_iso())
    return CollectivesReport(len(imported.rows), meta.tables[COLLECTIVES_TABLE].rows, meta)
