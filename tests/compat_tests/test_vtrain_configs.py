"""vTrain's own config files load exactly as vTrain loads them (github.com/VIA-Research/vTrain,
src/config.py): every key optional with vTrain's default, derived sizes, micro_batch_size =
global_batch_size // data_parallel_size when pipeline_parallel_size <= 1, and rejected exactly
where vTrain's `validate_config` asserts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulator import ConfigError
from simulator.job.loaders import read_job
from simulator.job.vtrain_config import VTrainRejects

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "vtrain_configs"
FILES = sorted(CONFIGS.rglob("*.json"))

# vTrainConfig.__init__'s defaults, copied from vTrain's src/config.py
VTRAIN_DEFAULTS: dict[str, Any] = {
    "num_gpus": None, "tensor_parallel_size": None, "data_parallel_size": None,
    "pipeline_parallel_size": None, "gpu_name": "A100", "global_batch_size": 1920,
    "micro_batch_size": None, "model_arch": "ShardedGptModel", "num_layers": 105,
    "hidden_size": 20480, "num_attention_heads": 128, "max_length": 2048, "vocab_size": 50257,
    "use_gradient_bucket": False, "use_checkpoint": True, "ddp_bucket_size": None,
    "inter_node_bandwidth": 800, "intra_node_bandwidth": 150, "pipeline_scheduling": "1f1b",
    "node_size": 8, "trace_path": "trace/",
}


def vtrain_validate_config(data: dict[str, Any]) -> dict[str, Any]:
    """The test's oracle: vTrain's `vTrainConfig(**data)` + `validate_config`, transcribed line by
    line from vTrain's src/config.py (raises AssertionError where vTrain does)."""
    c = {**VTRAIN_DEFAULTS, **data}
    sizes = [c["tensor_parallel_size"], c["data_parallel_size"], c["pipeline_parallel_size"]]
    tp, dp, pp = "tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size"
    if c["num_gpus"] is None:
        assert all(x is not None for x in sizes)
        c["num_gpus"] = c[tp] * c[pp] * c[dp]
    elif any(x is None for x in sizes):
        if sum(x is None for x in sizes) > 1:
            raise AssertionError("Only one of ... can be None.")
        if c[tp] is None:
            c[tp] = c["num_gpus"] // (c[pp] * c[dp])
        elif c[dp] is None:
            c[dp] = c["num_gpus"] // (c[tp] * c[pp])
        else:
            c[pp] = c["num_gpus"] // (c[tp] * c[dp])
    else:
        assert c["num_gpus"] == c[tp] * c[pp] * c[dp]
    if c["pipeline_parallel_size"] <= 1:
        c["micro_batch_size"] = c["global_batch_size"] // c["data_parallel_size"]
    assert c["global_batch_size"] % c["data_parallel_size"] == 0
    assert c["global_batch_size"] % c["micro_batch_size"] == 0
    assert c["num_layers"] % c["pipeline_parallel_size"] == 0
    assert c["hidden_size"] % c["num_attention_heads"] == 0
    assert c["num_attention_heads"] % c["tensor_parallel_size"] == 0
    return c


def test_the_sample_covers_every_folder_of_vtrains_config_directory():
    assert len(FILES) == 64
    folders = {f.parent.relative_to(CONFIGS).as_posix() for f in FILES}
    assert folders == {".", "case_study_1", "validation/single", "validation/multi"}
    assert (CONFIGS / "case_study_1" / "config_test_mtnlg.json").exists()
    assert "\t" in (CONFIGS / "case_study_1" / "config_mtnlg_8_15_105.json").read_text()


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(CONFIGS).as_posix())
def test_each_vtrain_file_loads_or_is_rejected_where_vtrain_asserts(path):
    data = json.loads(path.read_text())
    try:
        expected = vtrain_validate_config(data)
    except AssertionError:
        with pytest.raises(VTrainRejects, match="vTrain rejects this file too"):
            read_job(path)
        return
    job = read_job(path).job
    dp = expected["data_parallel_size"]
    assert (job.parallel.tp, job.dp, job.parallel.pp) == (
        expected["tensor_parallel_size"], dp, expected["pipeline_parallel_size"])
    assert job.cluster.num_gpus == expected["num_gpus"]
    assert job.training.micro_batch_size == expected["micro_batch_size"]
    assert job.num_microbatches == (expected["global_batch_size"] // dp) // expected["micro_batch_size"]
    assert job.model.vocab_size == 50257  # absent from every vTrain file: vTrain's default
    assert (job.model.num_layers, job.model.hidden_size, job.model.seq_length) == (
        expected["num_layers"], expected["hidden_size"], expected["max_length"])
    assert job.training.framework.value == "megatron-deepspeed"
    assert job.training.precision.value == "fp16"
    assert job.training.recompute.value == ("full" if expected["use_checkpoint"] else "none")


def test_the_case_study_grid_files_with_a_wrong_gpu_count_are_rejected_with_the_fix():
    path = CONFIGS / "case_study_1" / "config_mtnlg_16_10_105.json"  # tp 16, dp 10, pp 105
    with pytest.raises(VTrainRejects) as err:
        read_job(path)
    message = str(err.value)
    assert "num_gpus=3360" in message and "16*105*10 = 16800" in message
    assert "vTrain rejects this file too" in message
    assert "set num_gpus to 16800" in message and "data_parallel_size to num_gpus // (tp*pp) = 2" in message
    assert isinstance(err.value, AssertionError)  # what vTrain raises, for scripts that catch it


def test_the_published_mtnlg_layout_loads_with_the_files_values():
    job = read_job(CONFIGS / "config_example.json").job
    assert (job.parallel.tp, job.dp, job.parallel.pp, job.cluster.num_gpus) == (8, 12, 35, 3360)
    assert job.training.micro_batch_size == 1 and job.num_microbatches == 160
    assert job.hardware.name == "a100-80gb"
    assert job.inter_node_bandwidth_Bps == pytest.approx(800e9 / 8)
    assert job.intra_node_bandwidth_Bps == pytest.approx(150e9)


def test_tab_indented_json_is_read_as_json(tmp_path):
    path = tmp_path / "tabs.json"
    path.write_text('{\n\t"num_gpus": 8,\n\t"tensor_parallel_size": 2,\n\t"data_parallel_size": 2,\n'
                    '\t"pipeline_parallel_size": 2,\n\t"micro_batch_size": 4,\n\t"num_layers": 8,\n'
                    '\t"hidden_size": 1024,\n\t"num_attention_heads": 16\n}\n')
    job = read_job(path).job
    assert (job.parallel.tp, job.dp, job.parallel.pp, job.training.micro_batch_size) == (2, 2, 2, 4)
    assert job.training.global_batch_size == 1920  # vTrain's default


def test_pipeline_size_one_sets_the_micro_batch_from_the_global_batch_and_says_so(tmp_path):
    path = tmp_path / "pp1.json"
    path.write_text(json.dumps({"num_gpus": 4, "tensor_parallel_size": 1, "data_parallel_size": 4,
                                "pipeline_parallel_size": 1, "global_batch_size": 64,
                                "micro_batch_size": 2, "num_layers": 4, "hidden_size": 512,
                                "num_attention_heads": 8}))
    loaded = read_job(path)
    assert loaded.job.training.micro_batch_size == 16  # 64 // 4, the file's 2 is replaced
    assert loaded.job.num_microbatches == 1
    assert any("micro_batch_size set to global_batch_size // data_parallel_size = 64 // 4 = 16" in n
               and "the file's micro_batch_size=2 is not used" in n for n in loaded.notes)


def test_a_file_with_only_gpus_tp_and_pp_one_derives_dp_and_the_micro_batch(tmp_path):
    path = tmp_path / "three.json"
    path.write_text(json.dumps({"num_gpus": 64, "tensor_parallel_size": 8, "pipeline_parallel_size": 1}))
    loaded = read_job(path)
    job = loaded.job
    assert job.dp == 8  # 64 // (8 * 1)
    assert job.training.micro_batch_size == 240  # 1920 // 8
    assert job.training.global_batch_size == 1920
    m = job.model  # vTrain's default model: 105 layers, hidden 20480, 128 heads, 2048 tokens
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, m.vocab_size) == (
        105, 20480, 128, 2048, 50257)
    assert job.training.recompute.value == "full"  # use_checkpoint defaults to True
    assert any("data_parallel_size derived as num_gpus // " in n for n in loaded.notes)


def test_a_file_with_only_gpus_tp_and_pp_above_one_fails_as_in_vtrain(tmp_path):
    path = tmp_path / "three.json"
    path.write_text(json.dumps({"num_gpus": 3360, "tensor_parallel_size": 8, "pipeline_parallel_size": 35}))
    with pytest.raises(VTrainRejects, match=r"micro_batch_size is missing.*add micro_batch_size"):
        read_job(path)
    data = json.loads(path.read_text())
    with pytest.raises(TypeError):  # what vTrain itself does with this file: 1920 % None
        vtrain_validate_config(data)


@pytest.mark.parametrize(("data", "expected"), [
    ({"tensor_parallel_size": 2, "data_parallel_size": 3, "pipeline_parallel_size": 5,
      "num_layers": 10, "hidden_size": 256, "num_attention_heads": 4, "micro_batch_size": 2,
      "global_batch_size": 60, "node_size": 2}, {"num_gpus": 30}),
    ({"num_gpus": 16, "tensor_parallel_size": 4, "data_parallel_size": 2, "micro_batch_size": 1,
      "num_layers": 8, "hidden_size": 512, "num_attention_heads": 8, "global_batch_size": 16},
     {"pipeline_parallel_size": 2}),
    ({"num_gpus": 16, "data_parallel_size": 2, "pipeline_parallel_size": 2, "micro_batch_size": 1,
      "num_layers": 8, "hidden_size": 512, "num_attention_heads": 8, "global_batch_size": 16},
     {"tensor_parallel_size": 4}),
])
def test_the_one_missing_size_is_derived_as_vtrain_derives_it(data, expected):
    from simulator.job.loaders import job_file_from_dict

    job = job_file_from_dict(data).job
    got = {"num_gpus": job.cluster.num_gpus, "tensor_parallel_size": job.parallel.tp,
           "data_parallel_size": job.dp, "pipeline_parallel_size": job.parallel.pp}
    for key, value in expected.items():
        assert got[key] == value
        assert vtrain_validate_config(data)[key] == value


@pytest.mark.parametrize(("data", "expected"), [
    ({"num_gpus": 8, "tensor_parallel_size": 2}, "data_parallel_size and pipeline_parallel_size"),
    ({"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, "num_gpus is missing"),
    ({"num_gpus": 8, "tensor_parallel_size": 2, "data_parallel_size": 4, "pipeline_parallel_size": 1,
      "global_batch_size": 10}, "global_batch_size=10 is not divisible by data_parallel_size=4"),
    ({"num_gpus": 2, "tensor_parallel_size": 1, "data_parallel_size": 1, "pipeline_parallel_size": 2,
      "micro_batch_size": 7}, "global_batch_size=1920 is not divisible by micro_batch_size=7"),
    ({"num_gpus": 4, "tensor_parallel_size": 1, "data_parallel_size": 1, "pipeline_parallel_size": 4,
      "micro_batch_size": 1, "num_layers": 6}, "num_layers=6 is not divisible by pipeline_parallel_size=4"),
    ({"num_gpus": 1, "tensor_parallel_size": 1, "data_parallel_size": 1, "pipeline_parallel_size": 1,
      "hidden_size": 1000, "num_attention_heads": 16}, "hidden_size=1000 is not divisible"),
    ({"num_gpus": 3, "tensor_parallel_size": 3, "data_parallel_size": 1, "pipeline_parallel_size": 1},
     "num_attention_heads=128 is not divisible by tensor_parallel_size=3"),
])
def test_vtrains_assertions_are_one_line_errors_that_say_vtrain_rejects_them_too(data, expected):
    from simulator.job.loaders import job_file_from_dict

    with pytest.raises(AssertionError):
        vtrain_validate_config(data)
    with pytest.raises(VTrainRejects) as err:
        job_file_from_dict(data)
    assert expected in str(err.value) and "vTrain rejects this file too" in str(err.value)
    assert "\n" not in str(err.value)


def test_vtrain_keys_map_to_the_job_with_vtrains_units():
    from simulator.job.loaders import job_file_from_dict

    data = {"num_gpus": 8, "tensor_parallel_size": 2, "data_parallel_size": 2,
            "pipeline_parallel_size": 2, "micro_batch_size": 2, "global_batch_size": 32,
            "num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "max_length": 1024,
            "vocab_size": 32000, "use_gradient_bucket": True, "ddp_bucket_size": 40,
            "use_checkpoint": False, "node_size": 4, "inter_node_bandwidth": 200,
            "intra_node_bandwidth": 300, "pipeline_scheduling": "1F1B", "trace_path": "t/"}
    job = job_file_from_dict(data).job
    assert job.parallel.overlap_grad_reduce and job.parallel.bucket_size_mb == 40  # MB
    assert job.training.recompute.value == "none"
    assert job.model.vocab_size == 32000 and job.model.seq_length == 1024
    assert job.gpus_per_node == 4
    assert job.inter_node_bandwidth_Bps == pytest.approx(200e9 / 8)  # Gbps per node
    assert job.intra_node_bandwidth_Bps == pytest.approx(300e9)  # GB/s
    assert job.parallel.schedule.value == "1f1b"


def test_another_model_arch_is_a_clear_error():
    from simulator.job.loaders import job_file_from_dict

    with pytest.raises(ConfigError, match=r"model_arch='BertModel' is not supported.*ShardedGptModel"):
        job_file_from_dict({"num_gpus": 1, "tensor_parallel_size": 1, "data_parallel_size": 1,
                            "pipeline_parallel_size": 1, "model_arch": "BertModel"})


def test_a_gpu_count_that_is_not_a_multiple_runs_on_what_vtrain_derives():
    from simulator.job.loaders import job_file_from_dict

    loaded = job_file_from_dict({"num_gpus": 12, "tensor_parallel_size": 8, "pipeline_parallel_size": 1,
                                 "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16})
    assert loaded.job.dp == 1  # 12 // 8, as vTrain derives it
    assert loaded.job.cluster.num_gpus == 8
    assert any("like vTrain, the job runs on" in n and "= 8 GPUs" in n for n in loaded.notes)
