"""vTrain's Python API as a drop-in: a vTrain script changes its two import lines and keeps the
rest (vTrain's example.py: `max(result.values())/1000/1000` is the iteration time in ms)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator import ConfigError, load_job, simulate
from vtrain_ml.compat.vtrain import main, vTrain, vTrainConfig

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "vtrain_configs"
ROOT = Path(__file__).resolve().parents[2]
SMALL = {"num_gpus": 8, "tensor_parallel_size": 2, "data_parallel_size": 2,
         "pipeline_parallel_size": 2, "micro_batch_size": 2, "global_batch_size": 16,
         "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16, "max_length": 1024}


@pytest.fixture
def small_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL, indent="\t"))
    return path


def test_vtrains_example_script_runs_unchanged_but_for_the_imports(small_config):
    config = vTrainConfig.load_from_file(str(small_config))
    sim = vTrain(config)
    result, breakdown = sim()
    pred_iter_time = max(result.values()) / 1000 / 1000  # example.py, verbatim
    expected = simulate(load_job(small_config)).iteration_time_s
    assert pred_iter_time == pytest.approx(expected * 1e3, rel=1e-9)  # ns -> ms
    assert set(result) == {"Comm", "GPU0", "GPU1"}  # one stream per pipeline stage, and Comm
    assert set(breakdown) == set(result)
    for stream, parts in breakdown.items():
        assert set(parts) == {"compute", "comm"}
        assert parts["comm" if stream == "Comm" else "compute"] > 0


def test_the_gpu_streams_end_with_their_stage_and_compute_never_exceeds_the_end(small_config):
    sim = vTrain(vTrainConfig.load_from_file(small_config))
    result, breakdown = sim()
    for stream in ("GPU0", "GPU1"):
        assert 0 < breakdown[stream]["compute"] <= result[stream] * (1 + 1e-12)
    assert result["Comm"] <= max(result.values())
    assert sim.simulation is not None
    assert sim.simulation.num_microbatches == 4  # (16 // dp 2) // micro-batch 2


def test_show_graph_returns_the_timeline_figure(small_config):
    pytest.importorskip("matplotlib")
    sim = vTrain(vTrainConfig.load_from_file(small_config))
    with pytest.raises(ConfigError, match="call sim"):
        sim.show_graph()
    sim()
    figure = sim.show_graph()
    ax = figure.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["GPU0", "GPU1"]
    assert ax.get_xlim()[1] == pytest.approx(sim.simulation.iteration_time_s * 1e3)


def test_config_attributes_are_vtrains_with_derived_values():
    config = vTrainConfig(num_gpus=64, tensor_parallel_size=8, pipeline_parallel_size=1)
    assert config.data_parallel_size == 8
    assert config.micro_batch_size == 240  # 1920 // 8 when pipeline_parallel_size <= 1
    assert config.num_layers == 105 and config.vocab_size == 50257 and config.model_arch == "ShardedGptModel"
    assert "tensor_parallel_size=8," in repr(config) and "gpu_name='A100'" in repr(config)


def test_a_rejected_config_raises_vtrains_assertion_error():
    with pytest.raises(AssertionError, match="num_gpus must be equivalent"):
        vTrainConfig.load_from_file(CONFIGS / "case_study_1" / "config_mtnlg_16_10_105.json")
    with pytest.raises(TypeError):  # an unknown keyword, as vTrainConfig(**data) raises
        vTrainConfig(num_gpu=8)  # type: ignore[call-arg]


def test_save_and_load_round_trip(tmp_path, small_config):
    config = vTrainConfig.load_from_file(small_config)
    config.save_to_file(str(tmp_path / "saved.json"))
    again = vTrainConfig.load_from_file(tmp_path / "saved.json")
    assert again.to_dict() == config.to_dict()


def test_a_changed_attribute_is_what_the_next_call_simulates(small_config):
    config = vTrainConfig.load_from_file(small_config)
    first = max(vTrain(config)()[0].values())
    config.global_batch_size = 32
    second = max(vTrain(config)()[0].values())
    assert second > first


def test_cli_logs_the_predicted_iteration_time_as_vtrain_does(small_config, capsys):
    assert main(["-c", str(small_config)]) == 0
    out, err = capsys.readouterr()
    expected = simulate(load_job(small_config)).iteration_time_s * 1e3
    assert out == ""
    assert err.splitlines()[-1].endswith(f"(INFO) predicted iteration time: {expected:.3f} ms")


def test_cli_rejected_file_is_one_line_and_exit_2(capsys):
    code = main(["-c", str(CONFIGS / "case_study_1" / "config_mtnlg_16_10_105.json")])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert "vTrain rejects this file too" in err and "Traceback" not in err


def test_module_runs_as_python_dash_m(small_config):
    proc = subprocess.run([sys.executable, "-m", "vtrain_ml.compat.vtrain", "-c", str(small_config)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "predicted iteration time:" in proc.stderr and " ms" in proc.stderr
