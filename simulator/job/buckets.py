"""The data-parallel gradient buckets a stack reduces behind the backward pass
(`parallel.overlap_grad_reduce`; simulator.timeline.tail overlaps them).

- Megatron-LM / Megatron-Core (`core/distributed/distributed_data_parallel.py`,
  `DistributedDataParallel.__init__`): without `--ddp-bucket-size` a bucket holds
  max(40M, 1M x dp) parameters ("if using very large dp_sizes, make buckets larger to ensure
  that chunks used in NCCL ring-reduce implementations are large enough to remain
  bandwidth-bound rather than latency-bound"; dp without cp, `get_data_parallel_world_size()`),
  in the gradient buffer's dtype. Only the first pipeline stage's first model chunk is
  bucketed: `bucket_size = None` on a pipeline rank > 0 ("data-parallel communication on
  these stages is not on the critical path") and for model chunks after the first
  (`training.py::get_model`: `disable_bucketing=(model_chunk_idx > 0)`); such a chunk reduces
  all its gradients in one collective when its last backward ends.
- PyTorch DDP (`bucket_cap_mb=25`) and Megatron-DeepSpeed (vTrain's `ddp_bucket_size`, null:
  25 MB, docs/compat.md): 25 MB buckets on every stage and chunk.

`parallel.bucket_size_mb` (MB of gradients) overrides the size, not which chunks are bucketed.
"""

from __future__ import annotations

import math

import numpy as np

from simulator.job.framework import semantics
from simulator.job.param_bytes import param_bytes
from simulator.job.specs import Job

DDP_BUCKET_BYTES = 25e6  # torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25)
MCORE_MIN_BUCKET_PARAMS = 40_000_000
MCORE_BUCKET_PARAMS_PER_DP_RANK = 1_000_000


def bucket_bytes(job: Job) -> float:
    """Bytes of gradients per bucket (the job's `bucket_size_mb`, else the stack's default)."""
    if job.parallel.bucket_size_mb is not None:
        return job.parallel.bucket_size_mb * 1e6
    if semantics(job.training.framework).megatron_core_buckets:
        params = max(MCORE_MIN_BUCKET_PARAMS, MCORE_BUCKET_PARAMS_PER_DP_RANK * job.dp)
        return float(params * param_bytes(job).gradients)
    return DDP_BUCKET_BYTES


def bucketed_chunks(job: Job) -> np.ndarray:
    """(pp, v) bool: which model chunks reduce in buckets (the others in one collective)."""
    p, v = job.parallel.pp, job.parallel.virtual_stages
    if not semantics(job.training.framework).megatron_core_buckets:
        return np.ones((p, v), dtype=bool)
    out = np.zeros((p, v), dtype=bool)
    out[0, 0] = True
    return out


def bucket_count(job: Job, grad_bytes_per_stage: np.ndarray) -> int:
    """Buckets of each bucketed chunk: the largest bucketed chunk's gradients (a stage's
    `grad_bytes_per_stage` over its v equal chunks) in buckets of `bucket_bytes`; the
    distributed optimizer gathers the parameters in the same buckets."""
    v = job.parallel.virtual_stages
    chunk_bytes = np.repeat(np.asarray(grad_bytes_per_stage, dtype=float)[:, None] / v, v, axis=1)
    largest = float(chunk_bytes[bucketed_chunks(job)].max(initial=0.0))
    return max(1, math.ceil(largest / bucket_bytes(job)))
