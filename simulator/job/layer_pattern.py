"""Which transformer layers differ, and how many of each kind every pipeline chunk holds.

A dense GPT/Llama job has one kind of layer. Mixture-of-experts models mix dense and MoE layers
(Megatron-Core's `--moe-layer-freq`: an int k makes every k-th layer MoE, counting from the
first, `layer_number % k == 0` with 0-based numbers as in `transformer_block.py`; a 0/1 list
gives each layer, e.g. DeepSeek-V3's three dense layers first), and GPT-OSS alternates
sliding-window and full attention (`--window-attn-skip-freq k`: layer_number (1-based) % k != 0
is windowed, `is_layer_window_attention` in core/transformer/utils.py). A chunk's layers are
consecutive in Megatron's order: chunk c of stage s follows every stage's chunks c' < c and the
stages s' < s of chunk c (`get_transformer_layer_offset`), so the kinds of each chunk follow from
the split of `simulator.job.partition.chunk_layers`.

A low-precision run with `--first-last-layers-bf16` keeps its first `num_layers_at_start_in_bf16`
and last `num_layers_at_end_in_bf16` layers (by global layer number, Megatron-Core
`fp8_utils.py::is_first_last_bf16_layer`) in 16 bits: they are a kind of their own
(`high_precision`), built without the recipe (simulator.graph.dense).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simulator.job.enums import Precision
from simulator.job.partition import chunk_layers
from simulator.job.specs import Job, ModelSpec


@dataclass(frozen=True, order=True)
class LayerKind:
    """What distinguishes one transformer layer's graph from another's."""

    moe: bool = False  # routed experts instead of the dense MLP
    window: bool = False  # sliding-window attention
    high_precision: bool = False  # a low-precision run's layer kept in bf16 (first/last layers)

    @property
    def label(self) -> str:
        parts = (["moe" if self.moe else "dense"] + (["swa"] if self.window else [])
                 + (["bf16"] if self.high_precision else []))
        return "+".join(parts)


DENSE = LayerKind()


def is_moe_layer(model: ModelSpec, index: int) -> bool:
    """Whether layer `index` (0-based) has routed experts."""
    if not model.is_moe:
        return False
    freq = model.moe_layer_freq
    if isinstance(freq, int):
        return index % freq == 0
    return bool(freq[index])


def is_window_layer(model: ModelSpec, index: int) -> bool:
    """Whether layer `index` (0-based) uses sliding-window attention."""
    if model.window_size is None:
        return False
    skip = model.window_attn_skip_freq
    return skip is None or (index + 1) % skip != 0


def layer_kinds(model: ModelSpec) -> list[LayerKind]:
    """The kind of every layer, in order."""
    return [LayerKind(is_moe_layer(model, i), is_window_layer(model, i))
            for i in range(model.num_layers)]


def job_layer_kinds(job: Job) -> list[LayerKind]:
    """`layer_kinds` of the job's model with the layers a low-precision run keeps in bf16
    (`training.first_last_layers_bf16`) marked `high_precision`."""
    kinds = layer_kinds(job.model)
    t = job.training
    if not (t.first_last_layers_bf16 and t.precision.is_low):
        return kinds
    start, end = t.num_layers_at_start_in_bf16, len(kinds) - t.num_layers_at_end_in_bf16
    return [replace(k, high_precision=True) if i < start or i >= end else k
            for i, k in enumerate(kinds)]


def mtp_kind(job: Job) -> LayerKind:
    """The kind of a multi-token-prediction depth's layer: the model's last layer's structure, in
    the MTP's own precision. Megatron-Core runs the MTP under the global fp8 context whatever
    `first_last_layers_bf16` says, and keeps it in bf16 under fp4
    (`multi_token_prediction.py`: "currently MTP only use global fp8 context", "currently
    ignoring FP4 in MTP layers")."""
    last = layer_kinds(job.model)[-1]
    return replace(last, high_precision=job.training.precision is Precision.FP4)


def chunk_kind_counts(job: Job) -> tuple[tuple[LayerKind, ...], np.ndarray]:
    """The distinct layer kinds (in order of first appearance, a low-precision run's bf16 kinds
    after the others) and (k, pp, v) how many layers of each kind every stage chunk holds;
    summed over the kinds it is `chunk_layers(job)`."""
    per_chunk = chunk_layers(job)
    kinds_of_layers = job_layer_kinds(job)
    distinct = tuple(sorted(dict.fromkeys(kinds_of_layers), key=lambda k: k.high_precision))
    if len(distinct) == 1:
        return distinct, per_chunk[None, :, :]
    index = {kind: i for i, kind in enumerate(distinct)}
    p, v = per_chunk.shape
    counts = np.zeros((len(distinct), p, v), dtype=np.int64)
    start = 0
    for c in range(v):
        for s in range(p):
            n = int(per_chunk[s, c])
            for kind in kinds_of_layers[start:start + n]:
                counts[index[kind], s, c] += 1
            start += n
    return distinct, counts


def moe_layer_count(model: ModelSpec) -> int:
    return sum(is_moe_layer(model, i) for i in range(model.num_layers))


def window_layer_count(model: ModelSpec) -> int:
    return sum(is_window_layer(model, i) for i in range(model.num_layers))


def stage_kind_counts(job: Job) -> tuple[tuple[LayerKind, ...], np.ndarray]:
    """The layer kinds and (k, pp) how many layers of each kind every stage holds."""
    kinds, counts = chunk_kind_counts(job)
    return kinds, counts.sum(axis=2)
