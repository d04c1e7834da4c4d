"""Numbers in the docs are the ones the code prints today (issue 26, item 12).

The README's sample search output, docs/runs.md's out-of-memory example, case study 1's tables and
every mention of its optimum and Pareto front had drifted from what the commands print (31.93 s
and a 19-plan front where every run gives 30.02 s and 14). These tests regenerate them: a doc
that is not updated with a change of the simulator fails here. (Timings stay out: they depend on
the machine.)
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _bench(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def exhaustive():  # type: ignore[no-untyped-def]
    from vtrain_ml.planner.config import load_config
    from vtrain_ml.planner.exhaustive import run_exhaustive

    config = load_config(ROOT / "examples" / "case_study_1_mtnlg.yaml")
    return run_exhaustive(config.model_copy(update={"n_jobs": 1}))


def test_case_study_1_tables_are_the_generated_ones() -> None:
    tables = _bench("case_study_tables")
    assert tables.documented(tables.DOC.read_text()) == tables.tables(), (
        "docs/case_studies.md is stale: run PYTHONPATH=. python bench/case_study_tables.py --write")


def test_every_mention_of_case_study_1s_optimum_and_front_is_current(exhaustive) -> None:
    best, front = f"{exhaustive.best.exact.iteration_time_s:.2f}", len(exhaustive.pareto)
    patterns = {
        best: [r"[Oo]ptimum (\d+\.\d\d) s(?:/iteration)? at (?:\(tp, pp, dp\) = )?\(8, 21, 20\)",
               r"(\d+\.\d\d) s/iteration at \(tp, pp, dp\) = \(8, 21, 20\)"],
        str(front): [r"(\d+)-plan front", r"of the (\d+) exhaustive Pareto plans",
                     r"Pareto front:? \(?(\d+) plans",
                     r"all (\d+) (?:points|plans) of the (?:exhaustive )?(?:Pareto )?front"],
    }
    stale = []
    for doc in (d for d in DOCS if d.name != "case_study_4.md"):  # its fronts are its own searches'
        text = " ".join(doc.read_text().split())
        for expected, regexes in patterns.items():
            stale += [f"{doc.name}: '{m.group(0)}' (today {expected})" for rx in regexes
                      for m in re.finditer(rx, text) if m.group(1) != expected]
    assert not stale, "\n".join(stale)


def _block_after(doc: Path, marker: str) -> list[str]:
    """The lines of the fenced block of `doc` that holds `marker`."""
    text = doc.read_text()
    start = text.index(marker)
    block = text[text.rindex("```", 0, start) + 3:text.index("```", start)]
    return [line for line in block.splitlines()[1:] if line.strip() and line.strip() != "..."]


def test_the_readme_sample_search_output_is_what_the_search_prints(tmp_path, capsys) -> None:
    from vtrain_ml.cli.search import main

    assert main(["--config", str(ROOT / "examples" / "case_study_1_mtnlg.yaml"), "--study", "example",
                 "--storage", f"journal:///{tmp_path / 'example.journal'}"]) == 0
    printed = capsys.readouterr().out
    shown = _block_after(ROOT / "README.md", "recommended: tp=8 pp=21 dp=20")
    kinds = r"\s+\d+ |recommended:|  vs the baseline|surrogate vs exact|search for"
    results = [line for line in shown if re.match(kinds, line)]
    assert len(results) >= 5
    strategy = [line for line in printed.splitlines() if line.startswith("strategy")]
    for line in results:
        assert line in printed, (f"README shows a line the search no longer prints:\n{line}\n"
                                 f"(the search printed: {strategy})")
    search = next(line for line in shown if re.match(r"search( \(\w+\))?: ", line))
    assert search.rsplit(",", 1)[0] in printed, strategy  # all but the wall time


def test_the_runs_doc_out_of_memory_example_is_what_validate_prints(capsys) -> None:
    from vtrain_ml.cli.validate import main

    assert main([str(ROOT / "data" / "measured" / "h100" / "runs_fresh_process.csv")]) == 0
    printed = capsys.readouterr().out.splitlines()
    shown = _block_after(ROOT / "docs" / "runs.md", "out of memory (11 runs ran")[1:]  # after the command
    start = printed.index(shown[0])
    assert printed[start:start + len(shown)] == shown
