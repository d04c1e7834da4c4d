"""Stage 2a, the graph: job -> the operators of one micro-batch, with shapes, FLOPs, bytes and
saved activations, and the tensor-parallel collectives between them.

`ops` is the vocabulary (`Op`, `CommOp`, `Block`); `primitives` the op constructors and per-GPU
shape context every layer uses; one module per kind of block: `dense` (Megatron's transformer
layer), `attention` (its core), `embedding`, `head`, `eager` (the PyTorch autocast stack);
`tp_comm` the tensor-parallel collectives of Megatron-Core; `params` parameter counts; `flops`
model and hardware FLOPs per iteration; `blocks` assembles a job's `JobGraph` (memoized per
model and non-layout plan).

May import: `simulator.job` and the base modules.
Exports: `blocks.build_graph` / `JobGraph`, `ops.Op` / `CommOp` / `Block`, `params.*`, `flops.*`.
Where new things go: a new layer type (MoE experts and dispatch, a context-parallel attention)
is a new module (or sub-package, e.g. `graph/moe/`) built from `primitives`, chosen in
`blocks.build_blocks`; a new precision is a property of each op (its dtype and the recipe's table of
which ops run low), not branches through the layers.
"""
