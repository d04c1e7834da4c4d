"""`profile ops --budget-s` is a bound that holds: warm-up included, and an op whose single call
would overrun it (a large fp16 GEMM on a CPU takes minutes) is not started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from profiler import timing
from profiler.timing import TimingConfig, time_cpu

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    """A stand-in for `time` inside profiler.timing: it moves only when a kernel runs, so the
    budget logic is checked exactly, whatever else the machine is doing. Durations are powers of
    two so that the sums are exact in binary."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def perf_counter(self) -> float:
        return self.now_s

    def perf_counter_ns(self) -> int:
        return round(self.now_s * 1e9)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(timing, "time", fake)
    return fake


class Sleeper:
    """A kernel that takes `seconds` per call on the clock and counts its calls."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        self.clock.now_s += self.seconds


def test_repeats_and_warmup_stop_when_the_budget_is_spent(clock: Clock) -> None:
    kernel = Sleeper(clock, 1 / 16)
    stats = time_cpu(kernel, TimingConfig(warmup=3, min_repeats=5, max_repeats=30, budget_s=0.25))
    # 3 warm-up + 5 minimum repeats would take 0.5 s; no call starts that would pass 0.25 s:
    # the 3 warm-ups and one repeat end exactly at the budget
    assert (kernel.calls, stats.repeats, stats.median_s) == (4, 1, 1 / 16)
    assert clock.now_s == 0.25


def test_a_call_longer_than_the_budget_runs_once_and_is_the_sample(clock: Clock) -> None:
    kernel = Sleeper(clock, 1 / 8)
    stats = time_cpu(kernel, TimingConfig(warmup=3, min_repeats=5, max_repeats=30, budget_s=1 / 32))
    assert kernel.calls == 1 and stats.repeats == 1 and stats.median_s == 1 / 8


def test_no_budget_means_the_repeat_counts_alone(clock: Clock) -> None:
    kernel = Sleeper(clock, 0.0)
    stats = time_cpu(kernel, TimingConfig(warmup=2, min_repeats=3, max_repeats=7, budget_s=0))
    assert (kernel.calls, stats.repeats) == (9, 7)


def test_profile_ops_skips_ops_whose_one_call_would_overrun_the_budget(tmp_path: Path) -> None:
    model = tmp_path / "wide.yaml"  # an 8192-wide layer: its fp16 GEMMs take minutes on a CPU
    model.write_text("model: {name: wide, num_layers: 2, hidden_size: 8192, num_attention_heads: 64, "
                     "vocab_size: 512, seq_length: 2048}\n"
                     "training: {global_batch_size: 8, micro_batch_size: 1, precision: fp16}\n"
                     "parallel: {tp: 1, pp: 1, dp: 8}\ncluster: {gpu: a100-80gb, num_gpus: 8}\n")
    done = subprocess.run([sys.executable, "-m", "vtrain_ml.profile", "ops", "--device", "cpu",
                           "--models", str(model), "--tp", "1", "--micro-batch", "1", "--precision", "fp16",
                           "--budget-s", "0.05", "--out", str(tmp_path / "profile"), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    skipped = [line for line in done.stdout.splitlines() if "over --budget-s 0.05" in line]
    assert any("qkv" in line for line in skipped)
    assert "measured" in done.stdout and (tmp_path / "profile" / "ops.csv").is_file()
