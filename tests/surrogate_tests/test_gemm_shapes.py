"""The GEMM efficiencies a row's physics reads are the simulator's, of the row's GEMM shapes, and
the one-pass table (`effs_table`, compiled where numba is installed) gives the same numbers as
the numpy arrays and one job's floats."""

from __future__ import annotations

import numpy as np

from simulator.costs.analytic import gemm_efficiency
from surrogate.gemm_shapes import HW_COLUMNS, N_EFFS, SHAPE_FIELDS, GemmEffs, effs_of_fields, effs_table
from surrogate.physics import HW_FIELDS, ROW_FIELDS, hardware_of_table, hardware_table


def test_the_pass_reads_the_fields_and_hardware_numbers_it_names() -> None:
    assert [ROW_FIELDS[j] for j in SHAPE_FIELDS] == [
        "micro_batch_size", "seq_length", "hidden_size", "num_attention_heads", "num_query_groups",
        "ffn_hidden_size", "gated_mlp", "vocab_size", "tp"]
    assert [HW_FIELDS[j] for j in HW_COLUMNS] == [
        "num_sms", "gemm_max", "k_half", "attention_max", "attention_k_half"]


def _fields(n: int, seed: int = 0) -> np.ndarray:
    """(`ROW_FIELDS`, n) matrix of random but valid shapes (the other fields are irrelevant)."""
    rng = np.random.default_rng(seed)
    out = np.ones((len(ROW_FIELDS), n))
    t = rng.choice([1, 2, 4, 8], n)
    heads = t * rng.integers(1, 16, n)
    col = {name: j for j, name in enumerate(ROW_FIELDS)}
    out[col["tp"]] = t
    out[col["num_attention_heads"]] = heads
    out[col["num_query_groups"]] = np.where(rng.random(n) < 0.5, heads, t)
    out[col["hidden_size"]] = heads * rng.choice([64, 80, 128], n)
    out[col["ffn_hidden_size"]] = t * rng.integers(100, 4000, n)
    out[col["gated_mlp"]] = rng.integers(0, 2, n)
    out[col["vocab_size"]] = rng.integers(30_000, 260_000, n)
    out[col["seq_length"]] = rng.choice([512, 2048, 4096, 32768], n)
    out[col["micro_batch_size"]] = rng.integers(1, 9, n)
    return out


def test_the_compiled_pass_equals_the_numpy_arrays_to_the_bit() -> None:
    fields = _fields(3000)
    gpus = np.where(np.arange(3000) % 3 == 0, "h100-sxm-80gb", "b200")
    table, codes = hardware_table(gpus, None)
    passed = effs_table(fields, table, codes)
    arrays = effs_of_fields(list(fields), hardware_of_table(table, codes))
    assert passed.shape == (N_EFFS, 3000)
    np.testing.assert_array_equal(passed, np.array(arrays))


def test_one_row_reads_the_simulators_efficiency_of_each_of_its_gemm_shapes() -> None:
    """A Llama-3-8B-like row at tp 2 (b=2, s=4096, h=4096, 32 heads, 8 groups, ffn 14336, gated)."""
    col = {name: j for j, name in enumerate(ROW_FIELDS)}
    fields = np.ones((len(ROW_FIELDS), 1))
    for name, value in {"micro_batch_size": 2, "seq_length": 4096, "hidden_size": 4096,
                        "num_attention_heads": 32, "num_query_groups": 8, "ffn_hidden_size": 14336,
                        "gated_mlp": 1, "vocab_size": 50257, "tp": 2}.items():
        fields[col[name]] = value
    table, codes = hardware_table(np.array(["h100-sxm-80gb"]), None)
    e = GemmEffs(*effs_table(fields, table, codes)[:, 0])
    hw = dict(zip(HW_FIELDS, table[0], strict=True))
    sms, mx, kh = hw["num_sms"], hw["gemm_max"], hw["k_half"]

    def eff(batch: float, m: float, n: float, k: float, ceiling: float = mx, half: float = kh) -> float:
        return gemm_efficiency(batch, m, n, k, sms, ceiling, half)

    T, heads, hd, vocab = 2 * 4096, 16, 128, 50432  # 50257 padded to a multiple of 128 x tp
    assert e.qkv == eff(1, T, (16 + 2 * 4) * hd, 4096) and e.qkv_w == eff(1, (16 + 2 * 4) * hd, 4096, T)
    assert e.proj == eff(1, T, 4096, heads * hd) and e.proj_w == eff(1, 4096, heads * hd, T)
    assert e.up == eff(1, T, 2 * 7168, 4096) and e.up_w == eff(1, 2 * 7168, 4096, T)
    assert e.down == eff(1, T, 4096, 7168) and e.down_w == eff(1, 4096, 7168, T)
    assert e.scores == eff(2 * heads, 4096, 4096, hd)
    assert e.s_hd_s == eff(2 * heads, 4096, hd, 4096) and e.av_w == eff(2 * heads, hd, 4096, 4096)
    assert e.flash == eff(2 * heads, 4096, hd, 4096, hw["attention_max"], hw["attention_k_half"])
    assert e.logits == eff(1, T, vocab / 2, 4096) and e.logits_w == eff(1, vocab / 2, 4096, T)
    assert e.mlp == eff(1, T, 7168, 4096)
