"""Per-rank step times -> the straggler model's two variations (`Efficiency.gpu_speed_cv`,
`kernel_time_cv`; simulator.timeline.stragglers), by the method of moments.

A rank-times file (CSV) has one row per rank and step: `rank`, `step` and the rank's compute time
in that step, `compute_ms` or `compute_s` (its GPU-busy time, e.g. from a per-rank profiler or
CUDA events around forward + backward, without waiting for other ranks). With x[r, t] rank r's
time at step t, T steps, rank means m[r] and grand mean M:

- transient: the within-rank variance w^2 = mean over ranks of var_t(x[r, t]); a step of
  kernels t_i varies by cv * sqrt(sum t_i^2), so kernel_time_cv = (w / M) * sqrt(K_eff) with
  K_eff = (sum t_i)^2 / sum t_i^2 the step's effective kernel count, which the simulator gives
  for the job that ran (`effective_kernels`); without a job only the persistent term is fitted;
- persistent: the rank means vary by the GPUs' own speeds plus the transient noise averaged
  over T steps: gpu_speed_cv^2 = max(0, var_r(m[r]) - w^2 / T) / M^2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from simulator.errors import ConfigError
from simulator.job.specs import Job


@dataclass(frozen=True)
class JitterFit:
    gpu_speed_cv: float
    kernel_time_cv: float | None  # None: no job to count the kernels of a step
    ranks: int
    steps: int
    step_cv: float  # within-rank variation of one step

    def to_dict(self) -> dict[str, float | int | None]:
        return {"gpu_speed_cv": self.gpu_speed_cv, "kernel_time_cv": self.kernel_time_cv,
                "ranks": self.ranks, "steps": self.steps, "step_cv": self.step_cv}


def read_rank_times(path: str | Path) -> pd.DataFrame:
    """(rank, step, compute_s) rows of a rank-times CSV, checked."""
    try:
        table = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--rank-times {path}: cannot read it as CSV ({exc})") from None
    missing = {"rank", "step"} - set(table.columns)
    if missing or not {"compute_ms", "compute_s"} & set(table.columns):
        raise ConfigError(f"--rank-times {path}: needs columns rank, step and compute_ms (or "
                          f"compute_s); it has {', '.join(map(str, table.columns))}")
    seconds = table["compute_s"] if "compute_s" in table else table["compute_ms"] / 1e3
    out = pd.DataFrame({"rank": table["rank"], "step": table["step"], "compute_s": seconds})
    if out.isna().any().any() or (out["compute_s"] <= 0).any():
        raise ConfigError(f"--rank-times {path}: every row needs a rank, a step and a positive time")
    counts = out.groupby("rank")["step"].nunique()
    if len(counts) < 2 or counts.min() < 2:
        raise ConfigError(f"--rank-times {path}: needs at least 2 ranks with at least 2 steps each "
                          f"(got {len(counts)} ranks, fewest steps {int(counts.min())})")
    return out


def fit_jitter(table: pd.DataFrame, kernels_per_step: float | None = None) -> JitterFit:
    """The two variations from (rank, step, compute_s) rows; `kernels_per_step`: the step's
    effective kernel count (None: keep the kernel term unfitted)."""
    by_rank = table.groupby("rank")["compute_s"]
    grand = float(table["compute_s"].mean())
    within = float(by_rank.var(ddof=1).mean())
    steps = int(table.groupby("rank")["step"].nunique().median())
    between = float(by_rank.mean().var(ddof=1))
    gpu_cv = math.sqrt(max(0.0, between - within / steps)) / grand
    step_cv = math.sqrt(within) / grand
    kernel_cv = step_cv * math.sqrt(kernels_per_step) if kernels_per_step else None
    return JitterFit(gpu_cv, kernel_cv, int(table["rank"].nunique()), steps, step_cv)


def effective_kernels(job: Job) -> float:
    """(sum t_i)^2 / sum t_i^2 over the kernels one rank runs in a step of `job`: its stage's
    layers for every micro-batch, from the simulator's costed layer (independent kernels add)."""
    from simulator import simulate

    result = simulate(job)
    assert result.costs is not None
    layer = result.costs.layer
    compute = layer.forward + layer.backward + layer.recompute
    if compute <= 0 or layer.kernel_square_s2 <= 0:
        raise ConfigError("--rank-times-job: the job's layer has no timed kernels")
    layers = job.model.num_layers / job.parallel.pp
    return compute * compute / layer.kernel_square_s2 * layers * job.num_microbatches
