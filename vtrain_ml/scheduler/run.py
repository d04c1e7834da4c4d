"""The pipeline: trace -> curves from an oracle -> workloads -> SimPy cluster simulation -> result.

`Scheduler` holds what several runs on one trace share (the cluster, the loaded models, the
curves per oracle, the resolved deadlines), so the side-by-side comparison of oracles or
policies evaluates each shape once per oracle.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.job.catalog import resolve_hardware
from vtrain_ml.scheduler.cache import CurveCache
from vtrain_ml.scheduler.curve import Levels, ScalingCurve
from vtrain_ml.scheduler.engine import ClusterSimulation, new_runs
from vtrain_ml.scheduler.layouts import Cluster, LayoutSpace
from vtrain_ml.scheduler.oracle import ExactOracle, LinearOracle, Oracle
from vtrain_ml.scheduler.policies import make_policy
from vtrain_ml.scheduler.result import ScheduleResult, outcome_of
from vtrain_ml.scheduler.trace import Trace
from vtrain_ml.scheduler.workload import DraftJob, Workload, check_fits, draft, fixed_request, resolve

ORACLES = ("simulator", "surrogate", "linear")
Progress = Callable[[str, int], Callable[[int], None]]  # (description, total) -> advance(n)


def make_cluster(gpus: int, gpu: str) -> Cluster:
    if gpus < 1:
        raise ConfigError(f"--gpus={gpus}: a cluster needs at least one GPU")
    hardware = resolve_hardware(gpu)
    return Cluster(hardware, gpus, hardware.gpus_per_node)


def make_oracle(name: str, cluster: Cluster, cache: CurveCache | None = None, n_jobs: int = 1,
                surrogate: str | Path | None = None, space: LayoutSpace | None = None) -> Oracle:
    if name == "simulator":
        return ExactOracle(cluster, space, cache, n_jobs)
    if name == "linear":
        return LinearOracle(cluster, space, cache, n_jobs)
    if name == "surrogate":
        if surrogate is None:
            raise ConfigError("--oracle surrogate needs --surrogate FOLDER (a model trained with "
                              "python -m vtrain_ml.surrogate generate ... && ... train --out FOLDER)")
        from vtrain_ml.scheduler.surrogate_oracle import SurrogateOracle

        return SurrogateOracle.load(surrogate, cluster, space=space, cache=cache)
    raise ConfigError(f"--oracle {name!r} is not one of {', '.join(ORACLES)}")


class Scheduler:
    """One trace on one cluster; `run(policy, oracle)` any number of times."""

    def __init__(self, trace: Trace, cluster: Cluster, reference: Oracle,
                 restart_s: float = 300.0, progress: Progress | None = None, slot_s: float = 0.0) -> None:
        if restart_s < 0:
            raise ConfigError(f"--restart-cost={restart_s}: must be >= 0 seconds")
        self.trace = trace
        self.cluster = cluster
        self.restart_s = restart_s
        self.slot_s = slot_s
        self.progress = progress
        self.drafts: list[DraftJob] = draft(trace)
        self._curves: dict[str, dict[str, ScalingCurve]] = {}
        self._wall: dict[str, float] = {}
        ref = self.curves(reference)
        check_fits(trace, self.drafts, ref, cluster.num_gpus, cluster.hardware.name)
        self.workloads: list[Workload] = resolve(trace, self.drafts, ref)

    def curves(self, oracle: Oracle) -> dict[str, ScalingCurve]:
        if oracle.name not in self._curves:
            start = time.perf_counter()
            shapes = [d.shape for d in self.drafts]
            advance = self.progress(f"{oracle.name} oracle", len({s.key for s in shapes})) if self.progress \
                else None
            self._curves[oracle.name] = oracle.curves(shapes, advance)
            self._wall[oracle.name] = time.perf_counter() - start
        return self._curves[oracle.name]

    def oracle_info(self, oracle: Oracle) -> dict[str, Any]:
        curves = self._curves[oracle.name].values()
        sims = sum(int(c.info.get("exact_simulations", 0)) for c in curves)
        cached = sum(bool(c.info.get("cached")) for c in curves)
        return {"name": oracle.name, "shapes": len(curves), "shapes_from_cache": cached,
                "exact_simulations": sims, "wall_s": self._wall[oracle.name]}

    def run(self, policy: str, oracle: Oracle) -> ScheduleResult:
        curves = self.curves(oracle)
        per_job = [curves[w.shape.key].up_to(self.cluster.num_gpus) for w in self.workloads]
        return simulate_schedule(self.workloads, per_job, policy, self.cluster, self.restart_s, oracle.name,
                                 self.oracle_info(oracle), self.progress, self.slot_s)


def simulate_schedule(workloads: Sequence[Workload], curves: Sequence[ScalingCurve], policy: str,
                      cluster: Cluster, restart_s: float, oracle: str = "",
                      oracle_info: Mapping[str, Any] | None = None,
                      progress: Progress | None = None, slot_s: float = 0.0) -> ScheduleResult:
    """Run `policy` over the workloads, each with its curve (the policy decides on the curves'
    predicted times; jobs progress at their exact times)."""
    requests = [fixed_request(w, Levels.of(c)) for w, c in zip(workloads, curves, strict=True)]
    runs = new_runs(workloads, curves, requests)
    advance = progress(f"{policy} / {oracle}", len(runs)) if progress else None
    sim = ClusterSimulation(runs, make_policy(policy, restart_s, slot_s), cluster.num_gpus, restart_s,
                            (lambda: advance(1)) if advance else None)
    sim.run()
    jobs = tuple(outcome_of(r) for r in sorted(sim.runs, key=lambda r: r.id))
    return ScheduleResult(str(policy), oracle, cluster.num_gpus, cluster.hardware.name, restart_s, jobs,
                          sim.decisions, dict(oracle_info or {}))
