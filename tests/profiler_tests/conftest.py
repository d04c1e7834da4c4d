"""Tiny CPU profiles, built once per session (a second or two each)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
TINY_LLAMA = HERE / "tiny_llama.yaml"
TINY_GPT = HERE / "tiny_gpt.yaml"
FAST = ["--repeats", "3", "--warmup", "1", "--budget-s", "0"]


def profile_args(out: Path, *extra: str, models: Path = TINY_LLAMA) -> list[str]:
    return ["ops", "--device", "cpu", "--models", str(models), "--tp", "1,2", "--micro-batch", "1",
            "--max-adam-params", "65536", "--out", str(out), "--quiet", *FAST, *extra]


@pytest.fixture(scope="session")
def tiny_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vtrain_ml.cli.profile import main

    out = tmp_path_factory.mktemp("profiles") / "tiny-cpu"
    assert main(profile_args(out)) == 0
    return out
