"""Bad input through `python -m vtrain_ml.simulate`: one clear line on stderr naming the field,
exit code 2, no traceback (unless --debug). A job that does not fit is not an error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator import ConfigError
from tests.conftest import job_dict
from vtrain_ml.cli.simulate import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# name -> (job dict, substrings the message must contain)
BAD_JOBS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "tp_not_dividing_heads": (
        job_dict(parallel={"tp": 3, "pp": 1, "dp": 1}, cluster={"num_gpus": 3}),
        ("tensor_parallel_size=3", "num_attention_heads=16")),
    "tp_not_dividing_query_groups": (
        job_dict(model={"num_query_groups": 2}, parallel={"tp": 4, "pp": 1, "dp": 2}),
        ("tensor_parallel_size=4", "num_query_groups=2")),
    "layers_not_divisible_by_pp": (
        job_dict(model={"num_layers": 9}), ("num_layers=9", "pipeline_parallel_size=2")),
    "layers_not_divisible_by_pp_times_v": (
        job_dict(parallel={"schedule": "interleaved_1f1b", "virtual_stages": 3}),
        ("num_layers=8", "virtual_stages", "6")),
    "batch_not_divisible_by_dp_times_micro_batch": (
        job_dict(training={"global_batch_size": 18, "micro_batch_size": 4}),
        ("global_batch_size=18", "micro_batch_size", "multiple of 8")),
    "gpu_count_not_tp_pp_dp": (
        job_dict(parallel={"dp": 4}), ("tp*pp*dp", "16", "num_gpus=8")),
    "unknown_gpu": (
        job_dict(cluster={"gpu": "a100-90gb"}), ("a100-90gb", "a100-80gb", "h100-sxm-80gb")),
    "unknown_preset": (
        {**job_dict(), "model": "gpt3-176b"}, ("gpt3-176b", "gpt3-175b", "llama-3-70b")),
    "unknown_key": (
        job_dict(training={"global_batch_sise": 16}),
        ("training.global_batch_sise", "did you mean 'global_batch_size'")),
    "unknown_section": (
        {**{k: v for k, v in job_dict().items() if k != "training"}, "trainig": {}},
        ("trainig", "did you mean 'training'")),
    "zero_micro_batch": (
        job_dict(training={"micro_batch_size": 0}), ("training.micro_batch_size", "greater than 0")),
    "negative_layers": (
        job_dict(model={"num_layers": -8}), ("model.num_layers", "greater than 0")),
    "negative_bandwidth": (
        job_dict(cluster={"inter_node_bandwidth_Gbps": -100.0}),
        ("cluster.inter_node_bandwidth_Gbps", "greater than 0")),
    "negative_price": (
        job_dict(cluster={"price_per_gpu_hour_usd": -1.0}), ("cluster.price_per_gpu_hour_usd",)),
    "unknown_schedule": (
        job_dict(parallel={"schedule": "zero_bubble"}), ("parallel.schedule", "zero_bubble")),
    "missing_section": (
        {k: v for k, v in job_dict().items() if k != "cluster"}, ("cluster",)),
    "fractional_layers": (
        job_dict(model={"num_layers": 8.5}), ("model.num_layers", "integer")),
    "text_for_a_number": (
        job_dict(model={"num_layers": "eight"}), ("model.num_layers", "eight")),
    "unknown_recompute": (
        job_dict(training={"recompute": "partial"}), ("training.recompute", "selective")),
    "interleaved_microbatches_not_multiple_of_pp": (
        job_dict(parallel={"schedule": "interleaved_1f1b", "virtual_stages": 2},
                 training={"global_batch_size": 6}),
        ("interleaved_1f1b", "micro-batches (3)", "pipeline_parallel_size=2")),
    "precision_not_on_gpu": (
        job_dict(cluster={"gpu": "v100-32gb"}, training={"precision": "bf16"}),
        ("precision=bf16", "v100-32gb", "fp16")),
    "flash_attention_not_on_gpu": (
        job_dict(cluster={"gpu": "v100-32gb"}, training={"flash_attention": True}),
        ("flash_attention", "v100-32gb")),
    "partial_node": (
        job_dict(cluster={"gpus_per_node": 3}), ("num_gpus=8", "gpus_per_node=3")),
}

BAD_VTRAIN: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "vtrain_unknown_key": ({"tensor_paralel_size": 2}, ("tensor_paralel_size", "tensor_parallel_size")),
    "vtrain_unknown_gpu": ({"gpu_name": "A300"}, ("A300", "A100")),
}


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *expected: str) -> None:
    assert code == 2
    assert err.startswith("error: ")
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, f"{text!r} not in {err!r}"


@pytest.mark.parametrize("name", BAD_JOBS)
def test_invalid_job_is_one_line_naming_the_field(name, tmp_path, capsys):
    data, expected = BAD_JOBS[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = run_cli(capsys, str(path))
    assert out == ""
    assert_one_line_error(code, err, *expected)


@pytest.mark.parametrize("name", BAD_VTRAIN)
def test_invalid_vtrain_config_is_one_line_naming_the_key(name, tmp_path, capsys):
    base = json.loads((EXAMPLES / "vtrain_gpt_8gpu.json").read_text())
    change, expected = BAD_VTRAIN[name]
    if "tensor_paralel_size" in change:
        base.pop("tensor_parallel_size")
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({**base, **change}))
    assert_one_line_error(*run_cli(capsys, str(path))[::2], *expected)


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("job.yaml", b"model: [1, 2\n  x: {", "not valid YAML"),
    ("job.json", b'{"model": "gpt3-175b",', "not valid JSON"),
    ("job.json", b'{"model": "gpt3-175b",\n "cluster": {"num_gpus": 8,},\n}', "trailing comma"),
    ("job.json", b'{"model": NaN}', "NaN is not a JSON number"),
    ("job.json", b'{"model": "a", "model": "b"}', "key 'model' appears more than once"),
    ("job.yaml", b"model: a\ntraining: {}\nmodel: b\n", "duplicate key 'model' (lines 1 and 3)"),
    ("job.json", b"\x00\x01\x02\xff\xfe\xfd", "not a text file"),
    ("job.yaml", b"- 1\n- 2\n", "must hold a mapping"),
    ("job.yaml", b"just a sentence", "must hold a mapping"),
    ("job.json", b"[1, 2]", "must hold a mapping"),
])
def test_file_that_is_not_a_job_is_one_line(name, content, expected, tmp_path, capsys):
    path = tmp_path / name
    path.write_bytes(content)
    assert_one_line_error(*run_cli(capsys, str(path))[::2], str(path), expected)


def test_json_with_a_trailing_comma_is_not_silently_accepted(tmp_path, capsys):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job_dict(), indent=1).replace('"num_gpus": 8', '"num_gpus": 8,'))
    code, out, err = run_cli(capsys, str(path))
    assert out == ""
    assert_one_line_error(code, err, "not valid JSON", "line", "trailing comma", "remove it")


def test_duplicate_yaml_key_names_the_key_not_a_missing_one(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    text = yaml.safe_dump(job_dict())
    path.write_text(text + "training:\n  precision: bf16\n")
    code, _, err = run_cli(capsys, str(path))
    assert_one_line_error(code, err, "duplicate key 'training'", "keep one")
    assert "missing required key" not in err


def test_directory_as_job_file_says_it_is_a_directory(tmp_path, capsys):
    from simulator.job.loaders import load_job

    with pytest.raises(ConfigError, match="is a directory"):
        load_job(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_cli(capsys, str(empty))
    assert_one_line_error(code, err, str(empty), "no job files")


def test_missing_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "nope.yaml"
    assert_one_line_error(*run_cli(capsys, str(path))[::2], str(path), "does not exist")


def test_debug_shows_the_traceback(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_dict(model={"num_layers": 9})))
    with pytest.raises(ConfigError, match="num_layers=9"):
        main([str(path), "--debug"])


def test_every_problem_is_reported_at_once(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_dict(model={"num_layers": 9},
                                            training={"global_batch_size": 15})))
    assert_one_line_error(*run_cli(capsys, str(path))[::2], "num_layers=9", "global_batch_size=15")


def test_job_that_does_not_fit_is_not_an_error(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(job_dict(
        model={"num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64},
        parallel={"tp": 8, "pp": 1, "dp": 1})))
    code, out, err = run_cli(capsys, str(path), "--json")
    assert code == 0 and err == ""
    result = json.loads(out)
    assert result["fits_in_memory"] is False
    assert result["memory_overflow_bytes"] > 0
    code, out, _ = run_cli(capsys, str(path))
    assert code == 0 and "DOES NOT FIT: over by" in out
