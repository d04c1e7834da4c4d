"""The tensor-parallel collectives of Megatron-Core's parallel linear layers and embedding.

Sources: `core/tensor_parallel/layers.py` (`ColumnParallelLinear`, `RowParallelLinear`,
`LinearWithGradAccumulationAndAsyncCommunication`, `VocabParallelEmbedding`) and
`core/tensor_parallel/mappings.py`. Every buffer is the full [s, b, h] activation of a
micro-batch (`nbytes`); all-gather and reduce-scatter are sized by their gathered tensor.

Column-parallel linear (QKV, MLP up, logits):
- forward: nothing without sequence parallelism (`copy_to_tensor_model_parallel_region` is the
  identity); with SP an all-gather of the sequence-split input, which the GEMM waits for.
- backward without SP: the input gradient's all-reduce is launched asynchronously after the
  data-gradient GEMM and waited for after the weight-gradient GEMM (`allreduce_dgrad`).
- backward with SP: the input is all-gathered again for the weight gradient, asynchronously
  during the data-gradient GEMM; the input gradient is reduce-scattered asynchronously during the
  weight-gradient GEMM.
Row-parallel linear (attention projection, MLP down):
- forward: all-reduce of the output (`reduce_from_tensor_model_parallel_region`), or with SP a
  reduce-scatter (`reduce_scatter_to_sequence_parallel_region`); the next kernel waits for it.
- backward: nothing without SP; with SP the all-gather of the output gradient (blocking).
So per layer Megatron blocks on 2 forward collectives without SP (4 with SP) and on 0 backward
collectives without SP (2 with SP); the others hide behind a GEMM.

Without SP the overlap of the input gradient's all-reduce is a switch of the stack
(`FrameworkSemantics.async_tp_grad_allreduce`, Megatron-LM's
`--no-async-tensor-model-parallel-allreduce`): when it is off, `copy_to_tensor_model_parallel_region`
all-reduces the input gradient synchronously after the linear's backward, a blocking collective.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.graph.ops import CommGroup, CommOp
from simulator.job.enums import CollectiveKind

AR, AG, RS = CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER


@dataclass(frozen=True)
class TpComm:
    forward: tuple[CommOp, ...] = ()
    backward: tuple[CommOp, ...] = ()


def _op(name: str, kind: CollectiveKind, nbytes: float, overlap: str = "") -> CommOp:
    return CommOp(name, kind, nbytes, CommGroup.TP, overlap)


def column_parallel(name: str, nbytes: float, tp: int, sp: bool, async_allreduce: bool = True,
                    *, gathered: float | None = None, overlap_gemm: bool = False,
                    amax: bool = False) -> TpComm:
    """Collectives of a column-parallel linear `name` (its GEMMs are `name`, `name.dgrad`,
    `name.wgrad`). `async_allreduce`: without SP the input gradient's all-reduce overlaps the
    weight-gradient GEMM (else it blocks). Low precision (simulator.graph.quantize): `gathered`,
    the bytes of the quantized input TE all-gathers instead of the 16-bit one; `amax`, the
    scale needs the global amax of the sharded input first (a 4-byte all-reduce). Transformer
    Engine's userbuffers (`overlap_gemm`, Megatron's --tp-comm-overlap) pipeline the forward
    all-gather with the GEMM in chunks: only what outlasts the GEMM is exposed."""
    if tp == 1:
        return TpComm()
    if not sp:
        overlap = f"{name}.wgrad" if async_allreduce else ""
        return TpComm((), (_op(f"{name}.dgrad_all_reduce", AR, nbytes, overlap),))
    moved = nbytes if gathered is None else gathered
    forward = ((_op(f"{name}.amax_all_reduce", AR, 4.0),) if amax else ()) + \
        (_op(f"{name}.all_gather", AG, moved, name if overlap_gemm else ""),)
    return TpComm(forward,
                  (_op(f"{name}.wgrad_all_gather", AG, moved, f"{name}.dgrad"),
                   _op(f"{name}.dgrad_reduce_scatter", RS, nbytes, f"{name}.wgrad")))


def row_parallel(name: str, nbytes: float, tp: int, sp: bool, *, gathered: float | None = None,
                 overlap_gemm: bool = False, amax: bool = False) -> TpComm:
    """Collectives of a row-parallel linear `name`. `gathered`: the bytes of the quantized
    output gradient TE all-gathers under SP; `amax`: its global amax is all-reduced first;
    `overlap_gemm`: userbuffers overlap the forward reduce-scatter with the GEMM and the
    backward all-gather with the data-gradient GEMM."""
    if tp == 1:
        return TpComm()
    if not sp:
        return TpComm((_op(f"{name}.all_reduce", AR, nbytes),), ())
    moved = nbytes if gathered is None else gathered
    backward = ((_op(f"{name}.grad_amax_all_reduce", AR, 4.0),) if amax else ()) + \
        (_op(f"{name}.grad_all_gather", AG, moved, f"{name}.dgrad" if overlap_gemm else ""),)
    return TpComm((_op(f"{name}.reduce_scatter", RS, nbytes, name if overlap_gemm else ""),),
                  backward)


def embedding_comm(nbytes: float, tp: int, sp: bool, learned_positions: bool) -> TpComm:
    """`VocabParallelEmbedding`: each rank looks up its vocabulary shard and the partial
    embeddings are summed -- an all-reduce, or with SP a reduce-scatter
    (`reduce_scatter_embeddings`, only without learned positions: otherwise Megatron all-reduces,
    adds the positions and splits the sequence without communicating). With SP the backward
    all-gathers the sequence-split gradient (`scatter_to_sequence_parallel_region` /
    reduce-scatter backward)."""
    if tp == 1:
        return TpComm()
    if not sp:
        return TpComm((_op("embedding.all_reduce", AR, nbytes),), ())
    forward = _op("embedding.all_reduce", AR, nbytes) if learned_positions else \
        _op("embedding.reduce_scatter", RS, nbytes)
    return TpComm((forward,), (_op("embedding.grad_all_gather", AG, nbytes),))
