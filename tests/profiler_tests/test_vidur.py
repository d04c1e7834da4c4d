from pathlib import Path

import pandas as pd
import pytest

from profiler.vidur import read_vidur_mlp
from simulator import job_from_dict
from simulator.graph.blocks import build_graph
from simulator.graph.ops import OpKind


def _row(tmp_path: Path, tokens: int, tp: int) -> Path:
    cols = {"n_head": 32, "n_kv_head": 8, "n_embd": 4096, "n_expanded_embd": 14336, "vocab_size": 128256,
            "use_gated_mlp": True, "num_tokens": tokens, "num_tensor_parallel_workers": tp,
            "time_stats.attn_pre_proj.median": 0.5, "time_stats.mlp_up_proj.median": 1.0,
            "time_stats.input_layernorm.median": 0.01}
    path = tmp_path / "mlp.csv"
    pd.DataFrame([cols]).to_csv(path, index=False)
    return path


def test_vidur_rows_become_the_simulators_own_op_keys(tmp_path):
    """A Llama-3-8B layer at tp=2, micro-batch 1, seq 2048 has exactly Vidur's shapes."""
    ops = {op.name: (op, s) for op, s in read_vidur_mlp(_row(tmp_path, 2048, 2))}
    assert set(ops) == {"qkv", "mlp.up", "input_norm"}  # only columns with a time
    job = job_from_dict({"model": {"preset": "llama-3-8b", "seq_length": 2048},
                         "training": {"global_batch_size": 8, "micro_batch_size": 1},
                         "parallel": {"tp": 2}, "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8}})
    graph_keys = {op.profile_key: op for op in build_graph(job).layer.forward}
    for name in ("qkv", "mlp.up", "input_norm"):
        op, _ = ops[name]
        assert op.profile_key in graph_keys
        assert graph_keys[op.profile_key].flops == pytest.approx(op.flops)
    assert ops["mlp.up"][1] == pytest.approx(1e-3)
    assert ops["qkv"][0].kind is OpKind.GEMM
