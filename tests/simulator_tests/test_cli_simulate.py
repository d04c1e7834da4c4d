"""`python -m vtrain_ml.simulate` as a Megatron-LM user expects (issue 15, Simulate): layout
overrides on the command line, several jobs or values compared in one table, a job that does not
fit said first with the smallest change that fits, a memory table whose rows sum, a trace that
holds every task and ends at the iteration time, costs readable for small jobs, and one-line
errors for bad paths and values."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator import job_from_dict, simulate
from simulator.report.render import usd
from tests.conftest import job_dict
from vtrain_ml.cli.simulate import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write_job(tmp_path: Path, name: str = "job.yaml", **sections: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(job_dict(**sections)))
    return path


def assert_one_line_error(code: int, err: str, *expected: str) -> None:
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, f"{text!r} not in {err!r}"


# --- layout overrides -----------------------------------------------------------------------

def test_layout_overrides_change_the_job_and_rederive_dp(tmp_path, capsys):
    path = write_job(tmp_path)  # tp 2, pp 2, dp 2 on 8 GPUs
    code, out, _ = run_cli(capsys, str(path), "--tp", "4", "--pp", "1", "--micro-batch", "2",
                           "--recompute", "selective", "--sequence-parallel", "--distributed-optimizer",
                           "--json")
    assert code == 0
    job = json.loads(out)["job"]
    assert (job["tp"], job["pp"], job["dp"], job["num_gpus"]) == (4, 1, 2, 8)  # dp = 8 / (4 * 1)
    assert job["micro_batch_size"] == 2 and job["recompute"] == "selective"
    assert job["sequence_parallel"] and job["distributed_optimizer"]


def test_overriding_dp_sets_the_gpu_count(tmp_path, capsys):
    code, out, _ = run_cli(capsys, str(write_job(tmp_path)), "--dp", "4", "--json")
    assert code == 0
    assert json.loads(out)["job"]["num_gpus"] == 16  # tp 2 * pp 2 * dp 4


def test_an_invalid_override_is_one_line_naming_the_flag(tmp_path, capsys):
    path = write_job(tmp_path)
    assert_one_line_error(*run_cli(capsys, str(path), "--tp", "3")[::2], "--tp 3",
                          "tensor_parallel_size=3", "num_attention_heads=16")
    assert_one_line_error(*run_cli(capsys, str(path), "--tp", "0")[::2], "--tp 0", "positive")
    assert_one_line_error(*run_cli(capsys, str(path), "--pp", "two")[::2], "--pp two", "integer")
    assert_one_line_error(*run_cli(capsys, str(path), "--recompute", "most")[::2], "training.recompute")
    assert_one_line_error(*run_cli(capsys, str(path), "--distributed-optimizer", "maybe")[::2],
                          "--distributed-optimizer maybe", "on, off or both")



def test_a_switch_before_the_job_file_does_not_take_it_as_its_value(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "--sequence-parallel", str(write_job(tmp_path)), "--json")
    assert code == 0 and json.loads(out)["job"]["sequence_parallel"] is True


@pytest.mark.parametrize("price", ["-3", "-0.01", "nan"])
def test_negative_price_is_refused(price, tmp_path, capsys):
    code, out, err = run_cli(capsys, str(write_job(tmp_path)), f"--price={price}")
    assert out == ""
    assert_one_line_error(code, err, f"--price {price}")


def test_compared_values_give_one_row_each_with_the_same_numbers_as_alone(tmp_path, capsys):
    path = write_job(tmp_path)
    code, out, _ = run_cli(capsys, str(path), "--tp", "1,2", "--recompute", "none,full", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [(r["tp"], r["recompute"]) for r in rows] == [(1, "none"), (1, "full"), (2, "none"), (2, "full")]
    for row in rows:
        alone = simulate(job_from_dict(job_dict(parallel={"tp": row["tp"], "pp": 2, "dp": None},
                                                training={"recompute": row["recompute"]})))
        assert row["iteration_time_s"] == pytest.approx(alone.iteration_time_s, rel=1e-12)
        assert row["dp"] == 8 // (row["tp"] * 2)


def test_a_switch_given_both_compares_with_and_without(tmp_path, capsys):
    code, out, _ = run_cli(capsys, str(write_job(tmp_path)), "--distributed-optimizer", "both", "--json")
    rows = json.loads(out)
    assert code == 0
    assert [r["variant"] for r in rows] == ["--no-distributed-optimizer", "--distributed-optimizer"]
    assert rows[1]["peak_memory_GiB"] < rows[0]["peak_memory_GiB"]  # optimizer states sharded over dp


def test_gpu_types_are_compared_side_by_side(tmp_path, capsys):
    code, out, _ = run_cli(capsys, str(write_job(tmp_path)), "--hardware", "a100-80gb,h100-sxm-80gb",
                           "--json")
    rows = json.loads(out)
    assert code == 0 and [r["variant"] for r in rows] == ["--hardware a100-80gb", "--hardware h100-sxm-80gb"]
    assert rows[1]["iteration_time_s"] < rows[0]["iteration_time_s"]


def test_virtual_stages_imply_the_interleaved_schedule(tmp_path, capsys):
    code, out, _ = run_cli(capsys, str(write_job(tmp_path)), "--virtual-stages", "2", "--json")
    job = json.loads(out)["job"]
    assert code == 0 and job["schedule"] == "interleaved_1f1b" and job["virtual_stages"] == 2


def test_several_job_files_are_compared_in_one_table(tmp_path, capsys):
    a = write_job(tmp_path, "a.yaml")
    b = write_job(tmp_path, "b.yaml", parallel={"schedule": "gpipe"})
    code, out, _ = run_cli(capsys, str(a), str(b))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["job", "gpus", "tp", "pp"]
    assert any(line.startswith(str(a)) for line in lines) and any(line.startswith(str(b)) for line in lines)
    assert "2 jobs: 2 simulated" in out


# --- a job that does not fit ------------------------------------------------------------------

BIG = {"model": {"num_layers": 16, "hidden_size": 8192, "num_attention_heads": 64},
       "training": {"global_batch_size": 16, "micro_batch_size": 4},
       "parallel": {"tp": 2, "pp": 1, "dp": 4}}


def test_a_job_that_does_not_fit_says_so_first_with_the_smallest_change_that_fits(tmp_path, capsys):
    path = write_job(tmp_path, **BIG)
    code, out, err = run_cli(capsys, str(path))
    assert code == 0 and err == ""
    first, second = out.splitlines()[:2]
    assert first.startswith("DOES NOT FIT in GPU memory: stage 0 needs ")
    assert re.search(r"over by \d+\.\d GiB \(\+\d+%\)", first)
    flag = r"--[a-z-]+(?: [a-z0-9_]+)?"
    match = re.match(rf"\s+smallest change that fits: ({flag}(?: {flag})*) \(peak", second)
    assert match, second
    flags = match.group(1).split()
    code, out, _ = run_cli(capsys, str(path), *flags, "--json")  # the advice, taken
    assert code == 0 and json.loads(out)["fits_in_memory"] is True


def test_the_advice_is_in_the_json_too(tmp_path, capsys):
    code, out, _ = run_cli(capsys, str(write_job(tmp_path, **BIG)), "--json")
    data = json.loads(out)
    assert code == 0 and data["fits_in_memory"] is False
    assert data["fit_advice"][0].startswith("smallest change that fits: ")


def test_a_job_that_fits_has_no_verdict_line(tmp_path, capsys):
    code, out, _ = run_cli(capsys, str(write_job(tmp_path)))
    assert code == 0 and "DOES NOT FIT" not in out and "smallest change" not in out


# --- memory table -------------------------------------------------------------------------------

def _memory_rows(out: str) -> tuple[list[str], list[list[float]]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("stage "))
    header = lines[start].split()
    rows = []
    for line in lines[start + 1:]:
        parts = line.split()
        if not parts or not parts[0].isdigit():
            continue
        rows.append([float(x) for x in parts[: len(header) - 2]])  # up to reserved
    return header, rows


def test_memory_rows_sum_to_their_total_with_the_reserved_column(tmp_path, capsys):
    _, out, _ = run_cli(capsys, str(write_job(tmp_path)))
    header, rows = _memory_rows(out)
    assert header[-4:] == ["total", "reserved", "busy", "idle"]
    assert len(rows) == 2
    for row in rows:
        terms, total, reserved = row[1:-2], row[-2], row[-1]
        allocated = total - row[header.index("context")]
        assert reserved >= allocated - 0.05  # the allocator reserves at least what it allocated
        assert sum(terms) == pytest.approx(total, abs=0.05 * len(terms))


def test_a_long_pipeline_marks_the_stages_it_leaves_out(tmp_path, capsys):
    path = write_job(tmp_path, model={"num_layers": 16}, parallel={"tp": 1, "pp": 16, "dp": 1},
                     cluster={"num_gpus": 16})
    _, out, _ = run_cli(capsys, str(path))
    _, rows = _memory_rows(out)
    assert [int(r[0]) for r in rows] == [0, 1, 2, 3, 12, 13, 14, 15]
    assert "... stages 4-11 not shown (8 stages)" in out
    assert out.count("<- peak") == 1


# --- trace --------------------------------------------------------------------------------------

BUCKETED_ZERO = {"parallel": {"overlap_grad_reduce": True, "distributed_optimizer": True}}


@pytest.mark.parametrize("extra", [{}, BUCKETED_ZERO])
def test_trace_holds_every_task_and_ends_at_the_iteration_time(extra, tmp_path, capsys):
    sections = {"training": {"recompute": "full"}, **extra}
    path = write_job(tmp_path, **sections)  # tp 2, pp 2, dp 2, tied embeddings
    trace = tmp_path / "iter.json"
    code, out, _ = run_cli(capsys, str(path), "--trace", str(trace), "--json")
    assert code == 0
    result = json.loads(out)
    spans = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    names = {e["name"] for e in spans}
    assert {"forward compute", "recompute", "backward compute", "tp all-reduce", "recv activation",
            "recv gradient", "embedding gradient all-reduce (first and last stage)",
            "optimizer step (Adam)"} <= names
    assert any(n.startswith("dp ") for n in names)
    end = max(e["ts"] + e["dur"] for e in spans)
    assert end == pytest.approx(result["iteration_time_s"] * 1e6, rel=1e-9)
    forward = next(e for e in spans if e["name"] == "forward compute")
    assert forward["args"]["flops"] > 0 and forward["args"]["hbm_bytes"] > 0
    assert "qkv (" in forward["args"]["layer_gemms (batch, M, N, K)"]
    assert next(e for e in spans if e["name"] == "tp all-reduce")["args"]["bytes_per_gpu"] > 0
    assert next(e for e in spans if e["name"] == "recv activation")["args"]["bytes"] > 0
    assert next(e for e in spans if e["name"] == "optimizer step (Adam)")["args"]["parameters"] > 0


def test_each_task_is_split_into_parts_that_fill_it(tmp_path, capsys):
    path = write_job(tmp_path, training={"recompute": "full"})
    trace = tmp_path / "iter.json"
    run_cli(capsys, str(path), "--trace", str(trace))
    spans = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    tasks = [e for e in spans if e["tid"] == 0]
    parts = [e for e in spans if e["tid"] == 2]
    for task in tasks:
        inside = [p for p in parts if p["pid"] == task["pid"] and task["ts"] - 1e-6 <= p["ts"]
                  and p["ts"] + p["dur"] <= task["ts"] + task["dur"] + 1e-6]
        assert sum(p["dur"] for p in inside) == pytest.approx(task["dur"], rel=1e-9)


def test_trace_into_a_directory_is_one_line(tmp_path, capsys):
    code, out, err = run_cli(capsys, str(write_job(tmp_path)), "--trace", str(tmp_path))
    assert out == ""
    assert_one_line_error(code, err, "--trace", "is a directory", "iteration.json")


def test_trace_into_an_unwritable_place_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run_cli(capsys, str(write_job(tmp_path)), "--trace", str(blocker / "iter.json"))
    assert_one_line_error(code, err, "cannot write --trace")


# --- money -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("amount", "text"), [
    (0.0012345, "$0.00123"), (0.04567, "$0.0457"), (0.5, "$0.50"), (12.345, "$12.35"),
    (1234.4, "$1,234"), (0.0, "$0.00"),
])
def test_money_keeps_three_significant_digits_below_ten_cents(amount, text):
    assert usd(amount) == text


def test_a_small_jobs_cost_is_not_rounded_to_zero(tmp_path, capsys):
    path = write_job(tmp_path, cluster={"price_per_gpu_hour_usd": 2.0})
    code, out, _ = run_cli(capsys, str(path))
    line = next(line for line in out.splitlines() if "cost per iteration" in line)
    cost = line.split()[3]  # "cost per iteration $X ($Y per million tokens)"
    assert code == 0 and cost != "$0.00"
    assert re.fullmatch(r"\$0\.0*[1-9]\d\d", cost), cost  # three significant digits
