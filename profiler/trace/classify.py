"""Kernel classes, and whether a kernel's work scales with the tokens or with the parameters.

Classes come from the kernel's name as the CUDA libraries write it (cuBLAS ``nvjet_*`` /
``*gemm*``, CUTLASS, cuDNN's fused attention ``*sdpa*`` / ``flash``, NCCL ``nccl*``, PyTorch's
ATen kernels ``layer_norm``, ``reduce_kernel``, ``softmax``, ``direct_copy_kernel`` ...): library
names, not model names. The order of the rules matters (a cuDNN attention kernel's name also
contains ``wgmma``; an elementwise cast is a copy).

The scale tag decides how a kernel's time moves to another shape: ``params`` when a non-matmul
kernel's op reads a tensor shaped like one of the model's parameters (autocast's weight casts,
gradient casts and accumulation), else ``tokens``.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from functools import lru_cache

from simulator.costs.traced_shapes import rank_vocab
from simulator.job.enums import PositionEmbedding
from simulator.job.specs import Job


class KernelClass(StrEnum):
    GEMM = "gemm"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    NORM = "norm"
    REDUCTION = "reduction"
    COPY = "copy"  # copies and dtype casts
    COMMUNICATION = "communication"
    MEMSET = "memset"


class Scale(StrEnum):
    TOKENS = "tokens"
    PARAMS = "params"


_RULES: tuple[tuple[KernelClass, re.Pattern[str]], ...] = (
    (KernelClass.COMMUNICATION, re.compile(r"nccl|allreduce|all_reduce|allgather|reducescatter",
                                           re.I)),
    (KernelClass.ATTENTION, re.compile(r"sdpa|flash|fmha|attention|mha_|_mha|dot_do_o", re.I)),
    (KernelClass.GEMM, re.compile(r"gemm|nvjet|cutlass|cublas|xmma|wgmma|splitk|matmul", re.I)),
    (KernelClass.COPY, re.compile(r"copy|cast|convert|transpose|memcpy|CatArray", re.I)),
    (KernelClass.NORM, re.compile(r"layer_?norm|rms_?norm|GammaBeta|batch_?norm|group_?norm",
                                  re.I)),
    (KernelClass.REDUCTION, re.compile(r"reduce|softmax|SoftMax|nll_loss|cross_entropy|sort|scan|"
                                       r"argmax|topk|mean", re.I)),
)


@lru_cache(maxsize=4096)
def kernel_class(name: str, category: str) -> KernelClass:
    """The class of a GPU event from its name and trace category."""
    if "memset" in category:
        return KernelClass.MEMSET
    if "memcpy" in category:
        return KernelClass.COPY
    for cls, pattern in _RULES:
        if pattern.search(name):
            return cls
    return KernelClass.ELEMENTWISE


def parameter_shapes(job: Job) -> frozenset[tuple[int, ...]]:
    """Shapes of one tensor-parallel rank's parameters (and their transposes), for the tag."""
    m, t = job.model, job.parallel.tp
    h, d = m.hidden_size, m.head_dim
    q, kv = m.num_attention_heads // t * d, m.query_groups // t * d
    f = m.ffn // t
    linears = [(h, q + 2 * kv), (h, q), (h, kv), (q, h), (h, f), (h, 2 * f), (f, h)]
    shapes: set[tuple[int, ...]] = {(h,)}
    for n_in, n_out in linears:
        shapes |= {(n_out, n_in), (n_in, n_out), (n_out,)}
    vocab = rank_vocab(job)
    shapes |= {(vocab, h), (h, vocab), (m.vocab_size, h), (h, m.vocab_size)}
    if m.position_embedding is PositionEmbedding.LEARNED:
        shapes |= {(m.seq_length, h), (h, m.seq_length)}
    return frozenset(shapes)


@lru_cache(maxsize=65536)
def first_input_shape(dims: str) -> tuple[int, ...] | None:
    """The first input's shape from a trace's ``Input Dims`` text ("[[4096, 2048], [], ...]")."""
    if not dims:
        return None
    try:
        parsed = json.loads(dims)
    except json.JSONDecodeError:
        return None
    if not parsed or not isinstance(parsed[0], list):
        return None
    first = parsed[0]
    if not all(isinstance(x, int) for x in first):
        return None
    return tuple(first)


PER_TOKEN_CLASSES = frozenset({KernelClass.GEMM, KernelClass.ATTENTION, KernelClass.COMMUNICATION})


def scale_of(cls: KernelClass, dims: str, params: frozenset[tuple[int, ...]]) -> Scale:
    """Matmuls of a training step always work on the tokens (a weight-gradient GEMM's output
    is parameter-shaped, its reduction is over the tokens); other kernels are per parameter when
    their op's first input has a parameter's shape (an activation flattened to (tokens, hidden)
    can coincide with one when tokens equal a weight dimension: matmuls are exempt for that)."""
    if cls in PER_TOKEN_CLASSES:
        return Scale.TOKENS
    shape = first_input_shape(dims)
    return Scale.PARAMS if shape is not None and shape in params else Scale.TOKENS
