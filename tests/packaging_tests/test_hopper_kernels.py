"""The Hopper hardware files carry what the kernels measured on an H200 say
(data/kernels/h200-measured, bench/fit_hopper_kernels.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench")]

import fit_hopper_kernels as fit  # noqa: E402

from simulator.job.catalog import resolve_hardware  # noqa: E402

HOPPER = ("h100-sxm-80gb", "h200-141gb", "h800")


@pytest.fixture(scope="module")
def measured() -> pd.DataFrame:
    return fit.measurements()


def test_every_hopper_file_takes_the_attention_ceiling_and_depth_fitted_to_the_measured_kernels(
        measured: pd.DataFrame) -> None:
    best = fit.fit_attention(fit.attention(measured))
    for name in HOPPER:
        eff = resolve_hardware(name).efficiency
        assert eff.attention_max_efficiency == pytest.approx(best["attention_max_efficiency"], abs=5e-4)
        assert eff.attention_k_half == pytest.approx(best["attention_k_half"], abs=0.5)


def test_the_h200_fit_predicts_the_real_h100_iterations_attention_better_than_the_gemm_ceiling() -> None:
    """Independent check: cuDNN's attention kernels in the H100 traces of real Hugging Face Llama
    iterations (other shapes, another GPU) were not fitted."""
    if not fit.TRACES.is_dir():
        pytest.skip(f"{fit.TRACES} not found")
    rows = fit.h100_trace_attention()
    assert len(rows) >= 8
    h100 = resolve_hardware("h100-sxm-80gb")

    def mape(values: dict[str, float | None]) -> float:
        model = fit.AnalyticKernelModel(h100.model_copy(update={"efficiency": h100.efficiency.model_copy(
            update=values)}), fit.Precision.BF16)
        pred = np.array([model.seconds(op) for op in rows.op])
        return float(np.mean(np.abs(pred / rows.seconds.to_numpy() - 1)))

    shipped = mape({})
    assert shipped < 0.2
    assert shipped < mape(fit.GEMM_CEILING) - 0.2


def test_with_it_the_model_predicts_the_measured_attention_time_in_total(measured: pd.DataFrame) -> None:
    rows = fit.attention(measured)
    assert len(rows) == 14  # 7 shapes, forward and backward
    pred = fit.seconds(list(rows.op), {})
    assert pred.sum() / rows.seconds.sum() == pytest.approx(1.0, abs=0.03)
    assert np.mean(np.abs(pred / rows.seconds - 1)) < 0.15


def test_the_grouped_gemm_model_is_within_15_percent_of_te_style_grouped_gemms(
        measured: pd.DataFrame, capsys: pytest.CaptureFixture[str]) -> None:
    """Not fitted: the model of the experts' grouped GEMM (one (E, tokens, N, K) problem) against
    one cuBLAS GEMM per expert over 4 streams, as Transformer Engine runs them."""
    fit.grouped_section(measured)
    out = capsys.readouterr().out
    mape_row = next(line for line in out.splitlines() if line.startswith("MAPE"))
    header = next(line for line in out.splitlines() if line.startswith("variant"))
    mape = dict(zip(header.split()[1:], mape_row.split()[1:], strict=True))
    assert float(mape["streams4"].strip("+%")) <= 15


def test_the_contention_model_lies_between_the_two_measured_gemms_at_24_held_sms(
        measured: pd.DataFrame) -> None:
    c = measured[measured.part == "contention"]

    def slowdown(case: str) -> float:
        alone = float(c[(c.case == case) & (c.variant == "heavy_alone")].median_s.iloc[0])
        beside = float(c[(c.case == case) & (c.variant == "heavy_ctas24")].median_s.iloc[0])
        return beside / alone - 1

    model = 24 / (132 - 24)
    assert slowdown("gemm") < model < slowdown("gemm_expert")
