"""Utilization and cost of a simulated iteration.

The FLOPs counted against the peak come from the graph (simulator.graph.flops: model FLOPs for
MFU, hardware FLOPs with recompute for HFU); the peak is the hardware file's dense peak for the
job's precision over all GPUs; the price is the job's per-GPU hour.
"""

from __future__ import annotations

from simulator.job.specs import Job


def utilization(flops: float, iteration_time_s: float, job: Job) -> float:
    peak = job.hardware.peak_flops(job.training.precision) * job.cluster.num_gpus
    return flops / (iteration_time_s * peak)


def cost_usd(seconds: float, job: Job) -> float:
    return seconds * job.cluster.num_gpus * job.price_per_gpu_hour_usd / 3600.0
