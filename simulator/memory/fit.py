"""Does a job fit in GPU memory? Decided from what PyTorch's caching allocator must reserve.

Tensors hold the allocated peak (`StageMemory.allocated_bytes`, `torch.cuda.max_memory_allocated`),
but the device must hold the segments the allocator reserved with cudaMalloc to serve them. When a
cudaMalloc fails, the allocator frees its cached segments that hold no live block and retries
(``release_cached_blocks`` in PyTorch's c10/cuda/CUDACachingAllocator.cpp); what it can never give
back are the segments live blocks sit in, with their unusable remainders: every request is
rounded to 512 bytes, requests of 1-10 MiB are carved from 20 MiB segments (``kLargeBuffer``),
larger ones get segments rounded to 2 MiB (``kRoundLarge``), and a freed block inside a segment
that still holds a live one cannot be released. So a job fits only if

    allocated x (1 + ALLOCATOR_FLOOR) + context <= GPU memory

where the context is the CUDA context and communication buffers outside the allocator
(`HardwareSpec.reserved_memory_GiB`). ALLOCATOR_FLOOR is the least the allocator was measured to
hold beyond the allocated peak on a run under memory pressure, after releasing its cache: the two
H100 runs within 3 GiB of the limit (data/measured/h100/runs_fresh_process.csv) reserved 2.0%
(mgpt_h4096 mb3: 77.02 GiB for 75.53) and 2.3% (llama_h2048 mb8: 76.13 for 74.44) more than they
allocated; with memory to spare the allocator keeps 3-18% more (`stages.ALLOCATOR_OVERHEAD`, what
`max_memory_reserved` reports). By the allocated peak alone, a Megatron-Core job on one H100 at
76.5 GiB allocated (78.5 with the context) "fit" and ran out of memory (issue 26).

`decided_by` says which comparison settles the verdict: "allocated" when the allocated peak and
the context alone exceed the memory (no allocator could fit it), "reserved" otherwise (the
allocated peak fits; the reservation decides, fit or not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ALLOCATOR_FLOOR = 0.02


@dataclass(frozen=True)
class MemoryFit:
    allocated_bytes: float  # the fullest GPU's allocated peak
    required_bytes: float  # what the device must hold: the allocator's least reservation + context
    capacity_bytes: float
    decided_by: str  # "allocated" | "reserved"

    @property
    def fits(self) -> bool:
        return self.required_bytes <= self.capacity_bytes

    @property
    def overflow_bytes(self) -> float:
        return max(0.0, self.required_bytes - self.capacity_bytes)


def required_bytes(allocated_bytes: float, context_bytes: float) -> float:
    """What the device must hold for an allocated peak: the allocator's least reservation and the
    context outside it."""
    return allocated_bytes * (1.0 + ALLOCATOR_FLOOR) + context_bytes


def required_from_peak(peak_bytes: Any, context_bytes: Any) -> Any:
    """`required_bytes` of a reported peak (`SimulationResult.peak_memory_bytes`: the allocated
    peak plus the context), for callers that kept only the peak (the search's evaluations)."""
    return required_bytes(peak_bytes - context_bytes, context_bytes)


def memory_fit(allocated_bytes: float, context_bytes: float, capacity_bytes: float) -> MemoryFit:
    decided_by = "allocated" if allocated_bytes + context_bytes > capacity_bytes else "reserved"
    return MemoryFit(allocated_bytes, required_bytes(allocated_bytes, context_bytes), capacity_bytes,
                     decided_by)
