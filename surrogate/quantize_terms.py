"""The seconds a low-precision recipe's quantize kernels take (simulator.graph.quantize), per
layer and micro-batch: on the dense form's four projections (`quantize_s`), and what a MoE
layer's experts quantize beyond the dense-equivalent MLP the dense form charged
(`expert_quantize_s`). Written once over vectors, as `surrogate.extended_terms`."""

from __future__ import annotations

from typing import Any

from simulator.jit import njit
from surrogate.attention_terms import GpuHost
from surrogate.compiled_ops import Vec, maximum, skips, where
from surrogate.physics import Rows
from surrogate.slots import (
    A_AMAX,
    A_ELEMENT,
    A_LP_COPIES,
    A_QUANTIZE_BPS,
    A_TRANSPOSES,
    EP,
    EXPERT_TP,
    MOE_FFN_HIDDEN_SIZE,
    MOE_ROUTER_TOPK,
    NUM_EXPERTS,
)


@njit(inline=True)
def _quantize_bytes(numel: Vec, copies: Vec, aux: Any) -> Vec:
    """Bytes one quantize kernel moves (simulator.graph.quantize.quantize_op): it reads the 16-bit
    source (once more for an amax) and writes `copies` quantized copies with their scales."""
    return (2.0 * (1 + aux[A_AMAX]) + aux[A_ELEMENT] * copies) * numel


@njit(inline=True)
def _quantize_one_s(re: Rows, numel: Vec, copies: Vec, aux: Any) -> Vec:
    """One quantize kernel at the recipe's quantize bandwidth (`A_QUANTIZE_BPS`: the hardware
    file's measured `quantize_memory_efficiency`, as the simulator's kernel model costs a
    quantize or transpose kernel: its bytes, a Hadamard transform's FLOPs hidden under them)."""
    return _quantize_bytes(numel, copies, aux) / aux[A_QUANTIZE_BPS] + re.hw.launch_s


@njit(inline=True)
def quantize_s(re: Rows, low: Any, aux: Any, level: Vec) -> GpuHost:
    """GPU and host seconds per layer and micro-batch of a recipe's quantize kernels on the
    layer's four projections (simulator.graph.quantize.linear): each input in the forward
    (unless the fused norm before QKV / the MLP's up projection writes it, possible without an
    amax pass), each output gradient in the backward, on the local shard under sequence
    parallelism, one copy where Hopper's per-tensor FP8 transposes after the gather (then a
    transpose kernel); and each weight's cast, once per iteration (1/m of one per micro-batch;
    every micro-batch under ZeRO-3, which gathers the 16-bit weights again:
    simulator.graph.primitives.weight_casts_per_microbatch; `level`: the sharding level)."""
    if skips(low):
        return GpuHost(0.0, 0.0)
    T, hd = re.b * re.s, re.h / re.a
    heads, groups = re.a / re.t, re.g / re.t
    up = re.f / re.t * (1 + re.gated)
    sp = re.sp > 0
    shard = where(sp, 1.0 / re.t, 1.0)
    copies, transposes = aux[A_LP_COPIES], aux[A_TRANSPOSES] > 0
    gathered = where(sp & transposes, 1.0, copies)
    fused = aux[A_AMAX] == 0  # the norm writes QKV's and the up projection's quantized input
    inputs = (where(fused, 0.0, 2 * _quantize_one_s(re, T * shard * re.h, gathered, aux))
              + _quantize_one_s(re, T * heads * hd, copies, aux)
              + _quantize_one_s(re, T * re.f / re.t, copies, aux))
    grads = (_quantize_one_s(re, T * (heads + 2 * groups) * hd, copies, aux)
             + _quantize_one_s(re, T * up, copies, aux)
             + 2 * _quantize_one_s(re, T * shard * re.h, gathered, aux))
    flips = where(sp & transposes, 4.0, 0.0)  # the gathered inputs' and gradients' transposes
    transpose = flips * (2 * aux[A_ELEMENT] * T * re.h / aux[A_QUANTIZE_BPS] + re.hw.launch_s)
    again = where(re.recompute == 2, 1.0, 0.0)  # full recompute quantizes the inputs again
    casts = where(level >= 3, 1.0, 1.0 / maximum(re.m, 1.0))
    weights = re.h * (heads + 2 * groups) * hd + heads * hd * re.h + re.h * up + re.f / re.t * re.h
    cast = casts * (_quantize_bytes(weights, copies, aux) / aux[A_QUANTIZE_BPS] + 4 * re.hw.launch_s)
    kernels = where(fused, 2.0, 4.0) * (1 + again) + 4.0 + flips + 4 * casts
    # current scaling of a tensor that sequence parallelism gathers takes its amax over the tp
    # group first: a 4-byte all-reduce before QKV's and the up projection's input gathers and
    # before the two row-parallel output gradients' (simulator.graph.tp_comm), each launched
    # like any collective. Only their host launches are charged: their GPU time is latency,
    # which the simulator takes from measured NCCL tables (7.8-15 us on H100, 14-60 us on B200
    # at tp 2-8) and which this form's ring latency put at 1-5x that, widening the held-out
    # residual (std 0.0834 -> 0.0872 on runs/samples/moe-cp-40k-s15); the trees learn it
    amax_reduces = where(sp & (aux[A_AMAX] > 0) & (re.t > 1), 2.0 * (2 + again), 0.0)
    gpu = inputs * (1 + again) + grads + transpose + cast
    host = kernels * re.hw.host_s + amax_reduces * re.hw.coll_s
    return GpuHost(where(low, gpu, 0.0), where(low, host, 0.0))


@njit(inline=True)
def expert_quantize_s(re: Rows, new: Any, tokens: Vec, aux: Any, level: Vec, low: Any) -> Vec:
    """GPU seconds per MoE layer and micro-batch that the routed experts' quantize kernels take
    beyond the dense form's for the same MLP (`quantize_s` on the effective row): each grouped
    GEMM's input, output gradient and local weights, one launch over all local experts
    (simulator.graph.moe.experts: TE's multi-tensor quantize), on the rows the rank's experts
    compute (`tokens` x top-k x expert_tp, as the grouped GEMMs: moe_terms._expert_gemm_s),
    against the routed top-k x moe_ffn / tp MLP of the dense form's tokens. Missing until
    schema 24: FP4 MoE rows with tp 4 and expert_tp 1 quantize tp times the dense form's rows."""
    if skips(low):
        return 0.0
    experts, ep, etp = new[NUM_EXPERTS], new[EP], new[EXPERT_TP]
    local = experts / maximum(ep, 1.0)
    rows = local * maximum(tokens * new[MOE_ROUTER_TOPK] * etp * ep / maximum(experts, 1.0), 1.0)
    ffn = new[MOE_FFN_HIDDEN_SIZE] / maximum(etp, 1.0)
    up = ffn * (1 + re.gated)
    copies = aux[A_LP_COPIES]
    again = where(re.recompute == 2, 1.0, 0.0)
    casts = where(level >= 3, 1.0, 1.0 / maximum(re.m, 1.0))
    ours = ((_quantize_one_s(re, rows * re.h, copies, aux) + _quantize_one_s(re, rows * ffn, copies, aux))
            * (1 + again) + _quantize_one_s(re, rows * up, copies, aux)
            + _quantize_one_s(re, rows * re.h, copies, aux)
            + casts * (_quantize_bytes(local * re.h * (up + ffn), copies, aux) / aux[A_QUANTIZE_BPS]
                       + 2 * re.hw.launch_s))
    T = re.b * re.s
    shard = where(re.sp > 0, 1.0 / re.t, 1.0)
    gathered = where((re.sp > 0) & (aux[A_TRANSPOSES] > 0), 1.0, copies)
    routed = new[MOE_ROUTER_TOPK] * new[MOE_FFN_HIDDEN_SIZE] / re.t
    routed_up = routed * (1 + re.gated)
    fused = aux[A_AMAX] == 0
    charged = ((where(fused, 0.0, _quantize_one_s(re, T * shard * re.h, gathered, aux))
                + _quantize_one_s(re, T * routed, copies, aux)) * (1 + again)
               + _quantize_one_s(re, T * routed_up, copies, aux)
               + _quantize_one_s(re, T * shard * re.h, gathered, aux)
               + casts * (_quantize_bytes(re.h * (routed_up + routed), copies, aux) / aux[A_QUANTIZE_BPS]
                          + 2 * re.hw.launch_s))
    return where(low & (experts > 0), ours - charged, 0.0)
