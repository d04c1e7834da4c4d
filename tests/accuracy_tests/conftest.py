"""Tiny runs files: single-GPU H100 jobs written as job files beside a runs CSV/YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.conftest import job_dict

H100_JOB: dict[str, Any] = job_dict(
    model={"num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "seq_length": 512,
           "vocab_size": 32000},
    training={"global_batch_size": 2, "micro_batch_size": 1, "precision": "bf16", "framework": "pytorch",
              "fused_softmax": False},
    parallel={"tp": 1, "pp": 1, "dp": 1},
    cluster={"gpu": "h100-sxm-80gb", "num_gpus": 1, "gpus_per_node": 8},
)


def h100_job(**sections: dict[str, Any]) -> dict[str, Any]:
    """The tiny single-GPU H100 job dict with fields of some sections overridden."""
    return {name: {**fields, **sections.get(name, {})} for name, fields in H100_JOB.items()}


def write_job(folder: Path, name: str, job: dict[str, Any]) -> str:
    """Write `job` to folder/jobs/name.yaml and return its path relative to `folder`."""
    (folder / "jobs").mkdir(parents=True, exist_ok=True)
    (folder / "jobs" / f"{name}.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    return f"jobs/{name}.yaml"


def write_runs(folder: Path, text: str, name: str = "runs.csv") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def synthetic_runs(folder: Path, jobs: dict[str, dict[str, Any]], truth: dict[str, float],
                   noise: float = 0.0) -> Path:
    """A runs CSV whose times are the simulator's on an H100 whose efficiencies are `truth`: a
    calibration that works recovers `truth`. `noise` > 0 multiplies each time by a seeded
    normal(1, noise) draw, like run-to-run variation."""
    import numpy as np

    from simulator import job_from_dict, simulate
    from vtrain_ml.accuracy.calibration import with_params

    rng = np.random.default_rng(0)
    lines = ["job,iteration_ms,tag"]
    for name, spec in jobs.items():
        job = job_from_dict(spec)
        job = job.model_copy(update={"hardware": with_params(job.hardware, truth)})
        ms = simulate(job).iteration_time_s * 1e3 * (rng.normal(1.0, noise) if noise else 1.0)
        lines.append(f"{write_job(folder, name, spec)},{ms:.6f},{name[:4]}")
    return write_runs(folder, "\n".join(lines) + "\n")


# host-bound (small, micro-batch 1) to GPU-bound (wider, micro-batch 4), with and without recompute
SWEEP: dict[str, dict[str, Any]] = {
    f"h{h}_mb{mb}_{rc}": h100_job(model={"hidden_size": h, "num_attention_heads": h // 64,
                                         "seq_length": 2048},
                                  training={"micro_batch_size": mb, "global_batch_size": 2 * mb,
                                            "recompute": rc})
    for h in (512, 4096) for mb in (1, 8) for rc in ("none", "full")
}
