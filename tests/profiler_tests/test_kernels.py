import torch

from profiler.kernels import BUILDERS, Inputs, make_kernel
from profiler.selection import SelectionRequest, select_ops
from profiler.timing import Stats, TimingConfig, time_cpu
from simulator.graph.ops import OpKind
from simulator.job.enums import Precision
from tests.profiler_tests.conftest import TINY_GPT, TINY_LLAMA


def test_every_op_kind_has_a_builder():
    assert set(BUILDERS) == set(OpKind)


def test_every_selected_op_runs_on_cpu_with_random_inputs():
    req = SelectionRequest(models=(str(TINY_LLAMA), str(TINY_GPT)), tps=(1,), micro_batches=(1,),
                           seqs=(), precision=Precision.BF16, max_adam_params=4**9)
    sel = select_ops(req)
    # a 16-bit job has every op kind but the low-precision recipes' quantize kernels
    assert {op.kind for op in sel.unique} == set(OpKind) - {OpKind.QUANTIZE}
    for op in sel.unique:
        kernel = make_kernel(op, sel.row_hints.get(op.profile_key, 0),
                             Inputs(torch.device("cpu"), torch.bfloat16, 0))
        _check_output(op, kernel())


def _tensors(result) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, tuple | list):
        return [t for r in result for t in _tensors(r)]
    return []


SAME_SIZE = {OpKind.DROPOUT, OpKind.SOFTMAX}  # one output element per input element


def _check_output(op, result) -> None:  # type: ignore[no-untyped-def]
    """The kernel computed what the op says: a GEMM's [batch,] M x N output, a pointwise op's
    element count, and finite values (random inputs never make NaN or inf)."""
    tensors = _tensors(result)
    assert all(torch.isfinite(t.float()).all() for t in tensors), op
    if op.kind is OpKind.OPTIMIZER:
        return  # updates the parameters in place
    assert tensors, op
    if op.kind in (OpKind.GEMM, OpKind.BMM):
        batch, m, n, _ = op.shape
        assert tensors[0].shape == ((batch, m, n) if op.kind is OpKind.BMM or batch > 1 else (m, n)), op
    elif op.kind in SAME_SIZE or (op.kind is OpKind.NORM and not op.variant.endswith("_wgrad")):
        assert tensors[0].numel() == op.shape[0], op


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


def test_megatron_fallback_and_small_kernels_run_forward_and_backward():
    """Ops only some layouts emit: the unfused softmax (2 local heads at micro-batch 1), the
    vocab-shard masks, the embedding transpose."""
    from simulator.graph.dense import build_layer
    from simulator.graph.embedding import build_embedding
    from tests.conftest import make_job

    job = make_job(model={"hidden_size": 256, "seq_length": 256},
                   parallel={"tp": 8, "pp": 1, "dp": 1})
    layer, emb = build_layer(job), build_embedding(job)
    ops = [op for op in (*layer.forward, *layer.backward, *emb.forward, *emb.backward)
           if op.variant in ("unfused_fp32", "small", "copy", "masked_fill")]
    assert {op.variant for op in ops} == {"unfused_fp32", "small", "copy", "masked_fill"}
    for op in ops:
        _check_output(op, make_kernel(op, 256, Inputs(torch.device("cpu"), torch.bfloat16, 0))())


def test_quantize_kernels_of_a_low_precision_recipe_run_on_cpu():
    from simulator.graph.ops import Op, Phase

    for variant in ("mxfp8", "delayed_transpose"):
        op = Op("qkv.quantize_input", OpKind.QUANTIZE, Phase.FORWARD, (4096,), 2, 4096.0, 4.0 * 4096, 0.0,
                variant)
        _check_output(op, make_kernel(op, 64, Inputs(torch.device("cpu"), torch.bfloat16, 0))())
