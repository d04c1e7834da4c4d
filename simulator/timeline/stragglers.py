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
  (`BlockCost.kernel_square_s2`), so a few long GEMMs vary more than many short kernels. A
  collective of another group (an expert-parallel all-to-all, a context-parallel exchange,
  FSDP's data-parallel gathers) waits for the slowest of ITS ranks. A model with several kinds
  of layer (dense and MoE, a low-precision run's bf16 layers, the MTP depth) loses the
  count-weighted mean over its layer blocks: every block's loss times how many of it the model
  runs, over their compute.

Both are fractions of the GPU-bound time on the critical path (compute, the
pipeline bubble -- the other stages' compute -- and the optimizer step); communication and host
dispatch beyond the GPU's work (a host-bound window does not wait for the GPU) are not stretched.
The result is its own breakdown term, `scale_loss`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import ndtr

from simulator.costs.blocks import BlockCost
from simulator.costs.comm_groups import group_placements
from simulator.graph.ops import Block, CommGroup
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


LayerBlocks = Sequence[tuple[float, BlockCost, Block]]  # (how many, its cost, the block)


def transient_fraction(job: Job, layers: LayerBlocks) -> float:
    """Kernel-time loss per second of layer compute, per unit of kernel_time_cv: of the one
    layer block, or count-weighted over the model's layer blocks."""
    if len(layers) == 1:
        _, layer, block = layers[0]
        loss, compute = _layer_loss(job, layer, block)
        return loss / compute if compute > 0 else 0.0
    parts = [(n, *_layer_loss(job, layer, block)) for n, layer, block in layers]
    compute = sum(n * c for n, _, c in parts)
    return sum(n * loss for n, loss, _ in parts) / compute if compute > 0 else 0.0


def _layer_loss(job: Job, layer: BlockCost, block: Block) -> tuple[float, float]:
    """(kernel-time loss, compute) of one layer block, in seconds per unit of kernel_time_cv."""
    compute = layer.forward + layer.backward + layer.recompute
    if compute <= 0 or layer.kernel_square_s2 <= 0:
        return 0.0, max(compute, 0.0)
    s2, pp, dp = layer.kernel_square_s2, job.parallel.pp, job.dp
    loss = _sync_loss(job, block, s2)
    per_chunk = max(1.0, job.model.num_layers / (pp * job.parallel.virtual_stages))
    if pp > 1:  # a hand-off per chunk and direction
        loss += expected_max(2) * math.sqrt(2 * s2 / per_chunk)
    if dp > 1:  # one reduction per iteration, over the stage's layers of every micro-batch
        loss += expected_max(dp) * math.sqrt(s2 / (per_chunk * job.parallel.virtual_stages
                                                    * job.num_microbatches))
    return loss, compute


def _sync_loss(job: Job, block: Block, s2: float) -> float:
    """The waits at the block's collectives: with I of them, each interval of kernels has
    variance s2 / I and its group of g ranks waits e(g) standard deviations of it."""
    comms = (*block.forward_comm, *block.backward_comm, *block.recompute_comm)
    if all(op.group is CommGroup.TP for op in comms):  # tensor parallelism alone
        tp = job.parallel.tp
        return expected_max(tp) * math.sqrt(len(comms) * s2) if tp > 1 and comms else 0.0
    sizes = group_sizes(job)
    waits = sum(expected_max(sizes[op.group]) for op in comms)
    return waits * math.sqrt(s2 / len(comms))


def group_sizes(job: Job) -> dict[CommGroup, int]:
    """Ranks of each block-level group (simulator.costs.comm_groups)."""
    return {group: where.size for group, where in group_placements(job).items()}


def scale_loss(job: Job, layers: LayerBlocks, gpu_bound_s: float) -> ScaleLoss:
    """The expected slowest rank's cost on `gpu_bound_s` seconds of GPU-bound critical path;
    `layers`: the model's layer blocks with their counts and costs."""
    gpu_cv, kernel_cv = jitter(job)
    n = job.cluster.num_gpus
    persistent = gpu_cv * expected_max(n) * gpu_bound_s
    transient = kernel_cv * transient_fraction(job, layers) * gpu_bound_s
    return ScaleLoss(persistent, transient, gpu_cv, kernel_cv, n)
