"""Case study 4's script (bench/case_study_4*.py): its pure parts, and that the committed job
files of the published layouts are what the mapping produces from data/published today."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench")]

import case_study_4  # noqa: E402
import case_study_4_rows as rows  # noqa: E402
import case_study_4_search as search  # noqa: E402

from simulator import job_from_dict  # noqa: E402


def test_release_labels_order_as_versions() -> None:
    labels = ["NeMo container 25.11", "NeMo container 26.06.01", "NeMo container 26.06",
              "NeMo container 26.08"]
    assert max(labels, key=rows.release_key) == "NeMo container 26.08"
    assert rows.release_key("NeMo container 26.06.01") > rows.release_key("NeMo container 26.06")
    assert rows.release_key("MLPerf Training v5.1") > rows.release_key("MLPerf Training v5.0")
    assert rows.release_key("Llama 3.1 405B pre-training (2024)") == ()


@pytest.mark.parametrize(("pp", "vp", "expected"), [
    (4, 4, (16, 13)), (8, 2, (8, 5)), (16, 1, (4, 1)), (2, 8, (32, 29)), (4, 2, (16, 13)),
    (4, 1, (16, 13)), (8, 1, (8, 5)), (8, 4, None), (1, 1, None)])
def test_deepseek_layout_follows_megatron_bridges_map(pp: int, vp: int, expected: object) -> None:
    assert rows.deepseek_stage_layers(pp, vp) == expected
    if expected is not None:  # the middle ranks share the rest evenly and all 61 layers are placed
        first, last = expected  # type: ignore[misc]
        rest = 61 - first - last
        assert pp == 2 or rest % (pp - 2) == 0


def test_breakdown_shares_fold_compute_and_sum_to_one() -> None:
    shares = case_study_4.breakdown_shares({"forward": 1.0, "backward": 2.0, "recompute": 1.0,
                                            "ep_comm": 4.0, "tp_comm": 0.0})
    assert shares == {"compute": 0.5, "ep_comm": 0.5}


def _outcome(hw: object, time_s: float, fits: bool = True) -> SimpleNamespace:
    return SimpleNamespace(plan={"hardware": hw, "tp": 1},
                           exact=SimpleNamespace(iteration_time_s=time_s, fits_in_memory=fits))


def test_fastest_feasible_plan_per_gpu_type() -> None:
    outcomes = [_outcome("b200", 3.0), _outcome("b200", 2.0), _outcome("b200", 1.0, fits=False),
                _outcome({"name": "gb200", "nvlink_domain": 72}, 5.0)]
    best = search.fastest_per_gpu(outcomes, "h100-sxm-80gb")
    assert {gpu: o.exact.iteration_time_s for gpu, o in best.items()} == {"b200": 2.0, "gb200": 5.0}
    assert search.plan_gpu({"tp": 1}, "h100-sxm-80gb") == "h100-sxm-80gb"


def test_biggest_differences_name_the_terms_that_moved() -> None:
    text = search.biggest_differences({"compute": 0.8, "ep_comm": 0.1}, {"compute": 0.5, "ep_comm": 0.4},
                                      n=1)
    assert text in ("compute 80% vs 50%", "ep_comm 10% vs 40%")


def test_an_unreadable_recipe_is_one_line_not_a_traceback(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: deepseek-v3\nmax_gpus: 8\nglobal_batch: 8\nspace: {no_such_knob: [1]}\n")
    assert search.run((bad,), [], None) == 2
    out = capsys.readouterr().out
    assert "cannot read the recipe" in out and "no_such_knob" in out


@pytest.fixture(scope="module")
def cases() -> list[rows.Case]:
    table = rows.read_rows()
    if table.empty:
        pytest.skip("data/published/ is not in this checkout")
    return rows.select(table)[0]


def test_committed_job_files_are_what_the_mapping_produces(cases: list[rows.Case]) -> None:
    expected = {c.key: c.job for c in cases if c.job is not None}
    committed = {p.stem: yaml.safe_load(p.read_text()) for p in case_study_4.JOBS.glob("*.yaml")}
    assert committed == expected, "rerun: PYTHONPATH=. python bench/case_study_4.py --write-jobs"


def test_every_job_file_validates_and_deepseek_uses_nvidias_pipeline_split(cases: list[rows.Case]) -> None:
    for case in cases:
        if case.job is not None:
            job_from_dict(case.job)
    gb200 = next(c for c in cases if c.key == "deepseek-v3-gb200-fp8-mxfp8-nvidia")
    assert gb200.job is not None
    assert gb200.job["parallel"]["last_stage_layers"] == 13
    assert gb200.published_tokens_per_s_per_gpu == 4912.0  # the 26.08 row, the latest release


def test_rows_outside_the_study_are_counted_not_simulated(cases: list[rows.Case]) -> None:
    outside = [c for c in cases if c.skip.startswith("GPU outside")]
    assert outside and all(c.job is None for c in outside)
    assert all(c.gpu in rows.STUDY_GPUS for c in cases if c.job is not None)


def test_the_docs_part_a_tables_are_what_the_script_prints(cases: list[rows.Case],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert case_study_4.main(["--no-plot"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    doc = (ROOT / "docs" / "case_study_4.md").read_text()
    stale = [line for line in printed if line not in doc]
    assert not stale, f"docs/case_study_4.md is stale: rerun bench/case_study_4.py; first: {stale[:1]}"
