"""For a job that does not fit in GPU memory: the smallest changes that make it fit.

The levers are the ones Megatron-LM users reach for, in the order of how little they change the
run (Korthikanti et al. 2022 for recomputation and sequence parallelism; Rajbhandari et al. 2020,
ZeRO-1, for the distributed optimizer): shard the optimizer states over data parallelism,
recompute activations (selective, then full), split the sequence-parallel regions, halve the
micro-batch, and more tensor or pipeline parallelism (at the same GPU count, dp shrinks; when dp
cannot shrink, the GPU count grows). Each candidate is simulated exactly; the fixes that fit are
ranked by how many flags they change, then by iteration time. Pairs are tried only when no single
change fits.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

from simulator.errors import ConfigError
from simulator.job.enums import Recompute
from simulator.job.specs import GiB, Job
from simulator.report.render import duration
from simulator.report.result import SimulationResult
from simulator.simulate import simulate
from vtrain_ml.jobs import Overrides, apply


@dataclass(frozen=True)
class Fix:
    """A change of the job that fits, with its exact simulation."""

    overrides: Overrides
    job: Job
    result: SimulationResult

    def describe(self, baseline: SimulationResult) -> str:
        r = self.result
        change = r.iteration_time_s / baseline.iteration_time_s - 1
        gpus, before = self.job.cluster.num_gpus, baseline.job["num_gpus"]
        more = f" on {gpus} GPUs instead of {before}" if gpus != before else ""
        return (f"{self.overrides.label()} (peak {r.peak_memory_bytes / GiB:.1f} GiB, iteration "
                f"{duration(r.iteration_time_s)}, {change:+.0%}{more})")


def single_changes(job: Job) -> list[Overrides]:
    """One-flag changes that reduce memory per GPU, cheapest in spirit first."""
    p, t = job.parallel, job.training
    out: list[Overrides] = []
    if job.dp > 1 and not job.shards_optimizer:
        out.append(Overrides(distributed_optimizer=True))
    if t.recompute is Recompute.NONE:
        out.append(Overrides(recompute=Recompute.SELECTIVE.value))
    if t.recompute is not Recompute.FULL:
        out.append(Overrides(recompute=Recompute.FULL.value))
    if p.tp > 1 and not p.sequence_parallel:
        out.append(Overrides(sequence_parallel=True))
    if t.micro_batch_size > 1:
        out.append(Overrides(micro_batch_size=t.micro_batch_size // 2))
    for factor in (2, 4):
        if p.tp * factor <= job.gpus_per_node:  # Megatron keeps tp inside a node (NVLink)
            out.append(_grow(job, "tp", factor))
        out.append(_grow(job, "pp", factor))
    return out


def _grow(job: Job, key: str, factor: int) -> Overrides:
    """tp or pp times `factor` at the same GPU count when dp can shrink by the factor, else on
    `factor` times more GPUs."""
    value = getattr(job.parallel, key) * factor
    if job.dp % factor == 0:
        return replace(Overrides(), **{key: value})
    return replace(Overrides(), **{key: value, "num_gpus": job.cluster.num_gpus * factor})


def _combine(a: Overrides, b: Overrides) -> Overrides | None:
    given_a, given_b = a.given(), b.given()
    if set(given_a) & set(given_b):
        return None
    return replace(a, **given_b)


def fixes(job: Job, result: SimulationResult, limit: int = 3,
          run: Callable[[Job], SimulationResult] = simulate) -> list[Fix]:
    """Up to `limit` changes that make `job` fit, smallest first ([] if it fits or none does)."""
    if result.fits_in_memory:
        return []
    singles = single_changes(job)
    found = _fitting(job, singles, run)
    if not found:
        pairs = [c for a, b in itertools.combinations(singles, 2) if (c := _combine(a, b))]
        found = _fitting(job, pairs, run)
    found.sort(key=lambda f: (len(f.overrides.given()), f.job.cluster.num_gpus, f.result.iteration_time_s))
    return found[:limit]


def _fitting(job: Job, candidates: list[Overrides], run: Callable[[Job], SimulationResult]) -> list[Fix]:
    out = []
    for overrides in candidates:
        try:
            changed = apply(job, overrides)
        except ConfigError:
            continue  # e.g. tp that does not divide the heads, pp that does not divide the layers
        result = run(changed)
        if result.fits_in_memory:
            out.append(Fix(overrides, changed, result))
    return out


def advice(job: Job, result: SimulationResult,
           run: Callable[[Job], SimulationResult] = simulate) -> list[str]:
    """Lines for the top of the report of a job that does not fit ([] when it fits)."""
    if result.fits_in_memory:
        return []
    found = fixes(job, result, run=run)
    if not found:
        return ["no single or paired change of distributed optimizer, recomputation, sequence "
                "parallelism, micro-batch, tp or pp fits: use more GPUs or GPUs with more memory"]
    lines = [f"smallest change that fits: {found[0].describe(result)}"]
    lines += [f"also fits: {f.describe(result)}" for f in found[1:]]
    return lines
