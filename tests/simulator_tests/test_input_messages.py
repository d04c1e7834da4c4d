"""Inputs that used to end in a misleading hint, a silent "$inf" or the kernel's OOM killer
(issue 26, items 10 and 11): each is now one line naming the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.errors import ConfigError
from simulator.job.limits import MAX_PIPELINE_STEPS
from tests.conftest import job_dict, make_job
from vtrain_ml.cli.simulate import main

ROOT = Path(__file__).resolve().parents[2]


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize(("key", "suggested"), [
    ("tensor_parallel_size", "did you mean 'tp'? (tensor_parallel_size in vTrain / Megatron-LM)"),
    ("tensor_paralel", "did you mean 'tp'? (tensor_parallel_size in vTrain / Megatron-LM)"),
    ("pipeline_model_parallel_size", "did you mean 'pp'?"),
    ("sequence_paralel", "did you mean 'sequence_parallel'?"),
])
def test_a_foreign_or_misspelt_parallel_key_points_at_our_name(key, suggested, tmp_path, capsys) -> None:
    data = job_dict()
    data["parallel"] = {**data["parallel"], key: 2}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main([str(path)]) == 2
    assert suggested in _one_line(capsys)


@pytest.mark.parametrize("price", [".inf", ".nan", "-.inf"])
def test_an_infinite_price_is_refused(price, tmp_path, capsys) -> None:
    path = tmp_path / "job.yaml"
    text = yaml.safe_dump(job_dict())
    path.write_text(text.replace("cluster:\n", f"cluster:\n  price_per_gpu_hour_usd: {price}\n"))
    assert main([str(path)]) == 2
    line = _one_line(capsys)
    assert "price_per_gpu_hour_usd" in line and "$inf" not in line


def test_a_job_too_large_to_simulate_is_refused_with_the_reason(capsys) -> None:
    # MT-NLG with 2.5 million micro-batches on 105 stages: ~90 GB of timeline, once killed by the OOM killer
    assert main([str(ROOT / "examples" / "mtnlg_530b.yaml"), "--global-batch", "9999600", "--pp", "105"]) == 2
    line = _one_line(capsys)
    assert "262,489,500 pipeline steps" in line and f"limit is {MAX_PIPELINE_STEPS:,} steps" in line


def test_the_limit_is_a_bound_not_a_guess_at_the_edge() -> None:
    m = MAX_PIPELINE_STEPS // 8
    at_limit = {"training": {"global_batch_size": m, "micro_batch_size": 1},
                "parallel": {"tp": 1, "pp": 8, "dp": 1}, "cluster": {"num_gpus": 8}}
    job = make_job(**at_limit)
    assert job.num_microbatches * job.parallel.pp == MAX_PIPELINE_STEPS
    over = {**at_limit, "training": {"global_batch_size": m + 1, "micro_batch_size": 1}}
    with pytest.raises(ConfigError, match="pipeline steps"):
        make_job(**over)
