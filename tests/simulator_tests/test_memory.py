"""Memory: activations per layer (Korthikanti et al. 2022, Table 2 / Sec. 4), micro-batches in
flight under each schedule, and jobs that do not fit."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import simulate
from simulator.graph.dense import build_layer
from simulator.graph.params import total_params
from simulator.job.enums import Schedule
from simulator.memory.stages import in_flight_peak
from simulator.memory.states import stage_param_counts
from simulator.timeline.engine import round_plan
from tests.conftest import make_job

S, B, H, A = 1024, 2, 1024, 16  # sequence, micro-batch, hidden, heads of the checked layer


def korthikanti_bytes(recompute: str, t: int, sp: bool) -> float:
    """Activation bytes of one layer per micro-batch, Korthikanti et al. 2022, Table 2."""
    sbh, attention = S * B * H, 5 * A * S / H
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)
    if sp:
        return sbh / t * (34 + (0 if recompute == "selective" else attention))
    return sbh * (10 + 24 / t + (0 if recompute == "selective" else attention / t))


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize(("t", "sp"), [(1, False), (2, False), (8, False), (2, True), (4, True),
                                       (8, True)])
def test_layer_activation_bytes_match_korthikanti(recompute, t, sp):
    job = make_job(model={"seq_length": S, "hidden_size": H, "num_attention_heads": A},
                   training={"micro_batch_size": B, "global_batch_size": 16 * B // (8 // t),
                             "recompute": recompute},
                   parallel={"tp": t, "pp": 8 // t, "dp": 1, "sequence_parallel": sp})
    assert build_layer(job).saved_bytes == pytest.approx(korthikanti_bytes(recompute, t, sp),
                                                         rel=1e-12)


def test_recompute_modes_trade_memory_in_the_published_order():
    saved = {mode: build_layer(make_job(training={"recompute": mode})).saved_bytes
             for mode in ("none", "selective", "full")}
    assert saved["none"] > saved["selective"] > saved["full"] > 0


@pytest.mark.parametrize("p", [1, 2, 4, 8])
@pytest.mark.parametrize("m", [1, 3, 8, 16])
def test_1f1b_holds_at_most_p_minus_stage_microbatches(p, m):
    plan = round_plan(Schedule.ONE_F_ONE_B, p, m, 1)
    peak = in_flight_peak(plan, np.ones((p, 1)), m)
    np.testing.assert_array_equal(peak, [min(p - s, m) for s in range(p)])


@pytest.mark.parametrize("p", [1, 2, 4])
def test_gpipe_holds_every_microbatch(p):
    m = 8
    plan = round_plan(Schedule.GPIPE, p, m, 1)
    np.testing.assert_array_equal(in_flight_peak(plan, np.ones((p, 1)), m), np.full(p, m))


@pytest.mark.parametrize(("p", "v"), [(2, 2), (4, 2), (4, 3), (8, 2)])
def test_interleaved_first_stage_holds_korthikanti_extra_fraction(p, v):
    """Korthikanti et al. 2022, Sec. 4.2.3: with v interleaved chunks the first stage holds
    p * (1 + (p-1)/(p*v)) micro-batches' worth of its layers' activations (1F1B: p)."""
    m = 4 * p
    interleaved = in_flight_peak(round_plan(Schedule.INTERLEAVED_1F1B, p, m, v),
                                 np.full((p, v), 1.0 / v), m)
    assert interleaved[0] == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_distributed_optimizer_shards_optimizer_states_over_dp():
    plain = simulate(make_job()).stages[0].memory
    zero1 = simulate(make_job(parallel={"distributed_optimizer": True})).stages[0].memory
    assert zero1.optimizer_states_bytes == pytest.approx(plain.optimizer_states_bytes / 2)
    assert zero1.parameters_bytes == plain.parameters_bytes


def test_stage_parameters_add_up_to_the_model():
    """Every parameter lives on exactly one stage, plus the tied word embedding's copy on the
    last stage (vocabulary already a multiple of Megatron's padding)."""
    job = make_job(model={"vocab_size": 128 * 400}, parallel={"tp": 1, "pp": 4, "dp": 2})
    copy = job.model.vocab_size * job.model.hidden_size
    assert stage_param_counts(job).sum() == total_params(job.model) + copy


def test_job_that_does_not_fit_simulates_and_reports_the_overflow():
    job = make_job(model={"num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
                          "seq_length": 4096},
                   training={"global_batch_size": 64},
                   parallel={"tp": 8, "pp": 1, "dp": 1})
    result = simulate(job)
    assert not result.fits_in_memory
    assert result.peak_memory_bytes > result.memory_capacity_bytes
    assert result.memory_overflow_bytes == pytest.approx(  # what the allocator must reserve (issue 26)
        result.memory_required_bytes - result.memory_capacity_bytes)
    assert result.iteration_time_s > 0
    assert result.to_dict()["fits_in_memory"] is False


def test_small_job_fits(small_job):
    result = simulate(small_job)
    assert result.fits_in_memory
    assert result.memory_overflow_bytes == 0.0
