"""What differs between stacks in tensor-parallel overlap and in host dispatch cost.

Expected values come from the sources and measurements written here, not from the code:
- microsoft/Megatron-DeepSpeed: before its July 2023 rebase `ColumnParallelLinear.forward` is
  `copy_to_tensor_model_parallel_region` + `F.linear`, whose backward all-reduces the input
  gradient synchronously; after it, `validate_args` sets `async_tensor_model_parallel_allreduce =
  False` under `--deepspeed` (commit f90b8877). Megatron-LM overlaps it with the wgrad GEMM.
- Host time per launch (bench/measure_host_overhead.py on H100 hosts): a Megatron-structured
  layer 52.5 us for every launch; eager PyTorch 52.9 us per forward launch, 27.3 us per backward
  launch, 91 us per recompute launch of torch.utils.checkpoint (x1.0 / x0.52 / x1.72).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from simulator.costs.analytic import CostSource, OpCost
from simulator.costs.blocks import cost_block
from simulator.graph.blocks import build_graph
from simulator.graph.ops import Op
from tests.conftest import make_job

S, B, H = 1024, 2, 1024


def _job(framework: str, tp: int = 2, sp: bool = False, recompute: str = "none",
         host_s: float | None = None):
    job = make_job(
        model={"seq_length": S, "hidden_size": H, "num_attention_heads": 16},
        training={"micro_batch_size": B, "global_batch_size": 8 * B, "precision": "bf16",
                  "framework": framework, "recompute": recompute},
        parallel={"tp": tp, "pp": 1, "dp": 8 // tp, "sequence_parallel": sp},
        cluster={"num_gpus": 8})
    if host_s is None:
        return job
    eff = job.hardware.efficiency.model_copy(update={"host_overhead_s": host_s,
                                                     "collective_overhead_s": 0.0})
    return job.model_copy(update={"hardware": job.hardware.model_copy(update={"efficiency": eff})})


def _blocking_backward(block) -> Counter:
    return Counter(op.kind.value for op in block.backward_comm if not op.overlap)


@pytest.mark.parametrize("tp", [2, 8])
def test_megatron_deepspeed_blocks_on_the_column_parallel_input_gradient_all_reduce(tp):
    """Without SP: QKV and MLP-up input gradients, 2 blocking all-reduces per layer, and the
    logits' input gradient in the head; Megatron-LM blocks on none of them."""
    ds, lm = build_graph(_job("megatron-deepspeed", tp)), build_graph(_job("megatron-lm", tp))
    assert _blocking_backward(ds.layer) == Counter({"all_reduce": 2})
    assert _blocking_backward(ds.head) == Counter({"all_reduce": 1})
    assert _blocking_backward(lm.layer) == Counter()
    assert _blocking_backward(lm.head) == Counter()
    # the same collectives otherwise: kind and size unchanged
    assert sorted((o.kind, o.bytes) for o in ds.layer.backward_comm) == \
        sorted((o.kind, o.bytes) for o in lm.layer.backward_comm)


def test_with_sequence_parallelism_both_stacks_overlap_as_megatron_core_does():
    """Megatron-DeepSpeed's rebased layers overlap the SP reduce-scatter and all-gather too:
    2 blocking backward collectives per layer (the row-parallel output-gradient all-gathers)."""
    for fw in ("megatron-deepspeed", "megatron-lm"):
        assert _blocking_backward(build_graph(_job(fw, 2, sp=True)).layer) == Counter({"all_gather": 2})


@dataclass(frozen=True)
class Free:
    """Kernels cost nothing on the GPU: what remains is the host's dispatch time."""

    def cost(self, op: Op) -> OpCost:
        return OpCost(0.0, CostSource.MEASURED)


def _host(block, host_s: float) -> tuple[float, float]:
    """(forward, recompute + backward) host seconds of a block whose GPU work is free."""
    from simulator.job.specs import Efficiency

    eff = Efficiency(host_overhead_s=host_s, collective_overhead_s=0.0)
    c = cost_block(block, Free(), lambda op: 0.0, eff)
    return c.forward_host_excess, c.backward_host_excess


def _launches(ops) -> int:
    return sum(op.kernels for op in ops)


@pytest.mark.parametrize("framework", ["megatron-lm", "megatron-deepspeed"])
def test_a_megatron_launch_costs_the_host_overhead_in_every_direction(framework):
    layer = build_graph(_job(framework, 1, recompute="full")).layer
    fwd, bwd = _host(layer, 52.5e-6)
    assert fwd == pytest.approx(52.5e-6 * _launches(layer.forward))
    assert bwd == pytest.approx(52.5e-6 * (_launches(layer.backward) + _launches(layer.recompute)))


def test_eager_backward_launches_cost_half_and_recompute_launches_carry_checkpointing():
    """Measured per launch: forward 52.9 us, backward 27.3 us, recompute 91 us (x1.0, 0.52,
    1.72 of the hardware's host_overhead_s)."""
    layer = build_graph(_job("pytorch", 1, recompute="full")).layer
    fwd, bwd = _host(layer, 52.5e-6)
    assert fwd == pytest.approx(52.5e-6 * _launches(layer.forward))
    assert bwd == pytest.approx(52.5e-6 * (0.52 * _launches(layer.backward)
                                           + 1.72 * _launches(layer.recompute)))


def test_host_bound_eager_job_takes_longer_with_recompute_than_its_extra_kernels_alone():
    """Full recompute adds one forward's launches; on the host each costs 1.72 forward launches,
    so a host-bound layer gets (F + 0.52 B + 1.72 F) / (F + 0.52 B) slower, not (2F + B) / (F + B)."""
    from simulator import simulate

    none = simulate(_job("pytorch", 1, host_s=1e-3))
    full = simulate(_job("pytorch", 1, recompute="full", host_s=1e-3))
    layer = build_graph(_job("pytorch", 1, recompute="full")).layer
    f, b = _launches(layer.forward), _launches(layer.backward)
    weighted, plain = (f + 0.52 * b + 1.72 * f) / (f + 0.52 * b), (2 * f + b) / (f + b)
    ratio = full.iteration_time_s / none.iteration_time_s
    assert ratio > plain
    assert ratio == pytest.approx(weighted, rel=0.05)  # embedding and head dilute it a little
