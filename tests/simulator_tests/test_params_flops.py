"""Parameter counts of the presets against published sizes, and the FLOP accounting of
Narayanan et al. 2021."""

from __future__ import annotations

import pytest

from simulator import job_from_dict, simulate
from simulator.graph.flops import hardware_flops_per_iteration, model_flops_per_iteration
from simulator.graph.params import total_params
from simulator.job.catalog import load_model, model_names
from tests.conftest import job_dict, make_job

# Published parameter counts (papers and released model cards).
PUBLISHED = {
    "gpt3-175b": 175e9,  # Brown et al. 2020, Table 2.1
    "mt-nlg-530b": 530e9,  # Smith et al. 2022
    "llama-3-70b": 70.6e9,  # Llama Team 2024, model card
    "llama-3-405b": 405e9,  # Llama Team 2024
    "llama-3-8b": 8.03e9,
    "llama-2-7b": 6.74e9,  # Touvron et al. 2023, model card
    "llama-2-13b": 13.02e9,
    "llama-2-70b": 68.98e9,
}


@pytest.mark.parametrize(("preset", "published"), PUBLISHED.items())
def test_preset_parameter_count_within_1_percent_of_published(preset, published):
    assert total_params(load_model(preset)) == pytest.approx(published, rel=0.01)


@pytest.mark.parametrize("preset", [n for n in model_names() if n.startswith("megatron-gpt")])
def test_megatron_family_matches_narayanan_parameter_formula(preset):
    """Narayanan et al. 2021, Sec. 5.1: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), with the
    vocabulary padded to 51,200 as in their Table 1 (their sizes are rounded to 2-3 digits)."""
    m = load_model(preset)
    l, h, s, v = m.num_layers, m.hidden_size, m.seq_length, m.vocab_size
    formula = 12 * l * h**2 * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))
    assert total_params(m) == pytest.approx(formula, rel=1e-3)
    assert m.published_params == pytest.approx(formula, rel=0.03)


def narayanan_flops(batch: int, s: int, l: int, h: int, vocab: int) -> float:
    """Narayanan et al. 2021, Appendix: 72 B s l h^2 (1 + s/(6h) + V/(12 l h))."""
    return 72 * batch * s * l * h**2 * (1 + s / (6 * h) + vocab / (12 * l * h))


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_model_flops_equal_narayanan_formula(recompute):
    job = make_job(training={"global_batch_size": 32, "recompute": recompute})
    m = job.model
    expected = narayanan_flops(32, m.seq_length, m.num_layers, m.hidden_size, m.vocab_size)
    assert model_flops_per_iteration(job) == pytest.approx(expected, rel=1e-12)


def test_gpt3_flops_equal_narayanan_formula():
    job = job_from_dict({**job_dict(parallel={"tp": 8, "pp": 1, "dp": 1},
                                    training={"global_batch_size": 1536}), "model": "gpt3-175b"})
    expected = narayanan_flops(1536, 2048, 96, 12288, 50257)
    assert model_flops_per_iteration(job) == pytest.approx(expected, rel=1e-12)


def test_full_recompute_adds_one_layer_forward_to_hardware_flops():
    """Narayanan et al. 2021: with activation recomputation, hardware FLOPs are 4/3 of model
    FLOPs for the transformer layers (an extra forward pass)."""
    job = make_job(training={"recompute": "full"})
    m = job.model
    logits = 3 * 2 * m.hidden_size * m.vocab_size * 16 * m.seq_length
    layers = model_flops_per_iteration(job) - logits
    assert hardware_flops_per_iteration(job) == pytest.approx(model_flops_per_iteration(job) + layers / 3)


def test_mfu_is_model_flops_over_peak_times_time(small_job):
    r = simulate(small_job)
    peak = small_job.hardware.peak_flops(small_job.training.precision) * small_job.cluster.num_gpus
    assert r.mfu == pytest.approx(r.model_flops_per_iteration / (r.iteration_time_s * peak))
    assert 0 < r.mfu <= r.hfu < 1
