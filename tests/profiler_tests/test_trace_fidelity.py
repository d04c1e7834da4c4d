"""Our traced stacks run what the measured H100 runs ran: the same ATen operators on the same
shapes in one training iteration (micro-batches of forward and backward under autocast, the AdamW
step, zero_grad), compared on CPU at tiny sizes against the models of the script that measured
them (tests/data/traces/what_ran_models.py, copied from ../shared/data/traces/h100/what_ran.py).

An odd vocabulary (1001) is the case that once differed: our shards padded it to 1024 as
Megatron does, which on an H100 turned the unaligned (slow) logits GEMM of the measured runs into
an aligned fast one, and every traced GPT-2 and mgpt_ job came out 10-17% fast.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from profiler.stacks.runner import TraceRequest, plan, prepare  # noqa: E402
from simulator.job.enums import Framework, Recompute  # noqa: E402
from simulator.job.loaders import load_job  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "traces"
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


def _what_ran() -> Any:
    spec = importlib.util.spec_from_file_location("what_ran_models", DATA / "what_ran_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GPT_MODEL = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 1001,
             "seq_length": 32, "norm": "layernorm", "use_bias": True, "tied_embeddings": True,
             "position_embedding": "learned", "hidden_dropout": 0.1, "attention_dropout": 0.1}
LLAMA_MODEL = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
               "num_query_groups": 2, "ffn_hidden_size": 96, "gated_mlp": True,
               "vocab_size": 1001, "seq_length": 32, "norm": "rmsnorm", "use_bias": False,
               "tied_embeddings": False, "position_embedding": "rope", "hidden_dropout": 0.0,
               "attention_dropout": 0.0}


def _job(tmp_path: Path, model: dict[str, Any], flash: bool, recompute: str) -> Any:
    import yaml

    spec = {"model": {"name": "tiny", **model},
            "training": {"global_batch_size": 2, "micro_batch_size": 1, "precision": "bf16",
                         "flash_attention": flash, "recompute": recompute,
                         "framework": "pytorch"},
            "parallel": {"tp": 1, "pp": 1, "dp": 1},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 1}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_job(path)


def _ops(step: Any) -> Counter[tuple[str, str]]:
    """ATen operators and their input shapes of one call of `step` (after a warm-up call)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    return Counter((e.name, str(e.input_shapes)) for e in prof.events()
                   if e.name.startswith("aten::"))


def _ours(job: Any, stack: str) -> Counter[tuple[str, str]]:
    req = TraceRequest((("tiny", job),), stack, "cpu",
                       micro_batch_sizes=(job.training.micro_batch_size,),
                       recomputes=(job.training.recompute,), layers=job.model.num_layers,
                       micro_batches=job.num_microbatches, warmup=1, threads=1)
    return _ops(prepare(plan(req)[0], req).step)


def _theirs(job: Any, kind: str) -> Counter[tuple[str, str]]:
    wr = _what_ran()
    m, t = job.model, job.training
    spec = {"hidden_size": m.hidden_size, "num_layers": m.num_layers, "vocab_size": m.vocab_size,
            "num_attention_heads": m.num_attention_heads, "seq_length": m.seq_length,
            "ffn_hidden_size": m.ffn, "num_query_groups": m.query_groups}
    torch.manual_seed(0)
    model, hf = wr.build(kind, spec, t.flash_attention, t.recompute is Recompute.FULL)
    model.train()
    # what_ran used fused AdamW on its GPU; our runner does too on CUDA (foreach on a CPU)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    x = torch.randint(0, m.vocab_size, (t.micro_batch_size, m.seq_length))
    return _ops(wr.make_step(model, hf, opt, x, job.num_microbatches, "cpu"))


def _assert_same(ours: Counter[tuple[str, str]], theirs: Counter[tuple[str, str]]) -> None:
    only_ours, only_theirs = ours - theirs, theirs - ours
    assert not only_ours and not only_theirs, (
        f"only in our stack: {sorted(only_ours.items())[:8]}; "
        f"only in the measured runs' model: {sorted(only_theirs.items())[:8]}")
    assert sum(ours.values()) > 500  # a whole iteration was compared, not an empty list


@pytest.fixture
def one_thread():
    """One torch thread for the test, restored after it: the suite runs in a shuffled order and
    other tests' profiles record the thread count they were measured with."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("flash", "recompute"), [(True, "none"), (False, "full")])
def test_reference_stack_runs_the_operators_of_the_measured_mgpt_runs(tmp_path, flash, recompute, one_thread):
    job = _job(tmp_path, GPT_MODEL, flash, recompute)
    _assert_same(_ours(job, "reference"), _theirs(job, "mgpt"))


@pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed")
@pytest.mark.parametrize(("model", "kind"), [(GPT_MODEL, "gpt2"), (LLAMA_MODEL, "llama")])
def test_huggingface_stack_runs_the_operators_of_the_measured_runs(tmp_path, model, kind, one_thread):
    job = _job(tmp_path, model, True, "none")
    _assert_same(_ours(job, "huggingface"), _theirs(job, kind))


def test_plain_pytorch_shards_keep_the_vocabulary_unpadded(tmp_path):
    job = _job(tmp_path, GPT_MODEL, True, "none")
    megatron = job.model_copy(update={"training": job.training.model_copy(
        update={"framework": Framework.MEGATRON_LM})})
    shard = lambda j, tp: plan(TraceRequest((("t", j),), "reference", "cpu", tps=(tp,)))[0].shard  # noqa: E731
    assert (shard(job, 1).vocab, shard(megatron, 1).vocab) == (1001, 1024)
    assert (shard(job, 2).vocab, shard(megatron, 2).vocab) == (500, 512)
