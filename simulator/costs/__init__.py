"""Stage 3, costs: an op -> seconds, a block -> its cost for one micro-batch.

Kernel models share one protocol (`analytic.KernelModel`: op -> `OpCost` with its source):
`analytic` (roofline with a tile/wave/depth GEMM efficiency, from the hardware file), `profiled`
(a profile's measured ops, `interpolation` between them, its NCCL tables) and `traced` (phases
of traces of the real stack, `traced_shapes` to scale them to other shapes, `traced_host` and
`host_timeline` for the host's lead over the GPU). `profile_format` is the on-disk profile
schema. `blocks.cost_block` combines a block's op costs, its collectives and the host dispatch
window into a `BlockCost`.

May import: `simulator.graph`, `simulator.network`, `simulator.job` and the base modules.
Exports: `analytic.AnalyticKernelModel` / `KernelModel` / `OpCost` / `CostSource`,
`blocks.BlockCost` / `cost_block`, `profiled.kernel_model_from_profile` / `network_from_profile`,
`traced.traced_costs` / `TracedCosts`, `profile_format.read_profile` / `Profile`.
Where new things go: a new op kind's analytic cost (or a precision's GEMM efficiency and
quantization kernels) in `analytic`; a new source of measurements as a new `KernelModel`.
"""
