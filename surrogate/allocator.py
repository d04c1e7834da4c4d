"""Keep a large batch's freed memory for the next one (glibc's ``M_TOP_PAD``).

A batch prediction allocates its intermediate matrices afresh for every chunk of rows (the
row fields, the effective rows, the new columns, the lookups, the feature matrix: ~40 MB per
20,000 rows of the MoE + cp space) and frees them at the chunk's end. glibc keeps only 128 KB
of freed memory at the top of its heap (``M_TOP_PAD``) and hands the rest back to the kernel,
so the next chunk takes page faults and zeroed pages for the same memory again. Measured on
20,000 rows of the MoE + cp space, one thread (2026-11-28, best of 40 calls, two runs each):
75.0 ms per chunk with glibc's default, 66.0 ms with a 64 MiB pad; the dense space's 29.1 ms
chunk does not change (28.9). `retain_freed_memory` sets the pad once per process, from the
first batch large enough to be cut into chunks (`surrogate.model.PARALLEL_ROWS`): a process
that predicts batches then holds up to 64 MiB more than it uses in each of glibc's heaps (the
main one, and one per thread that ran a chunk, reused by later threads).

``VTRAIN_NO_MALLOPT=1`` leaves the allocator alone, as does a ``MALLOC_TOP_PAD_`` the user set
(glibc reads it at start). Elsewhere than glibc (musl, macOS, Windows) there is nothing to set.
"""

from __future__ import annotations

import ctypes
import os
from functools import cache

M_TOP_PAD = -2  # glibc's <malloc.h> parameter number
PAD_BYTES = 64 * 2**20


@cache
def retain_freed_memory(pad_bytes: int = PAD_BYTES) -> bool:
    """Set glibc's ``M_TOP_PAD`` to `pad_bytes` (once per process); whether it was set."""
    if os.environ.get("VTRAIN_NO_MALLOPT", "") not in ("", "0") or "MALLOC_TOP_PAD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # not glibc (or no C library to load)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_TOP_PAD, pad_bytes))
