"""Generation: Parquet chunks, atomic writes, resume after a kill with identical output."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import surrogate.generate as gen
from simulator.errors import ConfigError
from surrogate.dataset import read_manifest, read_samples
from surrogate.generate import Backend, generate
from tests.surrogate_tests.conftest import tiny_config


def _chunks(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("chunk-*.parquet"))}


def test_generation_resumes_after_interruption_with_identical_output(tmp_path, monkeypatch) -> None:
    config = tiny_config(120, chunk_size=30)
    whole = tmp_path / "whole"
    generate(config, whole, progress=False)

    calls = {"n": 0}
    real = gen.simulate_records

    def dies_on_third_chunk(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(gen, "simulate_records", dies_on_third_chunk)
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        generate(config, cut, progress=False)
    assert len(_chunks(cut)) == 2
    assert not list(cut.glob("*.tmp")) and not list(cut.glob(".*"))
    monkeypatch.setattr(gen, "simulate_records", real)
    report = generate(config, cut, resume=True, progress=False)
    assert report.simulated == 60
    assert _chunks(cut) == _chunks(whole)
    assert read_manifest(cut) == read_manifest(whole)
    pd.testing.assert_frame_equal(read_samples(cut), read_samples(whole))


def test_samples_are_in_sample_order_with_all_targets(tiny_samples) -> None:
    df = read_samples(tiny_samples)
    assert list(df["sample_index"]) == list(range(400))
    assert (df["iteration_time_s"] > 0).all() and (df["peak_memory_bytes"] > 0).all()
    assert read_manifest(tiny_samples)["sampling"]["accepted"] == 400


def test_existing_folder_needs_resume(tiny_samples) -> None:
    with pytest.raises(ConfigError, match="--resume"):
        generate(tiny_config(400), tiny_samples, progress=False)


def test_resume_with_other_arguments_is_refused(tiny_samples) -> None:
    with pytest.raises(ConfigError, match="seed differs"):
        generate(tiny_config(400, seed=5), tiny_samples, resume=True, progress=False)


@pytest.mark.parametrize("backend,package", [(Backend.DASK, "dask"), (Backend.RAY, "ray")])
def test_cluster_backends_name_the_package_to_install(backend, package) -> None:
    pytest.importorskip("joblib")
    try:
        __import__(package)
        pytest.skip(f"{package} is installed")
    except ImportError:
        pass
    with pytest.raises(ConfigError, match=f"vtrain-ml\\[{package}\\]"), gen.backend_context(backend):
        pass
