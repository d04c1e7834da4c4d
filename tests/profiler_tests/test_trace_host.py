"""Host time in traces is not the host's own pace: a stalled profiled iteration, launch calls
that wait for a full launch queue, host work slowed while the queue is full, and the profiler's
cost per op. Each is measured from the trace (or its unprofiled iteration) and taken out."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from profiler.trace.classify import parameter_shapes
from profiler.trace.events import read_trace
from profiler.trace.launch_queue import pressure_excess, queue_waits
from profiler.trace.links import link
from profiler.trace.phases import cut
from profiler.trace.summary import summarize
from simulator.costs.profile_format import TracePhase
from simulator.costs.traced_host import host_scale, implied_op_s, own_iteration_s
from simulator.job.loaders import load_job
from tests.profiler_tests.trace_builder import Builder, write

P = TracePhase


def _summary(tmp_path: Path, builder: Builder, **build: Any):
    raw = read_trace(write(builder.build(**build), tmp_path / "t.json.gz"))
    links = link(raw)
    return summarize(raw, links, cut(raw, links, builder.layers), frozenset(), builder.layers)


def test_host_times_come_from_the_least_disturbed_iteration(tmp_path):
    calm = _summary(tmp_path, Builder(layers=3, micro_batches=2))
    stalled = _summary(tmp_path, Builder(layers=3, micro_batches=2), iterations=3, stall_us=400.0)
    assert stalled.iterations == 3 and stalled.host_iteration != 0
    assert stalled.host_by_iteration_s[0] > 2 * stalled.host_by_iteration_s[1]
    for phase in (P.LAYER_FORWARD, P.LAYER_BACKWARD, P.HEAD_FORWARD):
        got, want = stalled.phases[phase], calm.phases[phase]
        assert got.host_per_instance_s == pytest.approx(want.host_per_instance_s)
        # kernels are real in every iteration: averaged over all three
        assert got.instances == 3 * want.instances
        assert got.per_instance(got.kernel_s) == pytest.approx(want.per_instance(want.kernel_s))


# ---------------------------------------------------------------- a launch queue that fills up
DEPTH, KERNEL_US, LAUNCH_US, SLOW = 8, 100.0, 5.0, 1.5


def _queue_trace(path: Path, ops: int = 60, op_us: float = 20.0) -> tuple[Path, list[float]]:
    """One host thread issuing `ops` ops of one kernel each (100 us: the GPU is the bottleneck)
    into a launch queue of depth 8: when it is full, the launch call waits for the oldest
    kernel to finish, and the op's own work takes 1.5x longer. Returns the file and each
    launch call's wait (us)."""
    events: list[dict[str, Any]] = []
    t, gpu_free, ends, waits = 0.0, 0.0, [], []
    for k in range(ops):
        pending = [e for e in ends if e > t]
        full = len(pending) >= DEPTH
        own = op_us * (SLOW if full else 1.0)
        call_start = t + own / 2
        wait = (sorted(pending)[len(pending) - DEPTH] - call_start) if full else 0.0
        wait = max(wait, 0.0)
        call_dur = LAUNCH_US + wait
        waits.append(wait)
        start = max(gpu_free, call_start + call_dur)
        gpu_free = start + KERNEL_US
        ends.append(gpu_free)
        dur = own + call_dur
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t,
             "dur": dur, "args": {"Input Dims": [[64, 64], [64, 64]]}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": call_start, "dur": call_dur, "args": {"correlation": k + 1}},
            {"ph": "X", "cat": "kernel", "name": f"gemm_{k}", "pid": 0, "tid": 7, "ts": start,
             "dur": KERNEL_US, "args": {"correlation": k + 1, "stream": 7}}]
        t += dur + 1.0
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode(), mtime=0))
    return path, waits


def test_launch_calls_that_wait_for_a_full_queue_are_waiting_not_host_work(tmp_path):
    path, expected = _queue_trace(tmp_path / "q.json.gz")
    raw = read_trace(path)
    got = queue_waits(raw, link(raw))
    assert sum(w > 0 for w in expected) > 20  # the queue filled up and stayed full
    assert list(got) == pytest.approx(expected, abs=1e-6)


def test_host_work_slowed_by_a_full_queue_is_measured_and_taken_out(tmp_path):
    path, _ = _queue_trace(tmp_path / "q.json.gz")
    raw = read_trace(path)
    excess, slowdown = pressure_excess(raw, link(raw))
    assert slowdown == pytest.approx(SLOW)
    slowed = [e for e in excess if e > 0]
    assert slowed and all(e == pytest.approx(20.0 * (SLOW - 1)) for e in slowed)


# ---------------------------------------------------------------- the unprofiled iteration
def _trace_row(measured: float | None, layers: int = 4) -> dict[str, Any]:
    return {"trace": "t", "layers": layers, "micro_batches": 1, "gpu_gap_s": 0.0,
            "measured_iteration_s": math.nan if measured is None else measured}


def _phases(host_s: float, kernel_s: float, ops: float = 100) -> dict[TracePhase, dict[str, Any]]:
    """A layer's forward and backward with the given host and GPU seconds; nothing else."""
    return {p: {"phase": p.value, "host_s": host_s, "kernel_s": kernel_s, "kernels": 10.0,
                "cpu_ops": ops} for p in (P.LAYER_FORWARD, P.LAYER_BACKWARD)}


def _as_traced(row: dict[str, Any]) -> float:
    return float(row["host_s"])


def test_a_host_bound_trace_is_scaled_to_its_unprofiled_iteration():
    phases = _phases(host_s=2e-3, kernel_s=0.5e-3)  # 8 phase instances: 16 ms host, 4 ms GPU
    scale = host_scale(_trace_row(12e-3), phases, _as_traced)
    assert own_iteration_s(_trace_row(12e-3), phases, _as_traced, scale) == pytest.approx(12e-3)
    assert scale == pytest.approx(0.75, rel=0.02)  # 12 of 16 ms were the host's own


def test_a_trace_the_gpu_paced_teaches_nothing_about_the_host():
    phases = _phases(host_s=0.2e-3, kernel_s=2e-3)  # 16 ms of GPU, 1.6 ms of host
    assert host_scale(_trace_row(16.05e-3), phases, _as_traced) == 1.0  # GPU-paced, agrees
    assert host_scale(_trace_row(16.2e-3), phases, _as_traced) == 1.0  # within the noise
    assert host_scale(_trace_row(None), phases, _as_traced) == 1.0  # nothing measured


def test_a_stalled_trace_whose_gpu_alone_explains_the_run_keeps_no_more_host_than_the_gpu_hides():
    phases = _phases(host_s=4e-3, kernel_s=2e-3)  # traced: host 32 ms (stalled), GPU 16 ms
    scale = host_scale(_trace_row(16e-3), phases, _as_traced)  # the run took the GPU's time
    # the most host the measurement allows, within its 2% spread: host-paced, the iteration is
    # the host's 8 x 4 ms x scale plus the last kernel (2 ms / 10) = 16 ms x 1.02
    assert own_iteration_s(_trace_row(16e-3), phases, _as_traced, scale) == pytest.approx(
        16e-3 * 1.02)
    assert scale == pytest.approx((16e-3 * 1.02 - 0.2e-3) / (8 * 4e-3))


def test_the_profilers_cost_per_op_is_implied_by_a_host_paced_unprofiled_iteration():
    true_cost = 3e-6
    real_host, ops = 1.5e-3, 200.0
    phases = _phases(host_s=real_host + true_cost * ops, kernel_s=0.3e-3, ops=ops)
    measured = own_iteration_s(_trace_row(None), _phases(real_host, 0.3e-3, ops), _as_traced, 1.0)
    got = implied_op_s(_trace_row(measured), phases, _as_traced)
    assert got == pytest.approx(true_cost, rel=0.01)
    # a GPU-paced trace implies nothing
    gpu_bound = _phases(host_s=0.5e-3, kernel_s=3e-3, ops=ops)
    assert implied_op_s(_trace_row(24e-3), gpu_bound, _as_traced) is None


def test_a_real_gpu_bound_h100_trace_fills_the_queue_and_its_waits_are_found():
    """The 8-layer H100 trace in tests/data is GPU-bound: its host runs ahead until the launch
    queue is full (about 1,000 kernels), then launch calls wait. Those waits are found in
    launch calls only, never more than the call lasted, and most of the waiting is in calls
    that took several times as long as the usual call of their name (blocked ones)."""
    import numpy as np

    data = Path(__file__).parents[1] / "data" / "traces"
    raw = read_trace(data / "mgpt_h6144_l8_s2048_mb1_ga2_none_flash.json.gz")
    links = link(raw)
    waits = queue_waits(raw, links)
    waited = np.flatnonzero(waits > 0)
    assert len(waited) > 100
    medians = {n: np.median([c.dur for c in raw.runtime if c.name == n])
               for n in {raw.runtime[j].name for j in waited}}
    blocked = 0.0
    for j in waited:
        call = raw.runtime[j]
        assert "Launch" in call.name or "Memset" in call.name or "Memcpy" in call.name
        assert waits[j] <= call.dur
        blocked += waits[j] if call.dur > 3 * medians[call.name] else 0.0
    assert blocked > 0.8 * waits.sum()
    job = load_job(data / "mgpt_h6144_l8_s2048_mb1_ga2_none_flash.yaml")
    s = summarize(raw, links, cut(raw, links, 8), parameter_shapes(job), 8)
    assert s.pressure_slowdown == pressure_excess(raw, links)[1] >= 1.0


def test_a_cpu_trace_splits_its_host_time_by_each_phases_median_instance():
    """On a CPU the host is the device: an instance the machine's other jobs slowed must not
    move the split between phases; the trace's total host time stays as it was."""
    from simulator.costs.traced_host import host_device_rows

    phases = {P.LAYER_FORWARD: {"host_s": 3.0, "host_p50_s": 1.0, "instances": 2,
                                "first_host_s": 4.5},
              P.HEAD_FORWARD: {"host_s": 1.0, "host_p50_s": 1.0, "instances": 2,
                               "first_host_s": math.nan}}
    # total 3 x 2 + 1 x 2 = 8 s; by medians 4 s: each phase's median times 2
    cpu = host_device_rows({"kernels": 0.0}, phases)
    assert cpu[P.LAYER_FORWARD]["host_s"] == pytest.approx(2.0)
    assert cpu[P.HEAD_FORWARD]["host_s"] == pytest.approx(2.0)
    assert cpu[P.LAYER_FORWARD]["first_host_s"] == pytest.approx(3.0)  # its ratio to the mean kept
    assert host_device_rows({"kernels": 120.0}, phases) is phases  # a GPU trace: unchanged
