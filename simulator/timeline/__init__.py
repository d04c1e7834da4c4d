"""Stage 4, the timeline: costed blocks -> one iteration's pipeline timeline and what follows it.

`lowering` composes block costs into per-stage, per-chunk micro-batch durations; `schedule` gives
each stage's order of forward and backward passes (GPipe, 1F1B, interleaved) and their
dependencies; `engine` runs the dependency-driven timeline in rounds (its loop compiled by
`engine_kernel` when numba is present, bit-identical); `tail` is what runs after the pipeline
(data-parallel gradient reduction, embedding and norm syncs, the optimizer step).

May import: `simulator.costs`, `simulator.graph`, `simulator.network`, `simulator.job` and the
base modules.
Exports: `engine.run_pipeline` / `round_plan` / `Timeline` / `RoundPlan`, `lowering.stage_costs` /
`StageCosts`, `tail.compute_tail` / `Tail`.
Where new things go: a new pipeline schedule in `schedule` (and its round plan in `engine`); a new
overlap of communication with compute in `lowering` (per block) or `tail` (after the pipeline).
"""
