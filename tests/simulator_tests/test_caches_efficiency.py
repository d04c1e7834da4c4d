"""Hardware objects that differ only in efficiencies (a calibration's candidates) share each job's
static parts (graph, round plan, memory), never its costs: each simulation equals a cold one."""

from __future__ import annotations

from pathlib import Path

from simulator import load_job, simulate
from simulator.prepare import job_static
from simulator.simulate import clear_caches

ROOT = Path(__file__).resolve().parents[2]
MTNLG = ROOT / "examples" / "mtnlg_530b.yaml"


def _with_efficiency(job, **values):  # type: ignore[no-untyped-def]
    efficiency = job.hardware.efficiency.model_copy(update=values)
    hardware = job.hardware.model_copy(update={"efficiency": efficiency})
    return job.model_copy(update={"hardware": hardware})


def test_candidates_of_a_calibration_share_the_static_parts_and_keep_their_own_costs() -> None:
    job = load_job(MTNLG)  # pp=35: p2p delays and the tail (per-model terms) matter
    candidates = [_with_efficiency(job, p2p_efficiency=e, memory_efficiency=m, inter_bus_efficiency=b)
                  for e, m, b in ((0.8, 0.8, 0.8), (0.3, 0.5, 0.4), (0.95, 0.9, 0.2))]
    clear_caches()
    warm = [simulate(c).to_dict() for c in candidates]
    assert job_static(candidates[0]) is job_static(candidates[2])  # built once
    assert len({d["iteration_time_s"] for d in warm}) == 3
    for candidate, result in zip(candidates, warm, strict=True):
        clear_caches()
        assert simulate(candidate).to_dict() == result  # as if it were the only one


def test_a_different_memory_capacity_is_not_shared() -> None:
    job = load_job(MTNLG)
    bigger = job.model_copy(update={"hardware": job.hardware.model_copy(update={"reserved_memory_GiB": 9.0})})
    assert job_static(bigger) is not job_static(job)
    assert simulate(bigger).peak_memory_bytes > simulate(job).peak_memory_bytes
