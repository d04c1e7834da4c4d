"""The simulator's cost structure: identical layers are costed once, any kernel model plugs in."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from simulator import simulate
from simulator.costs.analytic import CostSource, KernelModel, OpCost
from simulator.graph.ops import Op
from simulator.simulate import default_kernels
from tests.conftest import make_job
from tests.simulator_tests.conftest import free_network


@dataclass
class CountingKernels:
    """Delegates to a kernel model and counts the ops it is asked to cost."""

    inner: KernelModel
    calls: int = 0
    names: set[str] = field(default_factory=set)

    def cost(self, op: Op) -> OpCost:
        self.calls += 1
        self.names.add(op.name)
        return self.inner.cost(op)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_kernel_calls_do_not_grow_with_layers_or_microbatches(recompute):
    counts = []
    for layers, batch in ((4, 8), (64, 8), (64, 64)):
        job = make_job(model={"num_layers": layers},
                       training={"global_batch_size": batch, "recompute": recompute})
        kernels = CountingKernels(default_kernels(job))
        simulate(job, kernels=kernels)
        counts.append(kernels.calls)
    assert counts[0] == counts[1] == counts[2]


def test_graph_has_every_transformer_kernel():
    job = make_job(training={"recompute": "full"})
    kernels = CountingKernels(default_kernels(job))
    simulate(job, kernels=kernels)
    expected = {"input_norm", "qkv", "attn.qk", "attn.softmax", "attn.dropout", "attn.av", "attn.proj",
                "attn.dropout_add", "post_attn_norm", "mlp.up", "mlp.gelu", "mlp.down",
                "mlp.dropout_add", "qkv.dgrad", "qkv.wgrad", "attn.qk.dgrad2", "embedding",
                "logits", "cross_entropy", "adam"}
    assert expected <= kernels.names


def test_a_custom_kernel_model_sets_the_compute_time():
    """Doubling every kernel's time doubles forward, backward, recompute and the optimizer step
    exactly (free communication: the optimizer's gradient-norm all-reduce is not a kernel)."""
    job = make_job(training={"recompute": "selective"})
    base = default_kernels(job)

    @dataclass(frozen=True)
    class Twice:
        def cost(self, op: Op) -> OpCost:
            return OpCost(2 * base.cost(op).seconds, CostSource.MEASURED)

    net = free_network(job)
    plain, slow = simulate(job, network=net), simulate(job, kernels=Twice(), network=net)
    for key in ("forward", "backward", "recompute", "optimizer"):
        assert slow.breakdown[key] == pytest.approx(2 * plain.breakdown[key], rel=1e-12)
    assert slow.profile_coverage["measured"] == pytest.approx(1.0)
    assert plain.profile_coverage["analytic"] == pytest.approx(1.0)
