import pytest

from profiler.selection import SelectionRequest, probe_job, resolve_model, select_ops
from simulator.errors import ConfigError
from simulator.graph.blocks import build_graph
from simulator.job.enums import Precision
from tests.profiler_tests.conftest import TINY_GPT, TINY_LLAMA


def _request(**kw):
    base = dict(models=(str(TINY_LLAMA),), tps=(1, 2), micro_batches=(1, 2), seqs=(),
                precision=Precision.BF16, max_adam_params=4**9)
    return SelectionRequest(**{**base, **kw})


def test_each_unique_op_key_is_selected_once_and_covers_every_graph():
    sel = select_ops(_request())
    keys = [op.profile_key for op in sel.unique]
    assert len(keys) == len(set(keys))
    model = resolve_model(str(TINY_LLAMA))
    for tp in (1, 2):
        graph = build_graph(probe_job(model, tp, 2, Precision.BF16, True, tp > 1))
        for block in (graph.layer, graph.embedding, graph.head):
            assert {op.profile_key for op in (*block.forward, *block.backward)} <= set(keys)


def test_selection_reports_the_profiling_overhead_reduction():
    sel = select_ops(_request())
    assert sel.graphs == 2 * 2 * 2 * 2 - 2 * 2  # (tp, mb, attention, sp) minus sp at tp=1
    assert sel.total_ops > len(sel.unique)
    assert sel.reduction == pytest.approx(sel.total_ops / len(sel.unique))


def test_more_models_and_shapes_add_unique_ops():
    one = select_ops(_request(micro_batches=(1,)))
    two = select_ops(_request(models=(str(TINY_LLAMA), str(TINY_GPT))))
    assert len(two.unique) > len(one.unique)


def test_seq_override_changes_the_shapes():
    default = select_ops(_request(tps=(1,), micro_batches=(1,)))
    longer = select_ops(_request(tps=(1,), micro_batches=(1,), seqs=(128,)))
    assert {op.profile_key for op in default.unique} != {op.profile_key for op in longer.unique}


def test_tp_that_does_not_divide_heads_is_skipped_with_a_reason():
    sel = select_ops(_request(tps=(1, 3)))
    assert any("tp=3" in s and "num_attention_heads" in s for s in sel.skipped)


def test_no_valid_combination_is_a_config_error():
    with pytest.raises(ConfigError, match="no valid"):
        select_ops(_request(tps=(3,)))


def test_unknown_model_is_a_config_error_naming_presets():
    with pytest.raises(ConfigError, match="unknown model preset 'gpt-9'"):
        select_ops(_request(models=("gpt-9",)))


def test_presets_resolve_by_name():
    assert resolve_model("llama-3-8b").hidden_size == 4096
