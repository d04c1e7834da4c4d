"""Tiny spaces, samples and models shared by the surrogate tests (built once per session)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.job.catalog import resolve_hardware
from surrogate.generate import GenerateConfig, generate
from surrogate.space import Space, space_from_dict

TINY_SPACE: dict[str, Any] = {
    "name": "tiny",
    "hardware": ["a100-80gb"],
    "models": {"families": ["gpt", "llama"], "parameters": {"min": 1.0e8, "max": 3.0e9},
               "aspect_ratio": {"min": 32, "max": 128}, "head_dim": [64],
               "presets": ["megatron-gpt-1.7b"], "preset_fraction": 0.1},
    "seq_length": [512, 1024],
    "num_gpus": {"min": 8, "max": 64},
    "tp": [1, 2, 4, 8],
    "pp_max": 8,
    "virtual_stages": [2],
    "schedule": ["1f1b", "interleaved_1f1b", "gpipe"],
    "micro_batch_size": [1, 2],
    "num_microbatches": {"min": 1, "max": 32},
    "global_batch_tokens": {"min": 16384, "max": 1048576},
}


def tiny_space() -> Space:
    return space_from_dict(TINY_SPACE)


def tiny_config(n: int, seed: int = 0, chunk_size: int = 40) -> GenerateConfig:
    spec = resolve_hardware("a100-80gb")
    return GenerateConfig(tiny_space(), {spec.name: spec}, n, seed=seed, chunk_size=chunk_size, jobs=1)


@pytest.fixture(scope="session")
def tiny_space_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("space") / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY_SPACE))
    return path


@pytest.fixture(scope="session")
def tiny_samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("samples") / "tiny"
    generate(tiny_config(400), out, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny_samples: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from surrogate.workflow import TrainConfig, train

    out = tmp_path_factory.mktemp("models") / "tiny"
    # closed_form_tolerance 0: both boosters, so that every tree path (forest walk, saved files)
    # is exercised; the default, which leaves the exact memory closed form without trees, is
    # tested in test_model.py
    return train(tiny_samples, out, TrainConfig(seed=0, n_estimators=300, test_fraction=0.2,
                                                xgb_params={"max_depth": 6, "n_jobs": 1,
                                                            "closed_form_tolerance": 0.0}))
