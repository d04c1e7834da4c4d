import torch

from profiler.kernels import BUILDERS, Inputs, make_kernel
from profiler.selection import SelectionRequest, select_ops
from profiler.timing import Stats, TimingConfig, time_cpu
from simulator.enums import Precision
from simulator.ops import OpKind
from tests.profiler_tests.conftest import TINY_GPT, TINY_LLAMA


def test_every_op_kind_has_a_builder():
    assert set(BUILDERS) == set(OpKind)


def test_every_selected_op_runs_on_cpu_with_random_inputs():
    req = SelectionRequest(models=(str(TINY_LLAMA), str(TINY_GPT)), tps=(1,), micro_batches=(1,),
                           seqs=(), precision=Precision.BF16, max_adam_params=4**9)
    sel = select_ops(req)
    assert {op.kind for op in sel.unique} == set(OpKind)
    for op in sel.unique:
        kernel = make_kernel(op, sel.row_hints.get(op.profile_key, 0),
                             Inputs(torch.device("cpu"), torch.bfloat16, 0))
        kernel()


def test_inputs_are_random_and_seeded():
    a = Inputs(torch.device("cpu"), torch.float32, 7).randn(64)
    b = Inputs(torch.device("cpu"), torch.float32, 7).randn(64)
    assert torch.equal(a, b)
    assert a.abs().sum() > 0 and a.std() > 0.5


def test_timing_stats_are_ordered_and_count_repeats():
    stats = time_cpu(lambda: sum(range(1000)), TimingConfig(warmup=1, min_repeats=7, max_repeats=7))
    assert stats.repeats == 7
    assert 0 < stats.p10_s <= stats.median_s <= stats.p90_s


def test_stats_percentiles():
    s = Stats.of([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s.median_s, s.repeats) == (3.0, 5)
