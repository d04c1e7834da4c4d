"""The uneven pipeline split in the surrogate's closed form (`surrogate.extended`).

The dense form gives every stage `num_layers / pp` layers. Megatron's
`--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers`
(simulator.job.partition.stage_layers) give the first and/or last stage their own count and
split the rest evenly over the middle stages: DeepSeek-V3's 61 layers on pp 4 run 16, 15, 15,
15; a sampled Mixtral on pp 16 with 11 layers on the first stage runs 11 there and 3 on each
other stage. The busiest stage then sets the pace of the steady state and the peak memory, and
the dense form, which charges the mean stage, was 2.6x fast on such rows (2026-11-27: uneven
MoE rows of the MoE+CP space sat at +0.67 log against the closed form, even ones at +0.37).
Both terms are zero, to the bit, for an even split.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from surrogate.records import new_column as _col


class StageSplit(NamedTuple):
    """Transformer layers per stage: the first, a middle one (0 without middle stages), the
    last; and the mean (`num_layers / pp`) the dense form charges every stage."""

    first: np.ndarray
    middle: np.ndarray
    last: np.ndarray
    mean: np.ndarray
    uneven: np.ndarray  # bool: a first or last stage count is set


def stage_split(f: Mapping[str, np.ndarray], new: np.ndarray) -> StageSplit:
    """`simulator.job.partition.stage_layers` over rows (a column of 0 is "not set")."""
    L, p = f["num_layers"], f["pp"]
    first, last = _col(new, "first_stage_layers"), _col(new, "last_stage_layers")
    has_first, has_last = first > 0, last > 0
    middle_stages = p - has_first - has_last
    rest = L - first - last
    middle = np.where(middle_stages > 0, np.floor(rest / np.maximum(middle_stages, 1.0)), 0.0)
    mean = L / p
    uneven = (has_first | has_last) & (p > 1)
    return StageSplit(np.where(has_first, first, middle), middle, np.where(has_last, last, middle),
                      mean, uneven)


def uneven_time_s(f: Mapping[str, np.ndarray], split: StageSplit, layer_s: np.ndarray,
                  head_s: np.ndarray) -> np.ndarray:
    """Seconds an uneven split adds to the dense form's pipeline (negative where it evens out
    the stages). A pipeline of stages taking S_i per micro-batch runs sum_i S_i + (m - 1) max_i
    S_i (fill, then the busiest stage's steady state). The dense form charges every stage
    `mean` layers plus the head (`head_s`: the output layer and loss), its last stage; the
    split's stages take first, middle and last + head layer-times of `layer_s` (one layer, one
    micro-batch, forward and backward) and the same sum, so the difference is (m - 1) times
    that of the busiest stage."""
    m = f["global_batch_size"] / (f["dp"] * f["micro_batch_size"])
    busiest = np.maximum(np.maximum(split.first, split.middle) * layer_s,
                         split.last * layer_s + head_s)
    return np.where(split.uneven, (m - 1) * (busiest - (split.mean * layer_s + head_s)), 0.0)


def uneven_memory_bytes(f: Mapping[str, np.ndarray], split: StageSplit,
                        layer_state_bytes: np.ndarray, activation_bytes: np.ndarray,
                        edge_bytes: np.ndarray) -> np.ndarray:
    """Bytes an uneven split adds to the dense form's peak, its first stage of `mean` layers
    (`layer_state_bytes` of weights, gradients and optimizer states each, `activation_bytes`
    of saved activations in all) and the embedding's states (`edge_bytes`; the last stage holds
    the output layer's, counted alike). Under 1F1B stage i holds (p - i)/p of the first stage's
    micro-batches in flight (simulator.memory.stages), so a middle stage counts (p - 1)/p and
    the last 1/p of the first stage's activations per layer; the largest stage is the peak."""
    p = f["pp"]
    per_layer_act = activation_bytes / np.maximum(split.mean, 1e-9)
    first = split.first * (layer_state_bytes + per_layer_act) + edge_bytes
    middle = split.middle * (layer_state_bytes + per_layer_act * (p - 1) / p)
    last = split.last * (layer_state_bytes + per_layer_act / p) + edge_bytes
    even = split.mean * (layer_state_bytes + per_layer_act) + edge_bytes
    largest = np.maximum(np.maximum(first, middle), last)
    return np.where(split.uneven, largest - even, 0.0)


def layer_params_per_gpu(f: Mapping[str, np.ndarray]) -> np.ndarray:
    """Parameters of one transformer layer on one GPU of its tp group, in the dense form's
    terms (surrogate.physics.stage_params: the tp-sharded weights and biases plus the
    replicated norms)."""
    h, a, g, ffn, t = (f[k] for k in ("hidden_size", "num_attention_heads", "num_query_groups",
                                     "ffn_hidden_size", "tp"))
    gated = f["gated_mlp"]
    bias = 1 - gated
    qkv_out, up_out = h + 2 * g * h / a, ffn * (1 + gated)
    sharded = h * qkv_out + h * h + h * up_out + ffn * h + bias * (qkv_out + up_out)
    replicated = bias * 2 * h + 2 * h * (2 - gated)
    return sharded / t + replicated
