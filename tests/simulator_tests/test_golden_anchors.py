"""One independent anchor per golden job: a hand calculation from the paper that defines the
quantity, checked against the golden JSON itself. `--regen-golden` rewrites the snapshots from the
code; it cannot move these numbers, so a regeneration that changes them fails here.

Model FLOPs per iteration (what MFU divides by): Narayanan et al. 2021, eq. 3 without the
recomputed forward, 72 B s l h^2 (1 + s / 6h + V / 12 l h), with the unpadded vocabulary V; with
full recomputation the hardware FLOPs are eq. 3 itself, 96 B s l h^2 (1 + s / 6h + V / 16 l h);
selective recomputation adds the attention core's forward again, 4 B s^2 h per layer
(Korthikanti et al. 2022, section 5). Parameters: 12 l h^2 + 13 l h per GPT layer plus the
embeddings (Narayanan et al. 2021, section 5.1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"


def _golden(name: str) -> dict:  # type: ignore[type-arg]
    return json.loads((GOLDEN / f"{name}.json").read_text())["result"]


def _model_flops(B: int, s: int, l: int, h: int, V: int) -> float:
    return 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))


def _gpt_parameters(l: int, h: int, V: int, s: int) -> int:
    """Layers (QKV, projection, two MLP matrices with biases, two layernorms), word and learned
    position embeddings (tied output layer), the final layernorm."""
    return l * (12 * h**2 + 13 * h) + V * h + s * h + 2 * h


def test_mtnlg_530b_flops_and_parameters_by_hand():
    """MT-NLG 530B (Smith et al. 2022): 105 layers, hidden 20,480, GPT-2 vocabulary 50,257,
    sequence 2,048, batch 1,920, full recomputation."""
    g = _golden("mtnlg_530b")
    B, s, l, h, V = 1920, 2048, 105, 20480, 50257
    assert g["job"]["parameters"] == _gpt_parameters(l, h, V, s) == 529_581_506_560
    assert g["model_flops_per_iteration"] == pytest.approx(_model_flops(B, s, l, h, V), rel=1e-9)
    hardware = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert g["hardware_flops_per_iteration"] == pytest.approx(hardware, rel=1e-9)


def test_gpt3_175b_flops_with_selective_recompute_by_hand():
    """GPT-3 175B (Brown et al. 2020): 96 layers, hidden 12,288; batch 64 of 2,048 tokens."""
    g = _golden("gpt3_175b_interleaved")
    B, s, l, h, V = 64, 2048, 96, 12288, 50257
    assert g["job"]["parameters"] == _gpt_parameters(l, h, V, s)  # 174.6B: "175B"
    model = _model_flops(B, s, l, h, V)
    assert g["model_flops_per_iteration"] == pytest.approx(model, rel=1e-9)
    assert g["hardware_flops_per_iteration"] == pytest.approx(model + 4 * B * s**2 * h * l, rel=1e-9)


def test_gpt_1_7b_flops_with_full_recompute_by_hand():
    """Megatron's 1.7B GPT (Narayanan et al. 2021, Table 1): 24 layers, hidden 2,304, vocabulary
    51,200, sequence 2,048; batch 32, full recomputation."""
    g = _golden("gpt_1.7b_2gpu_gpipe")
    B, s, l, h, V = 32, 2048, 24, 2304, 51200
    assert g["job"]["parameters"] == _gpt_parameters(l, h, V, s)
    assert g["model_flops_per_iteration"] == pytest.approx(_model_flops(B, s, l, h, V), rel=1e-9)
    hardware = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert g["hardware_flops_per_iteration"] == pytest.approx(hardware, rel=1e-9)


def test_llama3_70b_parameters_and_flops_by_hand():
    """Llama 3 70B (Meta 2024: 70.6B parameters): 80 layers, hidden 8,192, 64 query heads and 8
    key/value heads of 128, SwiGLU MLP of 28,672, RMSNorm without biases, vocabulary 128,256,
    untied output layer, RoPE (no position embedding); sequence 4,096, batch 64. FLOPs: 6 per
    weight per token for the matrices, plus attention scores and values (2 x 2 s h per token
    forward, x3 with the backward) and the output layer."""
    g = _golden("llama3_70b_gqa_sp_zero1_overlap")
    l, h, kv, ffn, V, s, B = 80, 8192, 8 * 128, 28672, 128256, 4096, 64
    matrices = 2 * h * h + 2 * h * kv + 3 * h * ffn
    assert g["job"]["parameters"] == l * (matrices + 2 * h) + 2 * V * h + h == 70_553_706_496
    tokens = B * s
    flops = 6 * tokens * l * matrices + 12 * tokens * l * s * h + 6 * tokens * h * V
    assert g["model_flops_per_iteration"] == pytest.approx(flops, rel=1e-9)


@pytest.mark.parametrize("name", ["mtnlg_530b", "gpt3_175b_interleaved", "gpt_1.7b_2gpu_gpipe",
                                  "llama3_70b_gqa_sp_zero1_overlap"])
def test_golden_mfu_is_model_flops_over_time_at_the_datasheet_peak(name):
    """MFU = model FLOPs / (iteration time x GPUs x dense fp16/bf16 peak): A100 312, H100 989.4,
    V100 125 TFLOP/s (NVIDIA datasheets)."""
    g = _golden(name)
    peak = {"a100-80gb": 312e12, "h100-sxm-80gb": 989.4e12, "v100-32gb": 125e12}[g["job"]["gpu"]]
    mfu = g["model_flops_per_iteration"] / (g["iteration_time_s"] * g["job"]["num_gpus"] * peak)
    assert g["mfu"] == pytest.approx(mfu, rel=1e-9)
