"""Phase cutting from the trace's structure: every kernel lands in the phase of the op that
launched it, or in "unattributed"; layers are found from their repetition, backward nodes from
their sequence numbers, recompute from forward ops re-run inside backward nodes."""

from __future__ import annotations

import pytest

from profiler.trace.events import read_trace
from profiler.trace.links import link
from profiler.trace.phases import PhaseCutError, cut, find_layers
from profiler.trace.summary import summarize
from simulator.costs.profile_format import TracePhase
from tests.profiler_tests.trace_builder import Builder, write


def _label(c, g: int) -> str:
    inst = c.gpu_instance[g]
    if inst < 0:
        return "unattributed"
    i = c.instances[inst]
    return f"{i.kind.value}/{i.micro_batch}/{i.layer}"


def _cut(tmp_path, builder: Builder, layers: int = 3, steps: bool = False):
    raw = read_trace(write(builder.build(steps), tmp_path / "syn.json.gz"))
    links = link(raw)
    return raw, links, cut(raw, links, layers)


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("steps", [False, True])
def test_every_kernel_lands_in_its_phase_or_unattributed(tmp_path, recompute, steps):
    builder = Builder(layers=3, micro_batches=2, recompute=recompute)
    raw, _, c = _cut(tmp_path, builder, steps=steps)
    got = {ev.name: _label(c, g) for g, ev in enumerate(raw.gpu)}
    assert got == builder.expected
    assert len(got) == len(raw.gpu)  # each kernel exactly once
    assert [(it.micro_batches, it.layer_period) for it in c.iterations] == [(2, 5)]


def test_the_head_starting_with_the_layers_first_op_stays_in_the_head(tmp_path):
    """Pre-norm models run a norm first in every layer and again first in the head: the
    repetition extends one op into the head, and the layers start where it starts."""
    builder = Builder(layers=4, micro_batches=1)
    raw, _, c = _cut(tmp_path, builder, layers=4)
    norms = [_label(c, g) for g, ev in enumerate(raw.gpu) if ev.name in builder.expected]
    assert norms.count("head_forward/0/-1") == 3  # final norm, logits, loss


def test_summary_counts_match_the_trace(tmp_path):
    builder = Builder(layers=3, micro_batches=2, recompute=True, kernel_us=20.0)
    raw, links, c = _cut(tmp_path, builder)
    s = summarize(raw, links, c, frozenset({(16, 16)}), 3)
    layer = s.phases[TracePhase.LAYER_FORWARD]
    assert layer.instances == 6  # 3 layers x 2 micro-batches
    assert layer.per_instance(layer.kernels) == 5  # one kernel per forward op
    assert layer.per_instance(layer.kernel_s) == pytest.approx(5 * 20e-6)
    assert s.phases[TracePhase.LAYER_RECOMPUTE].instances == 6
    assert s.unattributed_kernels == 1 and s.unattributed_kernel_s == pytest.approx(7e-6)
    total = sum(st.kernels for st in s.phases.values())
    assert total == len(raw.gpu)
    # AccumulateGrad reads a (16, 16) tensor: a parameter-shaped input scales with the params
    bwd = s.phases[TracePhase.LAYER_BACKWARD].by_class
    assert any(scale.value == "params" for _, scale in bwd)


def test_host_windows_tile_the_iteration(tmp_path):
    builder = Builder(layers=2, micro_batches=2)
    raw, links, c = _cut(tmp_path, builder, layers=2)
    s = summarize(raw, links, c, frozenset(), 2)
    host = sum(st.host_s for st in s.phases.values())
    first = min(op.ts for op in raw.ops)
    last = max(op.end for op in raw.ops)
    assert host == pytest.approx((last - first) * 1e-6)


def test_a_wrong_layer_count_is_one_clear_error(tmp_path):
    with pytest.raises(PhaseCutError, match="num_layers"):
        _cut(tmp_path, Builder(layers=3), layers=5)


@pytest.mark.parametrize("tokens, layers, expected", [
    (list("xABCABCABCy"), 3, (1, 3)),
    (list("xABCABCABCAy"), 3, (1, 3)),  # the leftmost alignment of a run one op too long
    (list("xAAAAy"), 2, (1, 2)),  # a layer of two identical halves: the longer period wins
    (list("xABCABy"), 2, None),
])
def test_find_layers(tokens, layers, expected):
    assert find_layers(tokens, layers) == expected
