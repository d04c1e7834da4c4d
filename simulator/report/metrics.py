"""Utilization and cost of a simulated iteration.

The FLOPs counted against the peak come from the graph (simulator.graph.flops: model FLOPs for
MFU, hardware FLOPs with recompute for HFU); the peak is the hardware file's dense peak of the
job's 16-bit dtype over all GPUs -- for fp8 and fp4 runs too, the convention of published
low-precision runs (Megatron-Bridge's and NeMo's performance tables, the Llama 3 report's "BF16
MFU"), so that MFU compares across recipes; the price is the job's per-GPU hour.
"""

from __future__ import annotations

from simulator.job.specs import Job


def utilization(flops: float, iteration_time_s: float, job: Job) -> float:
    peak = job.hardware.peak_flops(job.training.precision.base) * job.cluster.num_gpus
    return flops / (iteration_time_s * peak)


def cost_usd(seconds: float, job: Job) -> float:
    return seconds * job.cluster.num_gpus * job.price_per_gpu_hour_usd / 3600.0


def usd_per_million_tokens(cost_per_iteration_usd: float, tokens_per_iteration: float) -> float:
    """Dollars per million trained tokens: the price that compares GPU types, GPU counts and batch
    sizes alike (the simulator's result and the search's plans both quote it)."""
    return cost_per_iteration_usd / tokens_per_iteration * 1e6
