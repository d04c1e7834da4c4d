"""import-trace on a real H100 trace (tests/data/traces): structure, attribution, accumulation,
re-import, coexistence with op profiles, and one-line errors."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from simulator.costs.profile_format import read_profile
from simulator.costs.traced import TracedOptions
from simulator.job.loaders import load_job
from simulator.simulate import simulate_traced
from tests.profiler_tests.trace_builder import Builder, write
from vtrain_ml.cli.profile import main

DATA = Path(__file__).parents[1] / "data" / "traces"
TRACE = DATA / "mgpt_h6144_l8_s2048_mb1_ga2_none_flash.json.gz"
JOB = DATA / "mgpt_h6144_l8_s2048_mb1_ga2_none_flash.yaml"
OPS_PROFILE = Path(__file__).parents[2] / "data" / "profiles" / "h100-sxm-80gb-ops"


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("traced") / "h100"
    assert main(["import-trace", str(TRACE), "--job", str(JOB), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def raw_events() -> list[dict]:
    return json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]


def test_the_real_trace_is_cut_into_its_layers_and_micro_batches(imported):
    p = read_profile(imported)
    row = p.traces.iloc[0]
    assert (row["layers"], row["micro_batches"]) == (8, 2)
    phases = p.phases.set_index("phase")
    assert phases.loc["layer_forward", "instances"] == 16
    assert phases.loc["layer_backward", "instances"] == 16
    assert phases.loc["embedding_forward", "instances"] == 2
    assert phases.loc["optimizer", "instances"] == 1
    assert "layer_recompute" not in phases.index  # recompute none


def test_the_first_micro_batch_backward_has_no_gradient_to_accumulate_into(imported):
    """mgpt_ layers hold 12 parameter tensors (2 LayerNorms x weight and bias, QKV, output, MLP
    up and down x weight and bias); zero_grad(set_to_none=True) leaves the first micro-batch's
    AccumulateGrad nothing to add to, the second launches one add per tensor. The forward is
    the same in both."""
    phases = read_profile(imported).phases.set_index("phase")
    back, fwd = phases.loc["layer_backward"], phases.loc["layer_forward"]
    later = 2 * back["kernels"] - back["first_kernels"]  # two micro-batches: mean = (first + later) / 2
    assert later - back["first_kernels"] == 12
    assert back["first_kernel_s"] < back["kernel_s"]
    assert fwd["first_kernels"] == fwd["kernels"]
    assert pd.isna(phases.loc["optimizer", "first_kernels"])  # not a per-micro-batch phase


def test_a_profile_without_first_micro_batch_columns_still_loads(imported, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(imported, old)
    frame = pd.read_csv(old / "phases.csv").drop(columns=["first_kernels", "first_kernel_s",
                                                          "first_host_s"])
    frame.to_csv(old / "phases.csv", index=False)
    meta = json.loads((old / "metadata.json").read_text())
    meta["tables"]["phases.csv"]["sha256"] = hashlib.sha256((old / "phases.csv").read_bytes()).hexdigest()
    (old / "metadata.json").write_text(json.dumps(meta))
    assert read_profile(old).phases["first_kernels"].isna().all()
    result = simulate_traced(load_job(JOB), old, TracedOptions(profiled_host=True))
    assert result.iteration_time_s > 0


def test_every_kernel_is_in_one_phase_or_unattributed(imported, raw_events):
    p = read_profile(imported)
    gpu = [e for e in raw_events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    counted = (p.phases["kernels"] * p.phases["instances"]).sum()
    assert counted == len(gpu)
    seconds = (p.phases["kernel_s"] * p.phases["instances"]).sum()
    assert seconds == pytest.approx(sum(e["dur"] for e in gpu) * 1e-6, rel=1e-9)
    by_class = p.phase_kernels.merge(p.phases[["phase", "instances"]], on="phase")
    assert (by_class["kernels"] * by_class["instances"]).sum() == pytest.approx(len(gpu))


def test_the_traced_job_reproduces_its_own_trace(imported, raw_events):
    """Within 3% of the traced iteration: first CPU op to the last GPU event's end."""
    ops = [e for e in raw_events if e.get("cat") == "cpu_op"]
    gpu = [e for e in raw_events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    span = (max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in ops)) * 1e-6
    result = simulate_traced(load_job(JOB), imported, TracedOptions(profiled_host=True))
    assert result.iteration_time_s == pytest.approx(span, rel=0.03)
    assert result.profile_coverage["traced"] == 1.0


def test_importing_the_same_trace_again_changes_nothing(imported, tmp_path):
    out = tmp_path / "again"
    shutil.copytree(imported, out)
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    assert main(["import-trace", str(TRACE), "--job", str(JOB), "--out", str(out)]) == 0
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before


def test_traces_accumulate_and_extend_an_op_profile(tmp_path):
    out = tmp_path / "both"
    shutil.copytree(OPS_PROFILE, out)
    builder = Builder(layers=3)
    syn = write(builder.build(), tmp_path / "syn.json")
    job = tmp_path / "job.yaml"
    job.write_text("model: {num_layers: 3, hidden_size: 16, num_attention_heads: 2, vocab_size: 64,"
                   " seq_length: 8}\ntraining: {global_batch_size: 4, micro_batch_size: 2}\n"
                   "parallel: {tp: 1}\ncluster: {gpu: h100-sxm-80gb, num_gpus: 1}\n")
    assert main(["import-trace", str(TRACE), "--job", str(JOB), "--out", str(out)]) == 0
    assert main(["import-trace", str(syn), "--job", str(job), "--out", str(out), "--stack", "syn"]) == 0
    p = read_profile(out)
    assert p.meta.schema_version == 2
    assert p.ops is not None and len(p.ops) == 810  # the version-1 table is kept
    assert sorted(p.traces["stack"]) == ["pytorch", "syn"]


def test_a_version_1_profile_still_loads():
    p = read_profile(OPS_PROFILE)
    assert p.meta.schema_version == 1 and p.ops is not None and not p.traced


@pytest.mark.parametrize("args, words", [
    (["missing.json.gz", "--job", str(JOB)], "does not exist"),
    ([str(TRACE), "--job", "missing.yaml"], "missing.yaml"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, words):
    assert main(["import-trace", *args, "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1


def test_a_job_with_the_wrong_layer_count_is_refused(tmp_path, capsys):
    job = tmp_path / "wrong.yaml"
    job.write_text(JOB.read_text().replace("num_layers: 8", "num_layers: 5"))
    assert main(["import-trace", str(TRACE), "--job", str(job), "--out", str(tmp_path / "p")]) == 2
    assert "num_layers (5)" in capsys.readouterr().err
