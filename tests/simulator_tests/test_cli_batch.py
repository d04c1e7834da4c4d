"""Many configs in one call: `python -m vtrain_ml.simulate DIR_OR_FILES... --csv out.csv [--json]`
simulates every file in one process, one row per file with its result or its error, never stops
on a bad file, and exits 0 when every row simulated (or was rejected as vTrain rejects it), 3 when
some rows failed, 2 when none simulated."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from simulator import load_job, simulate
from tests.conftest import job_dict
from vtrain_ml.cli.simulate import main

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "vtrain_configs"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_a_directory_of_vtrain_configs_gives_one_row_per_file(tmp_path, capsys):
    out_csv = tmp_path / "out.csv"
    code, out, err = run_cli(capsys, str(CONFIGS / "case_study_1"), "--csv", str(out_csv))
    assert code == 0 and err == ""
    rows = read_csv(out_csv)
    files = sorted((CONFIGS / "case_study_1").glob("*.json"))
    assert [r["path"] for r in rows] == [str(f) for f in files]
    by_name = {Path(r["path"]).name: r for r in rows}
    # num_gpus 3360 != 16 * 10 * 105: vTrain rejects it; 8 * 12 * 35 = 3360 simulates
    assert by_name["config_mtnlg_16_10_105.json"]["status"] == "rejected"
    assert "vTrain rejects this file too" in by_name["config_mtnlg_16_10_105.json"]["error"]
    ok = by_name["config_test_mtnlg.json"]
    assert ok["status"] == "ok" and (ok["tp"], ok["pp"], ok["dp"]) == ("8", "35", "12")
    expected = simulate(load_job(files[-1]))
    assert float(ok["iteration_time_s"]) == pytest.approx(expected.iteration_time_s, rel=1e-12)
    tokens = expected.job["global_batch_size"] * expected.job["seq_length"]
    assert float(ok["usd_per_million_tokens"]) == pytest.approx(
        float(ok["cost_per_iteration_usd"]) / tokens * 1e6, rel=1e-12)
    assert f"{len(files)} jobs:" in out and f"rows written to {out_csv}" in out


def test_bad_files_get_their_error_in_their_row_and_the_batch_goes_on(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(job_dict()))
    (tmp_path / "comma.json").write_text('{"num_gpus": 8,}')
    (tmp_path / "bad_layout.yaml").write_text(yaml.safe_dump(job_dict(model={"num_layers": 9})))
    (tmp_path / "notes.txt").write_text("not a job, not listed")
    code, out, _ = run_cli(capsys, str(tmp_path), str(tmp_path / "missing.json"), "--json")
    assert code == 3  # the batch ran, some rows failed (issue 26)
    rows = {Path(r["path"]).name: r for r in json.loads(out)}
    assert set(rows) == {"good.yaml", "comma.json", "bad_layout.yaml", "missing.json"}
    assert rows["good.yaml"]["status"] == "ok" and rows["good.yaml"]["iteration_time_s"] > 0
    assert rows["comma.json"]["status"] == "error" and "trailing comma" in rows["comma.json"]["error"]
    assert "num_layers=9" in rows["bad_layout.yaml"]["error"]
    assert "does not exist" in rows["missing.json"]["error"]


def test_exit_2_with_one_line_when_no_file_simulated(tmp_path, capsys):
    (tmp_path / "a.json").write_text("[]")
    (tmp_path / "b.json").write_text(
        '{"num_gpus": 8, "tensor_parallel_size": 3, "pipeline_parallel_size": 1}')
    code, out, err = run_cli(capsys, str(tmp_path))
    assert code == 2
    assert err.startswith("error: none of the 2 jobs could be simulated") and err.count("\n") == 1
    assert "2 jobs: 0 simulated, 1 rejected (vTrain rejects them too), 1 failed" in out


def test_an_empty_directory_is_one_line(tmp_path, capsys):
    code, out, err = run_cli(capsys, str(tmp_path))
    assert code == 2 and out == "" and err.count("\n") == 1 and "no job files" in err


def test_the_csv_is_written_atomically_and_a_directory_is_refused(tmp_path, capsys):
    code, _, err = run_cli(capsys, str(CONFIGS / "validation" / "multi"), "--csv", str(tmp_path))
    assert code == 2 and "--csv" in err and "is a directory" in err
    target = tmp_path / "sub" / "rows.csv"
    assert run_cli(capsys, str(CONFIGS / "validation" / "multi"), "--csv", str(target))[0] == 0
    assert [p.name for p in target.parent.iterdir()] == ["rows.csv"]


def test_trace_needs_a_single_job(capsys, tmp_path):
    code, _, err = run_cli(capsys, str(CONFIGS / "case_study_1"), "--trace", str(tmp_path / "t.json"))
    assert code == 2 and "--trace needs one job" in err and err.count("\n") == 1


def test_vtrains_micro_batch_rule_is_noted_in_the_row(capsys):
    path = CONFIGS / "validation" / "multi" / "config_val_18B_16_16_1_2.json"  # pp = 1
    code, out, _ = run_cli(capsys, str(path), str(CONFIGS / "config_example.json"), "--json")
    rows = json.loads(out)
    assert code == 0
    assert "micro_batch_size set to global_batch_size // data_parallel_size" in rows[0]["notes"]
    assert rows[1]["notes"] == ""


# --- issue 26, item 2: --csv with one job, and failed rows in the exit code --------------------

def test_csv_with_one_job_writes_its_row_beside_the_report(tmp_path, capsys):
    job = tmp_path / "one.yaml"
    job.write_text(yaml.safe_dump(job_dict()))
    out_csv = tmp_path / "one.csv"
    code, out, _ = run_cli(capsys, str(job), "--csv", str(out_csv))
    assert code == 0 and "iteration" in out and f"one row written to {out_csv}" in out
    rows = read_csv(out_csv)
    assert len(rows) == 1 and rows[0]["path"] == str(job) and rows[0]["status"] == "ok"
    expected = simulate(load_job(job)).iteration_time_s
    assert float(rows[0]["iteration_time_s"]) == pytest.approx(expected, rel=1e-12)


def test_a_batch_with_failed_rows_exits_3_and_says_how_many(tmp_path, capsys):
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(job_dict()))
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(job_dict(model={"num_layers": 9})))
    out_csv = tmp_path / "rows.csv"
    code, _, err = run_cli(capsys, str(tmp_path), "--csv", str(out_csv))
    assert code == 3
    assert "1 of 2 jobs failed (exit code 3)" in err and "bad.yaml" in err
    assert {r["status"] for r in read_csv(out_csv)} == {"ok", "error"}


def test_the_exit_codes_are_documented_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit codes: 0 every job simulated" in text and "3 a batch ran but some rows failed" in text


def test_the_fused_loss_shows_in_the_report_the_json_and_the_csv(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`training.cross_entropy_fusion` changes only memory; a user comparing variants sees which
    loss each row ran: the report's layout line, the JSON summary and the batch CSV's column
    (`none` for the unfused loss; the JSON of an unfused job keeps its old keys)."""
    job = {"model": {"preset": "llama-3-8b", "seq_length": 4096},
           "training": {"global_batch_size": 64, "micro_batch_size": 1, "precision": "bf16",
                        "cross_entropy_fusion": "te"},
           "parallel": {"tp": 2, "pp": 1, "sequence_parallel": True},
           "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8}}
    fused, plain = tmp_path / "fused.json", tmp_path / "plain.json"
    fused.write_text(json.dumps(job))
    plain.write_text(json.dumps({**job, "training": {**job["training"], "cross_entropy_fusion": "none"}}))
    assert main([str(fused)]) == 0
    assert "te fused cross-entropy" in capsys.readouterr().out
    assert main([str(fused), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["job"]["cross_entropy_fusion"] == "te"
    assert main([str(plain), "--json"]) == 0
    assert "cross_entropy_fusion" not in json.loads(capsys.readouterr().out)["job"]
    out = tmp_path / "rows.csv"
    assert main([str(fused), str(plain), "--csv", str(out)]) == 0
    rows = {Path(r["path"]).name: r["cross_entropy_fusion"] for r in read_csv(out)}
    assert rows == {"fused.json": "te", "plain.json": "none"}
