"""Golden results of four reference jobs: any change to a simulated number shows up here.

When a change is intended (a calibrated hardware file, a corrected formula), regenerate with
``pytest tests/simulator_tests/test_golden.py --regen-golden`` (or VTRAIN_REGEN_GOLDEN=1) and
review the JSON diff in the commit.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from simulator import load_job, simulate
from simulator.fileio import write_json_atomic

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
JOBS = {
    "mtnlg_530b": ROOT / "examples" / "mtnlg_530b.yaml",  # the README example, 3,360 A100s
    "llama3_70b_gqa_sp_zero1_overlap": GOLDEN / "llama3_70b_gqa_sp_zero1_overlap.yaml",
    "gpt3_175b_interleaved": GOLDEN / "gpt3_175b_interleaved.yaml",
    "gpt_1.7b_2gpu_gpipe": GOLDEN / "gpt_1.7b_2gpu_gpipe.yaml",
}
REL, ABS = 1e-9, 1e-12  # numbers: relative tolerance; seconds near zero: absolute


def differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Every place where `actual` departs from `expected` (numbers within REL/ABS)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{path}.{k}: missing" for k in expected if k not in actual]
        out += [f"{path}.{k}: unexpected" for k in actual if k not in expected]
        for key in expected.keys() & actual.keys():
            out += differences(expected[key], actual[key], f"{path}.{key}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(actual)} items, expected {len(expected)}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for d in differences(e, a, f"{path}[{i}]")]
    numbers = (int, float)
    if (isinstance(expected, numbers) and isinstance(actual, numbers)
            and not isinstance(expected, bool) and not isinstance(actual, bool)):
        if math.isclose(expected, actual, rel_tol=REL, abs_tol=ABS):
            return []
        return [f"{path}: {actual!r}, expected {expected!r}"]
    return [] if expected == actual else [f"{path}: {actual!r}, expected {expected!r}"]


@pytest.mark.parametrize("name", JOBS)
def test_result_matches_golden(name, regen_golden):
    job_file = JOBS[name]
    result = json.loads(json.dumps(simulate(load_job(job_file)).to_dict()))
    golden = GOLDEN / f"{name}.json"
    if regen_golden:
        write_json_atomic(golden, {"job_file": str(job_file.relative_to(ROOT)), "result": result})
        pytest.skip(f"regenerated {golden.relative_to(ROOT)}")
    assert golden.is_file(), f"no golden result {golden}; run pytest with --regen-golden"
    expected = json.loads(golden.read_text())
    assert expected["job_file"] == str(job_file.relative_to(ROOT))
    diff = differences(expected["result"], result)
    assert not diff, (f"{len(diff)} differences from {golden.name} (if intended, regenerate with "
                      f"--regen-golden):\n  " + "\n  ".join(sorted(diff)[:40]))


def test_golden_comparison_catches_small_changes():
    base = {"a": [1.0, {"b": 2, "c": "x"}], "fits": True}
    assert differences(base, json.loads(json.dumps(base))) == []
    assert differences(base, {"a": [1.0 + 1e-6, {"b": 2, "c": "x"}], "fits": True}) == [
        ".a[0]: 1.000001, expected 1.0"]
    assert differences(base, {"a": [1.0, {"b": 2, "c": "y"}], "fits": False}) != []
    assert differences(base, {"a": [1.0], "fits": True}) != []
    assert differences(base, {"a": [1.0, {"b": 2}], "fits": True}) == [".a[1].c: missing"]
