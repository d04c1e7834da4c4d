"""Job files: vTrain's flat JSON and the native YAML of the same job are the same job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator import ConfigError, job_from_dict, load_job, simulate
from simulator.job.loaders import VTRAIN_KEYS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_vtrain_json_and_native_yaml_give_identical_results():
    vtrain = load_job(EXAMPLES / "vtrain_gpt_8gpu.json")
    native = load_job(EXAMPLES / "vtrain_gpt_8gpu.yaml")
    assert vtrain == native
    assert simulate(vtrain).to_dict() == simulate(native).to_dict()


def test_vtrain_example_uses_only_vtrain_keys():
    data = json.loads((EXAMPLES / "vtrain_gpt_8gpu.json").read_text())
    assert set(data) <= set(VTRAIN_KEYS)
    assert set(VTRAIN_KEYS) - set(data) == {"model_arch", "ddp_bucket_size"}  # vTrain's defaults


def test_vtrain_config_maps_to_megatron_conventions():
    job = load_job(EXAMPLES / "vtrain_gpt_8gpu.json")
    assert job.training.precision.value == "fp16"
    assert job.training.framework.value == "megatron-deepspeed"  # vTrain's measured stack
    assert job.training.recompute.value == "full"
    assert job.parallel.overlap_grad_reduce
    assert job.hardware.name == "a100-80gb"  # vTrain's "A100", see data/hardware/aliases.yaml
    assert job.inter_node_bandwidth_Bps == pytest.approx(200e9 / 8)  # Gbps per node
    assert job.intra_node_bandwidth_Bps == pytest.approx(300e9)  # GB/s per GPU


def test_vtrain_without_checkpointing_means_no_recompute():
    data = json.loads((EXAMPLES / "vtrain_gpt_8gpu.json").read_text())
    job = job_from_dict({**data, "use_checkpoint": False, "pipeline_scheduling": "GPipe"})
    assert job.training.recompute.value == "none"
    assert job.parallel.schedule.value == "gpipe"


def test_preset_with_overrides_changes_only_the_overridden_fields():
    base = load_job(EXAMPLES / "mtnlg_530b.yaml")
    data = {"model": {"preset": "mt-nlg-530b", "seq_length": 4096},
            "training": base.training.model_dump(mode="json"),
            "parallel": base.parallel.model_dump(mode="json"),
            "cluster": base.cluster.model_dump(mode="json")}
    job = job_from_dict(data)
    assert job.model.seq_length == 4096
    assert job.model.model_copy(update={"seq_length": 2048}) == base.model


def test_mtnlg_example_is_the_published_layout():
    job = load_job(EXAMPLES / "mtnlg_530b.yaml")
    assert (job.parallel.tp, job.dp, job.parallel.pp) == (8, 12, 35)
    assert job.cluster.num_gpus == 3360
    assert (job.training.global_batch_size, job.training.micro_batch_size) == (1920, 1)
    assert job.model.seq_length == 2048
    assert job.training.recompute.value == "full"
    assert job.parallel.schedule.value == "1f1b"


def test_job_files_are_validated_like_dicts(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model": "gpt3-175b", "training": {"global_batch_size": 7},
                                "parallel": {"tp": 8, "pp": 8}, "cluster": {"num_gpus": 128}}))
    with pytest.raises(ConfigError, match="global_batch_size=7"):
        load_job(path)
