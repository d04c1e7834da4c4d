"""Megatron-Core's global memory buffer under sequence parallelism.

The output layer (`ColumnParallelLinear` -> `LinearWithGradAccumulationAndAsyncCommunication`)
all-gathers its sequence-parallel input into a named buffer instead of a fresh tensor, in its
forward and again in its backward: `get_global_memory_buffer().get_tensor(dim_size, input.dtype,
"mpu")` (`megatron/core/tensor_parallel/layers.py` lines 474 and 511 at Megatron-LM 23e00ed,
core_r0.14.0). `GlobalMemoryBuffer.get_tensor` (`megatron/core/utils.py` lines 512-538) allocates
the buffer once, at the largest size asked, and keeps it for the life of the process: one 16-bit
[s / cp, b, h] tensor on the last stage (the whole sequence of the rank's context share), 128 MiB
for Llama 3 405B at 4K tokens. The transformer layers are Transformer Engine modules, which
gather into their own tensors; only the allgather MoE dispatcher also uses the buffer (sized by
its tokens; not modelled here).
"""

from __future__ import annotations

import numpy as np

from simulator.job.framework import semantics
from simulator.job.specs import Job


def global_buffer_bytes(job: Job) -> np.ndarray:
    """(pp,) bytes of the "mpu" buffer on one GPU of each stage."""
    p, par = job.parallel.pp, job.parallel
    out = np.zeros(p)
    if semantics(job.training.framework).sp_global_buffer and par.sequence_parallel and par.tp > 1:
        m = job.model
        tokens = job.training.micro_batch_size * m.seq_length // par.cp
        out[-1] = job.training.precision.base.bytes * tokens * m.hidden_size
    return out
