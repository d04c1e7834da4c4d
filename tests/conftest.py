"""Shared tiny fixtures: small, fast jobs built from dicts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from simulator import Job, job_from_dict

_BASE: dict[str, dict[str, Any]] = {
    "model": {"name": "tiny-gpt", "num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16,
              "vocab_size": 50257, "seq_length": 1024},
    "training": {"global_batch_size": 16, "micro_batch_size": 1, "precision": "fp16"},
    "parallel": {"tp": 2, "pp": 2, "dp": 2},
    "cluster": {"gpu": "a100-80gb", "num_gpus": 8},
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="rewrite golden result files (tests/*/golden/*.json) from the current code")


def job_dict(**sections: dict[str, Any]) -> dict[str, Any]:
    """The native job dict of `make_job` (e.g. to write a job file); same overrides."""
    base = copy.deepcopy(_BASE)
    for name, fields in sections.items():
        base[name] = {**base[name], **fields}
    return base


def make_job(**sections: dict[str, Any]) -> Job:
    """A small GPT job on 8 A100s; each keyword overrides fields of one section."""
    return job_from_dict(job_dict(**sections))


@pytest.fixture
def small_job() -> Job:
    return make_job()
