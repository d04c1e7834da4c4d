"""bench/measure_runs.py without a GPU: arguments, the runs file it writes (readable by validate),
resume after a kill, error records, the stack of a job; the per-job child itself on CPU (slow)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.accuracy_tests.conftest import h100_job
from vtrain_ml.accuracy.runs import read_runs

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "measure_runs.py"
OK = {"status": "ok", "stack": "mgpt", "iteration_ms": 101.234, "iteration_ms_min": 100.0,
      "iteration_ms_max": 103.5, "peak_allocated_GiB": 3.25, "peak_reserved_GiB": 3.5, "torch": "2.11.0"}
OOM = {"status": "oom", "stack": "llama", "where": "warm-up"}
ERROR = {"status": "error", "error": "RuntimeError: boom"}


@pytest.fixture(scope="module")
def script() -> Any:
    spec = importlib.util.spec_from_file_location("measure_runs", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["measure_runs"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    folder = tmp_path / "jobs"
    folder.mkdir()
    for name in ("mgpt_a", "llama_b", "mgpt_c"):
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(h100_job()))
    (folder / "notes.txt").write_text("not a job")
    return folder


class FakeChild:
    """Stands for the per-job process: canned results by job name, and a record of the calls."""

    def __init__(self, results: dict[str, dict[str, Any]]) -> None:
        self.results, self.calls = results, []

    def __call__(self, path: Path, iters: int, device: str, timeout_s: float) -> dict[str, Any]:
        self.calls.append(path.stem)
        outcome = self.results[path.stem]
        if isinstance(outcome, BaseException):
            raise outcome
        return {**outcome, "wall_s": 1.0}


def test_the_script_imports_none_of_this_projects_packages():
    tree = ast.parse(SCRIPT.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"simulator", "vtrain_ml", "profiler", "surrogate", "pydantic"}


def test_it_writes_a_runs_file_that_validate_reads(script, jobs, tmp_path):
    out = jobs / "runs.csv"
    child = FakeChild({"mgpt_a": OK, "llama_b": OOM, "mgpt_c": ERROR})
    meta = script.measure_all(jobs, out, 6, "cuda", 60.0, None, False, child)
    assert child.calls == ["llama_b", "mgpt_a", "mgpt_c"]
    assert out.read_text().splitlines() == [
        "job,iteration_ms,iteration_ms_min,iteration_ms_max,peak_memory_GiB,reserved_GiB,oom,tag",
        "llama_b.yaml,,,,,,true,llama",
        "mgpt_a.yaml,101.23,100.00,103.50,3.250,3.500,,mgpt",
    ]
    assert meta["attempts"]["mgpt_c.yaml"]["status"] == "error"
    assert meta["environment"]["torch"] == "2.11.0"
    runs = read_runs([out])
    assert runs.skipped == 0 and [r.oom for r in runs.runs] == [True, False]
    assert runs.runs[1].iteration_s == pytest.approx(0.10123)
    assert runs.runs[1].peak_reserved_bytes == pytest.approx(3.5 * 2**30)


def test_job_paths_are_relative_to_the_runs_file(script, jobs, tmp_path):
    out = tmp_path / "results" / "runs.csv"
    script.measure_all(jobs, out, 6, "cuda", 60.0, None, False, FakeChild({"mgpt_a": OK, "llama_b": OOM,
                                                                            "mgpt_c": OK}))
    assert "../jobs/mgpt_a.yaml" in out.read_text()
    assert len(read_runs([out]).runs) == 3


def test_a_killed_run_keeps_what_it_measured_and_resumes_with_the_rest(script, jobs):
    out = jobs / "runs.csv"
    killed = FakeChild({"llama_b": OOM, "mgpt_a": KeyboardInterrupt()})
    with pytest.raises(KeyboardInterrupt):
        script.measure_all(jobs, out, 6, "cuda", 60.0, None, False, killed)
    assert "llama_b.yaml" in out.read_text() and "mgpt_a" not in out.read_text()
    assert not list(jobs.glob(".*.tmp"))
    again = FakeChild({"mgpt_a": OK, "mgpt_c": OK})
    script.measure_all(jobs, out, 6, "cuda", 60.0, None, False, again)
    assert again.calls == ["mgpt_a", "mgpt_c"]  # llama_b was not measured twice
    assert [r.job_path for r in read_runs([out]).runs] == ["llama_b.yaml", "mgpt_a.yaml", "mgpt_c.yaml"]


def test_a_job_that_failed_is_retried_only_when_asked(script, jobs):
    out = jobs / "runs.csv"
    script.measure_all(jobs, out, 6, "cuda", 60.0, None, False,
                       FakeChild({"mgpt_a": OK, "llama_b": OK, "mgpt_c": ERROR}))
    untouched = FakeChild({})
    script.measure_all(jobs, out, 6, "cuda", 60.0, None, False, untouched)
    assert untouched.calls == []
    retried = FakeChild({"mgpt_c": OK})
    script.measure_all(jobs, out, 6, "cuda", 60.0, None, True, retried)
    assert retried.calls == ["mgpt_c"] and len(read_runs([out]).runs) == 3


def test_a_spent_budget_starts_no_new_job(script, jobs, capsys):
    child = FakeChild({})
    script.measure_all(jobs, jobs / "runs.csv", 6, "cuda", 60.0, -1.0, False, child)
    assert child.calls == [] and "rerun the same command to continue" in capsys.readouterr().err


def test_the_stack_is_the_file_prefix_or_follows_from_the_model(script, tmp_path):
    llama_like = h100_job(model={"norm": "rmsnorm", "gated_mlp": True})
    assert script.stack_of(tmp_path / "gpt2_x.yaml", h100_job()) == "gpt2"
    assert script.stack_of(tmp_path / "mgpt_x.yaml", llama_like) == "mgpt"
    assert script.stack_of(tmp_path / "big.yaml", llama_like) == "llama"
    assert script.stack_of(tmp_path / "big.yaml", h100_job()) == "mgpt"


@pytest.mark.parametrize(("job", "words"), [
    (h100_job(parallel={"tp": 2}), "one GPU"),
    (h100_job(cluster={"num_gpus": 8}), "one GPU"),
    ({**h100_job(), "model": "gpt3-175b"}, "full spec"),
    (h100_job(training={"recompute": "selective"}), "selective"),
])
def test_jobs_it_cannot_measure_are_named_before_any_work(script, job, words):
    assert words in script.check_single_gpu(job)


def test_a_single_gpu_job_can_be_measured(script):
    assert script.check_single_gpu(h100_job()) is None


@pytest.mark.parametrize(("argv", "words"), [
    ([], "give --jobs FOLDER and --out RUNS.csv"),
    (["--jobs", "/nonexistent", "--out", "r.csv"], "is not a folder"),
    (["--jobs", "EMPTY", "--out", "r.csv"], "no *.yaml job file"),
    (["--jobs", "EMPTY", "--out", "r.csv", "--iters", "0"], "at least 1"),
])
def test_bad_arguments_are_one_line_exit_2(script, tmp_path, capsys, argv, words):
    argv = [str(tmp_path) if a == "EMPTY" else a for a in argv]
    assert script.main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_child_measures_a_tiny_job_on_cpu_in_its_own_process(script, tmp_path):
    pytest.importorskip("torch")
    job = h100_job(model={"num_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 32,
                          "vocab_size": 100})
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "mgpt_tiny.yaml").write_text(yaml.safe_dump(job))
    (tmp_path / "jobs" / "mgpt_tp2.yaml").write_text(yaml.safe_dump(h100_job(parallel={"tp": 2})))
    out = tmp_path / "runs.csv"
    assert script.main(["--jobs", str(tmp_path / "jobs"), "--out", str(out), "--device", "cpu",
                        "--iters", "1"]) == 0
    (run,) = read_runs([out]).runs
    assert run.tag == "mgpt" and run.iteration_s > 0 and run.peak_allocated_bytes is None
    meta = script.read_meta(out)
    assert meta["attempts"]["jobs/mgpt_tp2.yaml"]["status"] == "error"
    assert meta["attempts"]["jobs/mgpt_tiny.yaml"]["parameters"] > 0
