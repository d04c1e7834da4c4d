"""Throughput oracles: for a job shape and each GPU count, the plan a job would run with and its time.

- `ExactOracle` (``simulator``): the best iteration time over every layout that fits, from the
  exact simulator -- what vTrain's cluster-scheduling case study feeds the scheduler.
- `SurrogateOracle` (``surrogate``, `vtrain_ml.scheduler.surrogate_oracle`): the surrogate ranks
  the layouts, the exact simulator verifies the best few (as the layout search does).
- `LinearOracle` (``linear``): today's practice -- one fixed heuristic layout, one measured point
  (one node), throughput scaled linearly with the GPU count (the assumption ElasticFlow's and
  Gandiva's simulators make when a job has no profile at a count).

Curves are cached per (oracle, shape, GPU count) in memory and, with a `CurveCache` folder, on
disk; shapes are evaluated in worker processes through joblib when `n_jobs` > 1.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from simulator.simulate import simulate
from vtrain_ml.scheduler.cache import CurveCache, curve_key
from vtrain_ml.scheduler.curve import LevelPlan, ScalingCurve
from vtrain_ml.scheduler.layouts import Cluster, Layout, LayoutBuilder, LayoutSpace, Shape

log = logging.getLogger(__name__)

Levels = dict[int, LevelPlan | None]


def simulate_layout(builder: LayoutBuilder, layout: Layout) -> tuple[float, float, bool]:
    """(iteration time s, peak memory bytes, fits) of `layout` from the exact simulator."""
    result = simulate(builder.job(layout))
    return result.iteration_time_s, result.peak_memory_bytes, result.fits_in_memory


class Oracle(ABC):
    """Curves for shapes on one cluster; subclasses say how one shape's levels are found."""

    name: str = ""

    def __init__(self, cluster: Cluster, space: LayoutSpace | None = None,
                 cache: CurveCache | None = None, n_jobs: int = 1) -> None:
        self.cluster = cluster
        self.space = space or LayoutSpace()
        self.cache = cache or CurveCache(None)
        self.n_jobs = n_jobs
        self._memory: dict[str, ScalingCurve] = {}

    def settings(self) -> dict[str, Any]:
        """What besides the shape and cluster the curves depend on (part of the cache key)."""
        return {}

    @abstractmethod
    def evaluate(self, builder: LayoutBuilder, counts: Sequence[int]) -> tuple[Levels, dict[str, Any]]:
        """Levels at `counts` (None where nothing fits) and counters (e.g. exact simulations)."""

    def _key(self, shape: Shape) -> str:
        return curve_key(self.name, self.settings(), shape, self.cluster, self.space)

    def _curve(self, shape: Shape, known: Levels, info: dict[str, Any]) -> ScalingCurve:
        levels = tuple(lv for n in self.cluster.counts() if (lv := known.get(n)) is not None)
        return ScalingCurve(shape.label, levels, info)

    def curves(self, shapes: Iterable[Shape],
               progress: Callable[[int], None] | None = None) -> dict[str, ScalingCurve]:
        """Curve of each shape (keyed by `Shape.key`), evaluating only what no cache holds."""
        unique = {s.key: s for s in shapes}
        todo: list[tuple[Shape, Levels, list[int]]] = []
        for key, shape in unique.items():
            if key in self._memory:
                continue
            known = self.cache.load(self._key(shape))
            missing = [n for n in self.cluster.counts() if n not in known]
            if missing:
                todo.append((shape, known, missing))
            else:
                self._memory[key] = self._curve(shape, known, {"cached": True})
        done = len(unique) - len(todo)
        if progress and done:
            progress(done)
        for (shape, known, _), (levels, info) in zip(todo, self._evaluate_all(todo), strict=True):
            known.update(levels)
            self.cache.save(self._key(shape), shape.label, known)
            self._memory[shape.key] = self._curve(shape, known, info)
            if progress:
                progress(1)
        return {key: self._memory[key] for key in unique}

    def _evaluate_all(self, todo: list[tuple[Shape, Levels, list[int]]]) -> Iterable[tuple[Levels, dict]]:
        if self.n_jobs <= 1 or len(todo) < 2:
            return (self.evaluate(LayoutBuilder(s, self.cluster, self.space), m) for s, _, m in todo)
        from joblib import Parallel, delayed

        parallel = Parallel(n_jobs=self.n_jobs, return_as="generator")
        return parallel(delayed(_evaluate)(self, s, m) for s, _, m in todo)

    def curve(self, shape: Shape) -> ScalingCurve:
        return self.curves([shape])[shape.key]


def _evaluate(oracle: Oracle, shape: Shape, counts: list[int]) -> tuple[Levels, dict[str, Any]]:
    return oracle.evaluate(LayoutBuilder(shape, oracle.cluster, oracle.space), counts)


class ExactOracle(Oracle):
    """Best exact plan per GPU count over every statically feasible layout.

    Per (tp, pp, dp, micro-batch) the recompute options are tried fastest first (none, selective,
    full: each recomputes more, so a lighter one that fits is never slower) and the first that
    fits is kept. Out-of-memory results are reused across counts: the simulator's peak memory
    never grows with dp (optimizer states shard over dp, fewer micro-batches are in flight) and
    never shrinks with the micro-batch, so a (tp, pp, recompute) that overflowed at (dp, mb)
    overflows at every smaller dp and larger mb; counts are visited largest first to use it.
    """

    name = "simulator"

    def evaluate(self, builder: LayoutBuilder, counts: Sequence[int]) -> tuple[Levels, dict[str, Any]]:
        out: Levels = {}
        sims = skipped = 0
        overflow: dict[tuple[int, int, str], list[tuple[int, int]]] = {}
        for count in sorted(counts, reverse=True):
            best: LevelPlan | None = None
            settled: set[tuple[int, int, int, int]] = set()
            for layout in builder.candidates(count):
                group = (layout.tp, layout.pp, layout.dp, layout.micro_batch_size)
                if group in settled:
                    continue
                known = overflow.setdefault((layout.tp, layout.pp, layout.recompute.value), [])
                if any(dp >= layout.dp and mb <= layout.micro_batch_size for dp, mb in known):
                    skipped += 1
                    continue
                seconds, peak, fits = simulate_layout(builder, layout)
                sims += 1
                if not fits:
                    known.append((layout.dp, layout.micro_batch_size))
                    continue
                settled.add(group)
                if best is None or seconds < best.iteration_time_s:
                    best = LevelPlan(count, layout, seconds, seconds, peak)
            out[count] = best
        return out, {"exact_simulations": sims, "skipped_known_overflow": skipped}


class LinearOracle(Oracle):
    """One heuristic layout, measured once, scaled linearly.

    The heuristic is the rule of thumb "the least model parallelism that fits, then data
    parallelism": the smallest tp * pp (tensor parallelism inside a node first, then pipeline
    stages) at which the model fits with micro-batch 1 and no recompute (else full recompute).
    Its time is measured (simulated) at one reference count, the smallest valid count of at
    least one node, and predicted at n GPUs as t_ref * n_ref / n. The job really runs the same
    layout with dp = n / (tp * pp), at the exact simulator's time for it.
    """

    name = "linear"

    def settings(self) -> dict[str, Any]:
        return {"num_gpus": self.cluster.num_gpus}  # the reference point depends on the counts

    def heuristic(self, builder: LayoutBuilder) -> tuple[Layout | None, int]:
        sims = 0
        capacity = self.cluster.num_gpus
        valid = set(self.cluster.counts())
        for tp, pp in sorted(builder.model_parallel, key=lambda m: (m[0] * m[1], m[1])):
            if tp * pp > capacity or tp * pp not in valid or not builder.grid(tp * pp):
                continue
            for recompute in (builder.space.recompute[0], builder.space.recompute[-1]):
                layout = Layout(tp, pp, 1, 1, recompute)
                sims += 1
                if simulate_layout(builder, layout)[2]:
                    return layout, sims
        return None, sims

    def evaluate(self, builder: LayoutBuilder, counts: Sequence[int]) -> tuple[Levels, dict[str, Any]]:
        base, sims = self.heuristic(builder)
        out: Levels = dict.fromkeys(counts)
        if base is None:
            return out, {"exact_simulations": sims}
        mp = base.tp * base.pp
        gbs = builder.shape.global_batch_size
        valid = [n for n in counts if n % mp == 0 and gbs % (n // mp) == 0]
        big = [n for n in valid if n >= self.cluster.gpus_per_node]
        ref = big[0] if big else valid[-1]
        measured: dict[int, tuple[float, float, bool]] = {}
        for n in valid:
            measured[n] = simulate_layout(builder, Layout(base.tp, base.pp, n // mp, 1, base.recompute))
            sims += 1
        t_ref = measured[ref][0]
        for n in valid:
            seconds, peak, fits = measured[n]
            if fits:
                layout = Layout(base.tp, base.pp, n // mp, 1, base.recompute)
                out[n] = LevelPlan(n, layout, seconds, t_ref * ref / n, peak)
        return out, {"exact_simulations": sims, "heuristic": base.label, "reference_gpus": ref}
