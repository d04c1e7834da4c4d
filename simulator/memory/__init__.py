"""Stage 5, memory: bytes per GPU of each pipeline stage at its peak moment, term by term.

`states` holds the model states (weights, gradients, optimizer states per parameter under the
framework and the sharding) and the parameters per stage; `stages` the activations in flight from
the schedule's order, the forward / backward / optimizer moments and the named terms of each
stage's peak (`StageMemory`), what PyTorch's allocator reports and what must fit.

May import: `simulator.timeline` (the schedule's round plan), `simulator.graph`, `simulator.job`
and the base modules.
Exports: `stages.StageMemory` / `stage_memory_table` / `MemoryTable`, `states.stage_param_counts` /
`static_bytes_per_param` / `grad_bytes_per_param`.
Where new things go: a new sharding or precision's weight copies in `states`; a new kind of
activation or buffer (dispatched tokens, K/V exchange buffers) as a named term of `StageMemory`.
"""
