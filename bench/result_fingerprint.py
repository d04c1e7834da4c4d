"""Fingerprint of the simulator's results on a fixed set of jobs (a refactoring check, not a test).

    PYTHONPATH=. .venv/bin/python bench/result_fingerprint.py [--out results.json] [--samples N]

Simulates, through the public API only, every example job, the A100 measured rows of
`data/measured`, the H100 job files (analytic, operator profile and traced profiles), the shared
vTrain config files and N jobs drawn from the surrogate's default space (seed 0), and prints one
SHA-256 per group and over everything, of the canonical JSON of each `SimulationResult.to_dict()`
(or of the error line a job raised). Run it before and after a change that must not move results
(issue 21's restructure): equal hashes mean byte-identical results; `--out` keeps the full JSON so
that `diff` shows which job moved and where.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"


def _with_profile() -> Callable[..., Any]:
    """`simulate_with_profile` wherever this checkout keeps it (it moved in issue 21)."""
    try:
        from simulator.simulate import simulate_with_profile
    except ImportError:
        from simulator.traced import simulate_with_profile  # type: ignore[no-redef]
    return simulate_with_profile


def _result(run: Callable[[], Any]) -> Any:
    from simulator import VTrainError

    try:
        out = run()
    except VTrainError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    result = out[0] if isinstance(out, tuple) else out
    return result if isinstance(result, dict) else result.to_dict()


def _examples() -> Iterator[tuple[str, Callable[[], Any]]]:
    from simulator import load_job, simulate

    for path in sorted((ROOT / "examples").glob("*.yaml")):
        try:
            job = load_job(path)
        except Exception:  # a recipe, not a job file
            continue
        yield path.name, lambda job=job: simulate(job)


def _a100_rows() -> Iterator[tuple[str, Callable[[], Any]]]:
    from simulator import simulate
    from vtrain_ml.accuracy.measurements import read_measurements
    from vtrain_ml.accuracy.predict import jobs_for

    for name in ("a100_single_node.csv", "a100_multi_node.csv"):
        rows = read_measurements([ROOT / "data" / "measured" / name]).rows
        for i, job in enumerate(jobs_for(rows, "a100-80gb")):
            yield f"{name}:{i}", lambda job=job: simulate(job)


def _h100_jobs() -> Iterator[tuple[str, Callable[[], Any]]]:
    from simulator import load_job, simulate

    profiles = ROOT / "data" / "profiles"
    with_profile = _with_profile()
    for path in sorted((ROOT / "data" / "measured" / "h100" / "jobs").glob("*.yaml")):
        job = load_job(path)
        yield f"{path.name}:analytic", lambda job=job: simulate(job)
        for profile in ("h100-sxm-80gb-ops", "h100-traced-reference", "h100-traced-huggingface"):
            if (profiles / profile).is_dir():
                yield (f"{path.name}:{profile}",
                       lambda job=job, p=str(profiles / profile): with_profile(job, p))


def _vtrain_configs() -> Iterator[tuple[str, Callable[[], Any]]]:
    from simulator import load_job, simulate

    for path in sorted((SHARED / "vtrain_configs").rglob("*.json")):
        try:
            job = load_job(path)
        except Exception as e:  # the error line is part of the fingerprint
            yield str(path.relative_to(SHARED)), lambda e=e: {"error": str(e)}
            continue
        yield str(path.relative_to(SHARED)), lambda job=job: simulate(job)


def _space(n: int) -> Iterator[tuple[str, Callable[[], Any]]]:
    from simulator import simulate
    from surrogate.features import catalog_hardware, record_to_job
    from surrogate.sampling import draw
    from surrogate.space import default_space_path, load_space

    space = load_space(default_space_path())
    hardware = {name: catalog_hardware(name) for name in space.hardware}
    for i, record in enumerate(draw(space, hardware, n, seed=0).records):
        job = record_to_job(record, hardware)
        yield f"space:{i}", lambda job=job: simulate(job)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write every job's result JSON here")
    ap.add_argument("--samples", type=int, default=400, help="jobs drawn from the default space")
    args = ap.parse_args(argv)
    groups = {"examples": _examples(), "a100_rows": _a100_rows(), "h100_jobs": _h100_jobs(),
              "vtrain_configs": _vtrain_configs(), "space": _space(args.samples)}
    everything: dict[str, Any] = {}
    total = hashlib.sha256()
    for group, jobs in groups.items():
        digest = hashlib.sha256()
        count = 0
        for name, run in jobs:
            value = _result(run)
            text = json.dumps(value, sort_keys=True, default=str)
            digest.update(f"{name}\n{text}\n".encode())
            everything[f"{group}/{name}"] = value
            count += 1
        total.update(digest.digest())
        print(f"{group:16s} {count:5d} jobs  sha256 {digest.hexdigest()[:16]}")
    print(f"{'all':16s} {len(everything):5d} jobs  sha256 {total.hexdigest()[:16]}")
    if args.out:
        Path(args.out).write_text(json.dumps(everything, sort_keys=True, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
