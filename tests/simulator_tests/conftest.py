"""Fixtures of the simulator tests: golden-file regeneration flag, free communication, no tail."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from simulator.costs.analytic import CostSource, KernelModel, OpCost
from simulator.graph.ops import Op, Phase
from simulator.job.enums import CollectiveKind
from simulator.job.specs import Job
from simulator.network.collectives import NetworkModel
from simulator.network.topology import Placement
from simulator.simulate import default_kernels, default_network


@pytest.fixture
def regen_golden(request: pytest.FixtureRequest) -> bool:
    """True when golden results should be rewritten (--regen-golden or VTRAIN_REGEN_GOLDEN=1).
    The option is declared in tests/conftest.py so that a plain `pytest --regen-golden` sees it."""
    return bool(request.config.getoption("--regen-golden")) or os.environ.get("VTRAIN_REGEN_GOLDEN") == "1"


class FreeNetwork(NetworkModel):
    """Every collective and transfer takes zero seconds."""

    def time(self, kind: CollectiveKind, nbytes: float, where: Placement) -> float:
        return 0.0


def free_network(job: Job) -> FreeNetwork:
    net = default_network(job)
    return FreeNetwork(net.hardware, net.intra_bandwidth_Bps, net.inter_bandwidth_Bps)


@dataclass(frozen=True)
class WithoutOptimizerStep:
    """The job's kernel model, except that the step's kernels (the optimizer and the framework's
    passes over the gradient buffer) are free: no tail after the pipeline."""

    inner: KernelModel

    def cost(self, op: Op) -> OpCost:
        if op.phase is Phase.STEP:
            return OpCost(0.0, CostSource.ANALYTIC)
        return self.inner.cost(op)


def pipeline_only(job: Job) -> dict[str, object]:
    """simulate() keyword arguments that leave only the pipeline phase: free communication and a
    free optimizer step, so the iteration is forward/backward compute plus bubble."""
    return {"kernels": WithoutOptimizerStep(default_kernels(job)), "network": free_network(job)}


def without_framework_overheads(job: Job) -> Job:
    """The job on hardware whose host dispatch, collective-call and micro-batch overheads are
    zero and whose ranks do not vary (no scale loss), so that the pipeline's timing is only the GPU
    work (for schedule-formula tests)."""
    eff = job.hardware.efficiency.model_copy(
        update={"host_overhead_s": 0.0, "collective_overhead_s": 0.0, "microbatch_overhead_s": 0.0,
                "gpu_speed_cv": 0.0, "kernel_time_cv": 0.0})
    return job.model_copy(update={"hardware": job.hardware.model_copy(update={"efficiency": eff})})
