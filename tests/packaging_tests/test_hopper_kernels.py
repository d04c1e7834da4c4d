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


def test_every_hopper_file_takes_the_attention_ceiling_fitted_to_the_measured_kernels(
        measured: pd.DataFrame) -> None:
    best = fit.fit_attention(fit.attention(measured))
    for name in HOPPER:
        assert resolve_hardware(name).efficiency.attention_max_efficiency == pytest.approx(best, abs=5e-4)


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
