"""`profile ops --budget-s` is a bound that holds: warm-up included, and an op whose single call
would overrun it (a large fp16 GEMM on a CPU takes minutes) is not started."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from profiler.timing import TimingConfig, time_cpu

ROOT = Path(__file__).resolve().parents[2]


class Sleeper:
    """A kernel that takes `seconds` per call and counts its calls."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        time.sleep(self.seconds)


def test_repeats_and_warmup_stop_when_the_budget_is_spent() -> None:
    kernel = Sleeper(0.04)
    began = time.perf_counter()
    stats = time_cpu(kernel, TimingConfig(warmup=3, min_repeats=5, max_repeats=30, budget_s=0.2))
    spent = time.perf_counter() - began
    # 3 warm-up + 5 minimum repeats would take 0.32 s; no call starts that would pass 0.2 s
    assert spent < 0.2 + 0.04, spent
    assert stats.repeats >= 1 and kernel.calls <= 5


def test_a_call_longer_than_the_budget_runs_once_and_is_the_sample() -> None:
    kernel = Sleeper(0.15)
    stats = time_cpu(kernel, TimingConfig(warmup=3, min_repeats=5, max_repeats=30, budget_s=0.05))
    assert kernel.calls == 1 and stats.repeats == 1 and stats.median_s >= 0.15


def test_no_budget_means_the_repeat_counts_alone() -> None:
    kernel = Sleeper(0.0)
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
