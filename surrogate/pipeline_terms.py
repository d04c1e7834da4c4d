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

from typing import Any, NamedTuple

from simulator.jit import njit
from surrogate.compiled_ops import Vec, ceil, floor, maximum, minimum, where
from surrogate.one_f_one_b import one_f_one_b_excess_s
from surrogate.physics import RECOMPUTE, SCHEDULES
from surrogate.slots import (
    DP,
    FIRST_STAGE_LAYERS,
    GATED_MLP,
    GLOBAL_BATCH_SIZE,
    HIDDEN_SIZE,
    LAST_STAGE_LAYERS,
    MICRO_BATCH_SIZE,
    MOE_FIRST_DENSE_LAYERS,
    MOE_LAYER_FREQ,
    NUM_ATTENTION_HEADS,
    NUM_LAYERS,
    NUM_QUERY_GROUPS,
    PP,
    RECOMPUTE_CODE,
    SCHEDULE,
    SEQ_LENGTH,
    SEQUENCE_PARALLEL,
    TP,
    VIRTUAL_STAGES,
    VOCAB_SIZE,
)

_GPIPE = float(SCHEDULES.index("gpipe"))
_FULL = float(RECOMPUTE.index("full"))  # full recompute: the backward re-runs the forward


class StageSplit(NamedTuple):
    """Transformer layers per stage: the first, a middle one (0 without middle stages), the
    last; and the mean (`num_layers / pp`) the dense form charges every stage."""

    first: Vec
    middle: Vec
    last: Vec
    mean: Vec
    uneven: Any  # bool: a first or last stage count is set


@njit(inline=True)
def stage_split(f: Any, new: Any) -> StageSplit:
    """`simulator.job.partition.stage_layers` over rows (a column of 0 is "not set");
    `f`, `new`: `surrogate.slots`."""
    L, p = f[NUM_LAYERS], f[PP]
    first, last = new[FIRST_STAGE_LAYERS], new[LAST_STAGE_LAYERS]
    has_first, has_last = first > 0, last > 0
    middle_stages = p - has_first - has_last
    rest = L - first - last
    middle = where(middle_stages > 0, floor(rest / maximum(middle_stages, 1.0)), 0.0)
    mean = L / p
    uneven = (has_first | has_last) & (p > 1)
    return StageSplit(where(has_first, first, middle), middle, where(has_last, last, middle),
                      mean, uneven)


class StageTimes(NamedTuple):
    """One micro-batch's forward and backward on the first, a middle and the last stage (the
    last without its head), and the routed-expert layers the first and last stage hold."""

    first: Vec
    middle: Vec
    last: Vec
    first_moe: Vec
    middle_moe: Vec
    last_moe: Vec


@njit(inline=True)
def stage_times(new: Any, split: StageSplit, mean_s: Vec, moe_s: Vec, dense_s: Vec, n_moe: Vec) -> StageTimes:
    """`StageTimes` of layers of their own kind: a MoE model's leading dense layers
    (`moe_first_dense_layers`: DeepSeek-V3's 3, Kimi K2's 1) sit on the first stage and the
    rest are MoE every `moe_layer_freq`-th layer (spread evenly here), a MoE layer taking
    `moe_s` and a dense one `dense_s`; a dense model's every layer `mean_s`. The mean layer
    (the dense form's) made a first stage of 12 DeepSeek-V3 layers, 3 of them dense, as slow
    as 12 mean ones: with every expert on each GPU (ep 1) a MoE layer is ~10x a dense one and
    the stage was charged 1.2x its time (-0.22 log against the simulator)."""
    freq = maximum(new[MOE_LAYER_FREQ], 1.0)
    lead = minimum(new[MOE_FIRST_DENSE_LAYERS], split.first)
    pattern_s = moe_s / freq + dense_s * (1.0 - 1.0 / freq)  # a layer past the leading ones
    moe = n_moe > 0
    first = where(moe, lead * dense_s + (split.first - lead) * pattern_s, split.first * mean_s)
    middle = where(moe, split.middle * pattern_s, split.middle * mean_s)
    last = where(moe, split.last * pattern_s, split.last * mean_s)
    return StageTimes(first, middle, last, where(moe, (split.first - lead) / freq, 0.0),
                      where(moe, split.middle / freq, 0.0), where(moe, split.last / freq, 0.0))


@njit(inline=True)
def uneven_time_s(f: Any, new: Any, split: StageSplit, times: StageTimes, mean_s: Vec, head_s: Vec,
                  mtp_s: Vec) -> Vec:
    """Seconds the stages' own layers (an uneven split, a MoE model's leading dense layers) or
    multi-token prediction add to the dense form's pipeline (negative where they even out the
    stages). A pipeline of stages taking S_i per micro-batch runs sum_i S_i + (m - 1) max_i S_i
    (fill, then the busiest stage's steady state) as GPipe, and as 1F1B where the last stage is
    the busiest; a busier earlier stage hides the others' fill under 1F1B, which
    `surrogate.one_f_one_b` walks.
    The dense form charges every stage `mean` layers of `mean_s` (one layer, one micro-batch,
    forward and backward) plus the head (`head_s`: the output layer and loss), its last stage;
    the stages take `times` (`stage_times`), the last also the head and the MTP depths
    (`mtp_s`: each a layer and its own output layer and loss, simulator.graph.mtp). The sum
    differs by `mtp_s`, the steady state by (m - 1) times the busiest stage's excess."""
    m = f[GLOBAL_BATCH_SIZE] / (f[DP] * f[MICRO_BATCH_SIZE])
    last_s = times.last + head_s + mtp_s
    busiest = maximum(maximum(times.first, times.middle), last_s)
    led = (new[MOE_FIRST_DENSE_LAYERS] > 0) & (f[PP] > 1)
    active = split.uneven | (mtp_s > 0) | led
    formula = where(active, (m - 1) * (busiest - (split.mean * mean_s + head_s)) + mtp_s, 0.0)
    # under 1F1B a busier first or middle stage hides the others' fill (surrogate.one_f_one_b)
    walk = active & (f[VIRTUAL_STAGES] == 1) & (f[SCHEDULE] != _GPIPE)
    share = where(f[RECOMPUTE_CODE] == _FULL, 0.25, 1.0 / 3.0)  # a forward's share: F / (F + B)
    return formula + one_f_one_b_excess_s(times.first, times.middle, last_s, f[PP], m, share, walk)


@njit(inline=True)
def uneven_memory_bytes(f: Any, split: StageSplit, layer_state_bytes: Vec, layer_act_bytes: Vec,
                        edge_bytes: Vec, cp: Vec) -> Vec:
    """Bytes an uneven split adds to the dense form's peak: each stage's layers' states
    (`layer_state_bytes` of weights, gradients and optimizer states a layer), the first stage's
    saved activations per layer (`layer_act_bytes`, all its micro-batches in flight: min(p, m)
    under 1F1B) and the embedding's states (`edge_bytes`; the last stage holds the output
    layer's, counted alike). Under 1F1B stage i holds min(p - i, m) micro-batches in flight
    (simulator.memory.stages; GPipe: all m on every stage), and the last stage also holds the
    output block's own memory (`output_layer_buffers_bytes`). The largest stage against the
    larger of an even split's first and last stage: the dense form's peak is either."""
    p = f[PP]
    m = f[GLOBAL_BATCH_SIZE] / (f[DP] * f[MICRO_BATCH_SIZE])
    gpipe = f[SCHEDULE] == _GPIPE
    held = maximum(minimum(p, m), 1.0)
    to_middle = where(gpipe, 1.0, minimum(p - 1, m) / held)
    to_last = where(gpipe, 1.0, 1.0 / held)
    out = output_layer_buffers_bytes(f, cp)
    first = split.first * (layer_state_bytes + layer_act_bytes) + edge_bytes
    middle = split.middle * (layer_state_bytes + layer_act_bytes * to_middle)
    last = split.last * (layer_state_bytes + layer_act_bytes * to_last) + edge_bytes + out
    even = maximum(split.mean * (layer_state_bytes + layer_act_bytes) + edge_bytes,
                   split.mean * (layer_state_bytes + layer_act_bytes * to_last) + edge_bytes + out)
    largest = maximum(maximum(first, middle), last)
    return where(split.uneven, largest - even, 0.0)


@njit(inline=True)
def vocab_per_rank(f: Any) -> Vec:
    """The vocabulary padded to a multiple of 128 per tp rank (Megatron's
    `make_vocab_size_divisible_by`), one rank's share: the output layer's rows on it."""
    t = f[TP]
    return ceil(f[VOCAB_SIZE] / (128 * t)) * 128.0


@njit(inline=True)
def output_layer_buffers_bytes(f: Any, cp: Vec) -> Vec:
    """What the last stage holds for its output block beyond a stage of layers: the loss's fp32
    softmax and, while it is made, the 16-bit logits (6 bytes per token and vocabulary entry of
    the rank, simulator.graph.head), the 16-bit placeholder of the output weight, (padded
    vocabulary / tp) x h (simulator.memory.te_dummy), and Megatron's buffer of the output layer's
    gathered input under sequence parallelism, b s h (simulator.memory.global_buffer); a rank
    holds its context share's tokens (b s / cp)."""
    t, h = f[TP], f[HIDDEN_SIZE]
    vocab = vocab_per_rank(f)
    tokens = f[MICRO_BATCH_SIZE] * f[SEQ_LENGTH] / cp
    gathered = where((f[SEQUENCE_PARALLEL] > 0) & (t > 1), tokens, 0.0)
    return 6.0 * tokens * vocab + 2.0 * (vocab + gathered) * h


@njit(inline=True)
def layer_params_per_gpu(f: Any, ffn: Vec) -> Vec:
    """Parameters of one transformer layer (of FFN `ffn`) on one GPU of its tp group, in the
    dense form's terms (surrogate.physics.stage_params: the tp-sharded weights and biases plus
    the replicated norms)."""
    h, a, g, t = f[HIDDEN_SIZE], f[NUM_ATTENTION_HEADS], f[NUM_QUERY_GROUPS], f[TP]
    gated = f[GATED_MLP]
    bias = 1 - gated
    qkv_out, up_out = h + 2 * g * h / a, ffn * (1 + gated)
    sharded = h * qkv_out + h * h + h * up_out + ffn * h + bias * (qkv_out + up_out)
    replicated = bias * 2 * h + 2 * h * (2 - gated)
    return sharded / t + replicated


@njit(inline=True)
def uneven_tail_s(f: Any, new: Any, split: StageSplit, times: StageTimes, dense_tail_s: Vec,
                  expert_tail_s: Vec, stage: Vec, layer_params: Vec, n_moe: Vec) -> Vec:
    """Seconds the stages' own layers (`uneven_time_s`) add to the iteration's tail: the
    simulator ends the iteration at the latest stage's end plus its own tail (simulator.simulate:
    max over stages of end + tail: the gradient reduction, the parameter gather and the optimizer
    step of that stage's parameters), and the dense form charges the tail of a stage of `mean`
    layers. A stage of more layers holds more parameters and reduces them after its last
    backward: a DeepSeek-V3 with 16 layers on the first of 16 stages reduces 4.2x the mean
    stage's expert gradients (sampled on 4,096 B200s: 2.2 s exposed where the mean stage's tail
    was 0.2 s).

    `dense_tail_s`: the dense form's tail of the mean stage (exposed dp communication, the
    optimizer step and their corrections), `stage` its parameters, `layer_params` a layer's
    there; `expert_tail_s`: the routed experts' tail of the mean stage (`n_moe` / pp MoE
    layers), in proportion to a stage's MoE layers. Under 1F1B the first stage ends last; a
    middle stage runs its last backward one first-stage backward earlier (2/3 of its time),
    the last stage after the first and the middle ones' backward, which its tail must outlast
    to matter. Negative where the first stage, which ends last, holds fewer layers than the
    mean and no other stage's tail outlasts it."""
    mean_moe = n_moe / f[PP]
    dense_per = dense_tail_s * layer_params / maximum(stage, 1.0)  # per layer more
    expert_per = expert_tail_s / maximum(mean_moe, 1e-9)  # per MoE layer more
    first = (split.first - split.mean) * dense_per + (times.first_moe - mean_moe) * expert_per
    middle = ((split.middle - split.mean) * dense_per + (times.middle_moe - mean_moe) * expert_per
              - times.first * (2.0 / 3.0))
    last = ((split.last - split.mean) * dense_per + (times.last_moe - mean_moe) * expert_per
            - (times.first + (f[PP] - 2) * times.middle) * (2.0 / 3.0))
    latest = maximum(maximum(first, where(f[PP] > 2, middle, first)), last)
    active = split.uneven | ((new[MOE_FIRST_DENSE_LAYERS] > 0) & (f[PP] > 1))
    return where(active, latest, 0.0)
