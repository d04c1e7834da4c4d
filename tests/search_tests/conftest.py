"""Tiny search spaces (a 8-layer model on up to 16 GPUs) that simulate in milliseconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vtrain_ml.planner.config import SearchConfig, config_from_dict

TINY_MODEL = {"name": "tiny-gpt", "num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16,
              "vocab_size": 50257, "seq_length": 1024}


def tiny_dict(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": TINY_MODEL, "hardware": "a100-80gb", "max_gpus": 16, "global_batch": 32,
        "space": {"tp": [1, 2, 4, 8], "micro_batch_size": [1, 2], "recompute": ["none", "full"],
                  "schedule": ["1f1b"], "sequence_parallel": [False], "distributed_optimizer": [False, True],
                  "overlap_grad_reduce": [False]},
        "trials": 30, "verify_every": 10, "verify_top": 3, "initial_samples": 8, "seed": 0,
    }
    return {**base, **overrides}


def tiny_config(storage: Path | str = "memory", **overrides: Any) -> SearchConfig:
    """A tiny search; `storage` a URL or a SQLite file (default: in memory, for speed)."""
    overrides.setdefault("storage", storage if isinstance(storage, str) else f"sqlite:///{storage}")
    return config_from_dict(tiny_dict(**overrides))


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'search.db'}"
