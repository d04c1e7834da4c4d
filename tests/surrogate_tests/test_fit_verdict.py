"""The surrogate's fits-in-memory verdict is the simulator's (issue 26, item 4): from what the
caching allocator must reserve for the predicted allocated peak, plus the context, not from the
peak alone (simulator.memory.fit)."""

from __future__ import annotations

import numpy as np

from simulator.job.specs import GiB
from simulator.memory.fit import memory_fit


def test_a_peak_that_fits_only_without_the_allocators_reservation_does_not_fit(tiny_model) -> None:
    model = tiny_model.model
    (name, spec), = model.hardware_.items()
    context, capacity = spec.reserved_memory_GiB * GiB, spec.memory_bytes
    # allocated + context just under the capacity (the old verdict: fits), and well under it
    peaks = np.array([capacity - 0.5 * GiB, capacity - 20 * GiB])
    verdict = model._fits(peaks, np.full(2, capacity), np.array([name, name]))
    expected = [memory_fit(p - context, context, capacity).fits for p in peaks]
    assert verdict.tolist() == expected == [False, True]
