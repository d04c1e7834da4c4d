"""The code's shape: small modules (issue 21). The layering and the absence of import circles are
checked by `lint-imports` (pyproject [tool.importlinter], run by `make lint`)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("simulator", "surrogate", "profiler", "vtrain_ml")
MAX_LINES = 500


def test_no_module_of_the_packages_exceeds_500_lines() -> None:
    too_long = {str(path.relative_to(ROOT)): n for package in PACKAGES
                for path in sorted((ROOT / package).rglob("*.py"))
                if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not too_long, f"split these by concern (STYLE.md: small modules with one job): {too_long}"


def test_every_simulator_stage_package_says_its_job_and_what_it_may_import() -> None:
    for init in sorted((ROOT / "simulator").glob("*/__init__.py")):
        if init.parent.name == "data":
            continue
        doc = init.read_text()
        assert doc.startswith('"""Stage'), f"{init}: the docstring names its stage"
        assert "May import:" in doc and "Exports:" in doc, f"{init}: say what it may import and exports"
