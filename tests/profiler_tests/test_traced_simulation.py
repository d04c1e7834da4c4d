"""The simulator uses traced phase costs: composed over layers and micro-batches, scaled to
shapes that were not traced, and a window costs max(GPU time, host time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.costs.profile_format import TracePhase
from simulator.costs.traced import TracedOptions, traced_costs
from simulator.costs.traced_host import DEFAULT_PROFILER_OP_S
from simulator.job.loaders import load_job
from simulator.simulate import simulate, simulate_traced
from tests.profiler_tests.trace_builder import Builder, write
from vtrain_ml.cli.profile import main
from vtrain_ml.cli.simulate import main as simulate_main

JOB = """model: {{name: syn, num_layers: {layers}, hidden_size: 16, num_attention_heads: 2,
        vocab_size: 64, seq_length: 8, use_bias: false}}
training: {{global_batch_size: {gbs}, micro_batch_size: {mb}, flash_attention: true}}
parallel: {{tp: 1, pp: 1, dp: 1}}
cluster: {{gpu: h100-sxm-80gb, num_gpus: 1}}
"""


def _job(tmp_path: Path, layers: int = 3, mb: int = 2, micro_batches: int = 2) -> Path:
    path = tmp_path / f"job_l{layers}_mb{mb}_m{micro_batches}.yaml"
    path.write_text(JOB.format(layers=layers, mb=mb, gbs=mb * micro_batches))
    return path


def _profile(tmp_path: Path, kernel_us: float, name: str) -> Path:
    trace = write(Builder(layers=3, micro_batches=2, kernel_us=kernel_us).build(),
                  tmp_path / f"{name}.json.gz")
    out = tmp_path / name
    assert main(["import-trace", str(trace), "--job", str(_job(tmp_path)), "--out", str(out)]) == 0
    return out


# per micro-batch forward: embedding 1 + 3 layers x 5 + head 3 kernels; each kernel then the
# GPU's 1 us gap to the next (what the trace shows between back-to-back kernels)
FORWARD_KERNELS = 1 + 3 * 5 + 3


def test_the_forward_time_is_the_traced_kernels(tmp_path):
    profile = _profile(tmp_path, 200.0, "slow")
    result = simulate_traced(load_job(_job(tmp_path)), profile)
    assert result.breakdown["forward"] == pytest.approx(2 * FORWARD_KERNELS * 201e-6, rel=0.01)
    assert result.profile_coverage["traced"] == 1.0


def test_ten_times_slower_kernels_are_a_ten_times_slower_forward(tmp_path):
    """Fails if the simulator ignored the traced phase costs."""
    job = load_job(_job(tmp_path))
    fast = simulate_traced(job, _profile(tmp_path, 20.0, "fast"))
    slow = simulate_traced(job, _profile(tmp_path, 200.0, "slow"))
    assert slow.breakdown["forward"] / fast.breakdown["forward"] == pytest.approx(201 / 21, rel=0.02)
    assert slow.iteration_time_s > 3 * fast.iteration_time_s
    assert simulate(job).breakdown["forward"] < 0.1 * slow.breakdown["forward"]  # not the analytic


def test_more_layers_compose_the_traced_layer(tmp_path):
    profile = _profile(tmp_path, 200.0, "slow")
    deep = simulate_traced(load_job(_job(tmp_path, layers=12)), profile)
    assert deep.breakdown["forward"] == pytest.approx(2 * (1 + 12 * 5 + 3) * 201e-6, rel=0.01)
    assert deep.profile_coverage["traced"] > 0.9  # the optimizer alone scales with the params


def test_an_untraced_micro_batch_is_scaled_and_reported(tmp_path):
    profile = _profile(tmp_path, 200.0, "slow")
    costs = traced_costs(str(profile), load_job(_job(tmp_path, mb=4)))
    layer = costs.phases[TracePhase.LAYER_FORWARD]
    assert layer is not None and layer.source == "scaled"
    # twice the tokens: twice the (memory-bound) kernel time, the same launches and gaps
    assert layer.gpu_s - 5 * 1e-6 == pytest.approx(2 * 5 * 200e-6, rel=0.1)
    assert costs.coverage()["scaled"] > 0.9


def test_a_host_bound_trace_reproduces_its_own_iteration(tmp_path):
    builder = Builder(layers=3, micro_batches=2, kernel_us=1.0, gap_us=40.0)
    trace = write(builder.build(), tmp_path / "host.json.gz")
    out = tmp_path / "host"
    assert main(["import-trace", str(trace), "--job", str(_job(tmp_path)), "--out", str(out)]) == 0
    ops = [e for e in builder.events if e["cat"] == "cpu_op"]
    span = (max(e["ts"] + e["dur"] for e in ops) - min(e["ts"] for e in ops)) * 1e-6
    result = simulate_traced(load_job(_job(tmp_path)), out, TracedOptions(profiled_host=True))
    assert result.iteration_time_s == pytest.approx(span, rel=0.03)
    # without the profiler the host is faster: each recorded op loses the default profiler cost
    real = simulate_traced(load_job(_job(tmp_path)), out)
    expected = result.iteration_time_s - len(ops) * DEFAULT_PROFILER_OP_S
    assert real.iteration_time_s == pytest.approx(expected, rel=0.01)


def test_simulate_cli_reports_the_traced_profile(tmp_path, capsys):
    profile = _profile(tmp_path, 200.0, "slow")
    assert simulate_main([str(_job(tmp_path, mb=4)), "--profile", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "traced profile: " in out and "layer_forward scaled" in out


def test_the_host_gpu_timeline_is_max_of_the_two_over_long_windows():
    from simulator.costs.host_timeline import Step, cycle_time

    gpu_bound = cycle_time([Step(host_s=1.0, gpu_s=2.0, kernels=4, count=500)], 3)
    assert gpu_bound == pytest.approx(3 * 500 * 2.0 + 0.25)  # the GPU waits for the first kernel
    host_bound = cycle_time([Step(host_s=2.0, gpu_s=1.0, kernels=4, count=500)], 3)
    assert host_bound == pytest.approx(3 * 500 * 2.0 + 0.25)  # the last kernel runs after the host


def test_a_gpu_heavy_phase_at_the_end_of_host_work_is_not_hidden():
    from simulator.costs.host_timeline import Step, cycle_time

    seq = [Step(host_s=10.0, gpu_s=1.0, kernels=10), Step(host_s=1.0, gpu_s=10.0, kernels=1)]
    assert cycle_time(seq, 1) == pytest.approx(10 + 1 + 10)  # not max(11, 11)


def test_a_flash_trace_predicts_the_unfused_job_with_its_attention_kernels_added(tmp_path):
    """The traced layer (5 kernels, none of them attention) keeps its kernels, and the unfused
    attention the trace lacks is added op by op: bmm Q K^T, Megatron's unfused softmax fallback
    at sequence 8 (cast, scale, mask, softmax, cast: 5 kernels), dropout, bmm by V -- 8 launches.
    Scaling per kernel class instead would hide them behind the trace's own classes."""
    profile = _profile(tmp_path, 200.0, "flash")
    path = _job(tmp_path)
    path.write_text(path.read_text().replace("flash_attention: true", "flash_attention: false"))
    costs = traced_costs(str(profile), load_job(path))
    layer = costs.phases[TracePhase.LAYER_FORWARD]
    assert layer is not None and layer.source == "scaled"
    assert layer.kernels == pytest.approx(5 + 8)
    flash = traced_costs(str(profile), load_job(_job(tmp_path))).phases[TracePhase.LAYER_FORWARD]
    assert flash is not None and layer.gpu_s > flash.gpu_s


def test_the_first_micro_batch_runs_its_own_sequence_first():
    from simulator.costs.host_timeline import Step, cycle_time

    later = [Step(host_s=1.0, gpu_s=2.0, kernels=1)]
    first = [Step(host_s=1.0, gpu_s=1.0, kernels=1)]
    # host 1 s, then the GPU's 1 s (first) and 2 s (later): 1 + 1 + 2
    assert cycle_time(later, 2, first) == pytest.approx(4.0)
    assert cycle_time(later, 2) == pytest.approx(5.0)  # 1 + 2 + 2
    assert cycle_time(later, 1, first) == pytest.approx(2.0)


def test_a_phase_is_split_into_its_first_and_later_micro_batches():
    from simulator.costs.traced_shapes import Instance, split_cost

    # traced over 2 micro-batches: mean 3 s, first 2 s -> each later one 4 s
    cost = split_cost(Instance(3.0, 1.0, 10.0), Instance(2.0, 1.5, 8.0), traced_mbs=2,
                      job_mbs=4, source="traced")
    assert cost.at(first=True) == Instance(2.0, 1.5, 8.0)
    assert cost.at(first=False) == Instance(4.0, 0.5, 12.0)
    assert (cost.gpu_s, cost.host_s, cost.kernels) == pytest.approx(((2 + 3 * 4) / 4,
                                                                     (1.5 + 3 * 0.5) / 4,
                                                                     (8 + 3 * 12) / 4))
    one = split_cost(Instance(3.0, 1.0, 10.0), Instance(2.0, 1.5, 8.0), traced_mbs=2, job_mbs=1,
                     source="traced")
    assert one.gpu_s == 2.0  # no gradient accumulation at all: the first micro-batch alone
    unknown = split_cost(Instance(3.0, 1.0, 10.0), None, traced_mbs=2, job_mbs=4, source="traced")
    assert unknown.at(first=True) == unknown.at(first=False) == Instance(3.0, 1.0, 10.0)


def test_the_optimizer_steps_host_time_grows_with_the_parameter_tensors(tmp_path):
    from simulator.costs.traced_shapes import param_tensors

    job = load_job(_job(tmp_path))  # LayerNorm (the default), no bias, learned positions, tied
    # per layer 2 LayerNorms x (weight, bias) + 4 weights; word and position embeddings, final
    # LayerNorm (weight, bias); tied head
    assert param_tensors(job, 3) == 3 * 8 + 4
    traced = _profile(tmp_path, 10.0, "opt")
    deep = load_job(_job(tmp_path, layers=12))
    ratio = (traced_costs(str(traced), deep).phases[TracePhase.OPTIMIZER].host_s
             / traced_costs(str(traced), load_job(_job(tmp_path))).phases[TracePhase.OPTIMIZER].host_s)
    assert ratio == pytest.approx((12 * 8 + 4) / (3 * 8 + 4))
