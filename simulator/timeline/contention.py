"""What overlapped communication costs the compute it runs beside.

A collective that overlaps compute is not free: NCCL runs one CTA per channel, and those CTAs
hold SMs for as long as the collective runs (an H100's 132-block GEMM beside a 24-block
ncclAllGather spills into a second wave; Hardware `efficiency.overlap_comm_sms`). The compute
it overlaps runs on the other SMs, num_sms / (num_sms - k) times slower while they are held.
Measured: overlapped compute runs 18.9% slower on average, 40% at most, on A100, H100 and MI250
(Lee et al. 2025, "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed
Deep Learning", arXiv 2507.03114); the SM share gives 22% on an H100, 29% on an A100, 19% on a
B200. The simulator charges it wherever it overlaps a collective with compute: each block's
asynchronous collectives behind their GEMMs (simulator.costs.blocks: tensor-parallel, FSDP,
the combined-1F1B MoE dispatch), the data-parallel gradient buckets behind the last backward
(simulator.timeline.tail) and the parameter gather under the next forward
(simulator.timeline.param_gather).
"""

from __future__ import annotations

import numpy as np

from simulator.job.specs import HardwareSpec


def compute_slowdown(hw: HardwareSpec) -> float:
    """Extra compute seconds per second of a collective beside it: k / (num_sms - k)."""
    k = min(hw.efficiency.overlap_comm_sms, hw.num_sms - 1.0)
    return k / (hw.num_sms - k)


def overlapped_s(start: np.ndarray, end: np.ndarray, until: np.ndarray) -> np.ndarray:
    """(p,) seconds of each row's busy intervals [start, end) that fall before `until` (p,):
    the part of a stage's collectives that ran while the stage was still computing."""
    return np.clip(np.minimum(end, until[:, None]) - start, 0.0, None).sum(axis=1)
