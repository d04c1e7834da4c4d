"""What a synchronous step loses to its slowest rank: the expected maximum over ranks.

Every rank's compute varies. A step waits, at every synchronization, for the slowest rank of the
group that synchronizes, so it pays the expected maximum of the ranks' times, not their mean.
Two independent terms, each with a default from a public measurement (`Efficiency`), set per job
by `cluster.jitter` and fitted by `calibrate --rank-times`:

- persistent (`gpu_speed_cv`): one GPU is slower than another for the whole run (manufacturing
  and power management: at the power cap the clock follows the chip's leakage; Sinha et al.,
  "Not All GPUs Are Created Equal", SC'22). The slowest GPU's tensor-parallel group stalls at
  every collective, its stage then paces the pipeline, and the data-parallel reduction waits
  for the slowest pipeline: the GPU-bound critical path stretches by the expected maximum of
  `num_gpus` normal speed deviations, sigma * E[max of N standard normals].
- transient (`kernel_time_cv`): each kernel's duration scatters around its mean. Between two
  synchronizations of a group of g ranks (a tensor-parallel collective; a pipeline hand-off,
  g = 2; the data-parallel reduction, g = dp) the group waits for E[max of g] standard
  deviations of the interval: an interval of kernels t_i has standard deviation
  cv * sqrt(sum t_i^2). With I equal intervals per layer the layer loses
  cv * e(g) * sqrt(I * sum t_i^2); the sum of squares is the costed layer's
  (`BlockCost.kernel_square_s2`), so a few long GEMMs vary more than many short kernels.

Both are fractions of the GPU-bound time on the critical path (compute, the
pipeline bubble -- the other stages' compute -- and the optimizer step); communication and host
dispatch beyond the GPU's work (a host-bound window does not wait for the GPU) are not stretched.
The result is its own breakdown term, `scale_loss`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import ndtr

from simulator.costs.blocks import BlockCost
from simulator.graph.ops import Block
from simulator.job.specs import Job


@dataclass(frozen=True)
class ScaleLoss:
    persistent_s: float  # the slowest GPU's speed
    transient_s: float  # kernel-time variation at every synchronization
    gpu_speed_cv: float
    kernel_time_cv: float
    ranks: int

    @property
    def total_s(self) -> float:
        return self.persistent_s + self.transient_s

    def to_dict(self) -> dict[str, float]:
        return {"persistent_s": self.persistent_s, "transient_s": self.transient_s,
                "gpu_speed_cv": self.gpu_speed_cv, "kernel_time_cv": self.kernel_time_cv,
                "ranks": self.ranks}


@lru_cache(maxsize=1024)
def expected_max(n: int) -> float:
    """E[max of n iid standard normals] = integral of x n phi(x) Phi(x)^(n-1) dx (0 for n <= 1),
    by quadrature on a fine grid (exact to ~1e-9 for n up to 10^7)."""
    if n <= 1:
        return 0.0
    x = np.linspace(-12.0, 12.0, 48001)
    log_cdf = np.log(np.clip(ndtr(x), 1e-300, None))
    density = n * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi) * np.exp((n - 1) * log_cdf)
    return float(np.trapezoid(x * density, x))


def jitter(job: Job) -> tuple[float, float]:
    """(gpu_speed_cv, kernel_time_cv): `cluster.jitter`, else the hardware file's."""
    eff, j = job.hardware.efficiency, job.cluster.jitter
    gpu = j.gpu_speed_cv if j is not None and j.gpu_speed_cv is not None else eff.gpu_speed_cv
    kernel = (j.kernel_time_cv if j is not None and j.kernel_time_cv is not None
              else eff.kernel_time_cv)
    return gpu, kernel


def transient_fraction(job: Job, layer: BlockCost, block: Block) -> float:
    """Kernel-time loss per second of layer compute, per unit of kernel_time_cv."""
    compute = layer.forward + layer.backward + layer.recompute
    if compute <= 0 or layer.kernel_square_s2 <= 0:
        return 0.0
    s2, tp, pp, dp = layer.kernel_square_s2, job.parallel.tp, job.parallel.pp, job.dp
    loss = 0.0
    syncs = len(block.forward_comm) + len(block.backward_comm) + len(block.recompute_comm)
    if tp > 1 and syncs:
        loss += expected_max(tp) * math.sqrt(syncs * s2)
    per_chunk = max(1.0, job.model.num_layers / (pp * job.parallel.virtual_stages))
    if pp > 1:  # a hand-off per chunk and direction
        loss += expected_max(2) * math.sqrt(2 * s2 / per_chunk)
    if dp > 1:  # one reduction per iteration, over the stage's layers of every micro-batch
        loss += expected_max(dp) * math.sqrt(s2 / (per_chunk * job.parallel.virtual_stages
                                                    * job.num_microbatches))
    return loss / compute


def scale_loss(job: Job, layer: BlockCost, block: Block, gpu_bound_s: float) -> ScaleLoss:
    """The expected slowest rank's cost on `gpu_bound_s` seconds of GPU-bound critical path."""
    gpu_cv, kernel_cv = jitter(job)
    n = job.cluster.num_gpus
    persistent = gpu_cv * expected_max(n) * gpu_bound_s
    transient = kernel_cv * transient_fraction(job, layer, block) * gpu_bound_s
    return ScaleLoss(persistent, transient, gpu_cv, kernel_cv, n)
