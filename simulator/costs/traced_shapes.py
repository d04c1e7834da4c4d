"""The traced side of a traced profile: its traces per shape, the job each was traced with, and
how a job's shapes, phases and parameters compare with them (simulator.costs.traced scales a
phase from the nearest trace of the same structure with these).

A phase's cost is a mean over the traced micro-batches and, where the profile records it apart,
the first micro-batch of gradient accumulation (`PhaseCost`). Kernel classes are matched to the
graph's op kinds (`GRAPH_CLASS`); GEMM-like classes scale with the analytic matmul time, the rest
with memory-bound time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from simulator.costs.analytic import AnalyticKernelModel
from simulator.costs.profile_format import Profile, TracePhase
from simulator.costs.traced_host import host_device_rows
from simulator.graph.blocks import JobGraph
from simulator.graph.ops import Op, OpKind
from simulator.graph.params import layer_params, padded_vocab
from simulator.job.enums import Framework, Norm, PositionEmbedding, Precision, Recompute
from simulator.job.specs import Job

MATMUL_CLASSES = frozenset({"gemm", "attention"})


GRAPH_CLASS = {OpKind.GEMM: "gemm", OpKind.BMM: "gemm", OpKind.FLASH_ATTENTION: "attention",
               OpKind.NORM: "norm", OpKind.SOFTMAX: "reduction", OpKind.CROSS_ENTROPY: "reduction",
               OpKind.DROPOUT: "elementwise", OpKind.ACTIVATION: "elementwise",
               OpKind.ELEMENTWISE: "elementwise", OpKind.EMBEDDING: "elementwise",
               OpKind.OPTIMIZER: "elementwise"}


PARAM_VARIANTS = frozenset({"grad_accum", "add"})  # graph ops whose work is per parameter


STRUCTURE = ("gated_mlp", "norm", "use_bias", "position_embedding", "tied_embeddings", "framework",
             "precision")


@dataclass(frozen=True)
class Instance:
    """One phase instance at one micro-batch position: GPU seconds, host seconds, launches."""

    gpu_s: float
    host_s: float
    kernels: float


@dataclass(frozen=True)
class PhaseCost:
    """One phase instance of the job, averaged over its micro-batches: GPU seconds, host
    seconds, kernel launches, source; `first` and `later` are the first micro-batch's instance
    and each later one's where they differ (with ``zero_grad(set_to_none=True)`` the first
    backward has no gradient to add to: autograd's AccumulateGrad keeps the new gradient, later
    micro-batches launch one add per parameter; the timeline needs the order, since a shorter
    first backward lets a slower host catch up with the GPU sooner)."""

    gpu_s: float
    host_s: float
    kernels: float
    source: str
    first: Instance | None = None
    later: Instance | None = None

    def at(self, first: bool) -> Instance:
        """The instance of the first micro-batch, or of a later one."""
        split = self.first if first else self.later
        return split if split is not None else Instance(self.gpu_s, self.host_s, self.kernels)


def split_cost(mean: Instance, first: Instance | None, traced_mbs: int, job_mbs: int,
               source: str) -> PhaseCost:
    """A phase's cost for a job of `job_mbs` micro-batches from a trace's mean over its
    `traced_mbs` and its first micro-batch's instance (None: no difference known). Later
    micro-batches are what the mean holds besides the first; a trace of one micro-batch says
    nothing about them (they are taken as the first)."""
    if first is None or traced_mbs < 2:
        return PhaseCost(mean.gpu_s, mean.host_s, mean.kernels, source)
    m = traced_mbs

    def later_of(a: float, b: float) -> float:
        return max(0.0, (m * a - b) / (m - 1))

    later = Instance(later_of(mean.gpu_s, first.gpu_s), later_of(mean.host_s, first.host_s),
                     later_of(mean.kernels, first.kernels))
    n = max(job_mbs, 1)

    def job_mean(a: float, b: float) -> float:
        return (a + (n - 1) * b) / n

    return PhaseCost(job_mean(first.gpu_s, later.gpu_s), job_mean(first.host_s, later.host_s),
                     job_mean(first.kernels, later.kernels), source, first, later)


@dataclass(frozen=True)
class Trace:
    row: dict[str, Any]
    phases: dict[TracePhase, dict[str, Any]]
    kernels: dict[TracePhase, list[dict[str, Any]]]


def _records(frame: pd.DataFrame | None) -> list[dict[str, Any]]:
    if frame is None:
        return []
    out: list[dict[str, Any]] = frame.to_dict("records")  # type: ignore[assignment]
    return out


def load_traces(profile: Profile) -> list[Trace]:
    phases: dict[str, dict[TracePhase, dict[str, Any]]] = defaultdict(dict)
    for r in _records(profile.phases):
        phases[r["trace"]][TracePhase(r["phase"])] = r
    kernels: dict[str, dict[TracePhase, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in _records(profile.phase_kernels):
        kernels[r["trace"]][TracePhase(r["phase"])].append(r)
    return [Trace(r, host_device_rows(r, phases[r["trace"]]), dict(kernels[r["trace"]]))
            for r in _records(profile.traces)]


def traced_job(base: Job, row: dict[str, Any]) -> Job:
    """The job a trace row describes (one pipeline stage, its micro-batches), on `base`'s
    hardware: used to build the analytic graph of the traced shape."""
    model = base.model.model_copy(update={
        "num_layers": int(row["layers"]), "hidden_size": int(row["hidden"]),
        "num_attention_heads": int(row["heads"]), "num_query_groups": int(row["query_groups"]),
        "ffn_hidden_size": int(row["ffn"]), "gated_mlp": bool(row["gated_mlp"]),
        "vocab_size": int(row["vocab"]), "seq_length": int(row["seq"]), "norm": Norm(row["norm"]),
        "use_bias": bool(row["use_bias"]),
        "position_embedding": PositionEmbedding(row["position_embedding"]),
        "tied_embeddings": bool(row["tied_embeddings"]),
        "hidden_dropout": float(row["hidden_dropout"]),
        "attention_dropout": float(row["attention_dropout"])})
    mb = int(row["micro_batch"])
    training = base.training.model_copy(update={
        "micro_batch_size": mb, "global_batch_size": mb * int(row["micro_batches"]),
        "recompute": Recompute(row["recompute"]), "flash_attention": bool(row["flash_attention"]),
        "precision": Precision(row["precision"]), "framework": Framework(row["framework"])})
    tp = int(row["tp"])
    parallel = base.parallel.model_copy(update={
        "tp": tp, "pp": 1, "dp": 1, "virtual_stages": 1,
        "sequence_parallel": bool(row["sequence_parallel"]), "first_stage_layers": None,
        "last_stage_layers": None})
    cluster = base.cluster.model_copy(update={"num_gpus": tp})
    return base.model_copy(update={"model": model, "training": training, "parallel": parallel,
                                   "cluster": cluster})


def structure(job: Job) -> tuple[Any, ...]:
    m, t = job.model, job.training
    return (int(m.gated_mlp), m.norm.value, int(m.use_bias), m.position_embedding.value,
            int(m.tied_embeddings), t.framework.value, t.precision.value,
            m.hidden_dropout > 0, m.attention_dropout > 0)


def row_structure(row: dict[str, Any]) -> tuple[Any, ...]:
    return (*(row[c] if isinstance(row[c], str) else int(row[c]) for c in STRUCTURE),
            float(row["hidden_dropout"]) > 0, float(row["attention_dropout"]) > 0)


def rank_vocab(job: Job, tp: int | None = None) -> int:
    """Rows of the embedding table (and logits columns) one tensor-parallel rank holds.

    Megatron-LM and Megatron-DeepSpeed pad the vocabulary to a multiple of 128 * tp
    (`megatron/training/tokenizer`, `_vocab_size_with_padding`); plain PyTorch and Hugging Face
    models (framework `pytorch`) keep it as it is. It matters for the traced stacks: GPT-2's
    50,257 columns make the logits GEMM unaligned, and on an H100 cuBLAS then runs an align-1
    CUTLASS kernel ~8x slower than the aligned one at 50,304 (the shared traces of
    ../shared/data/traces/h100: 19.2 ms vs 2.1 ms per mgpt_h4096 micro-batch's forward logits).
    (simulator.job.framework's `pads_vocab` states the same rule for the graph.)"""
    m = job.model
    tp = job.parallel.tp if tp is None else tp
    if job.training.framework is Framework.PYTORCH:
        return m.vocab_size // tp
    return padded_vocab(m, tp) // tp


def per_rank_shape(job: Job) -> tuple[int, ...]:
    m, p = job.model, job.parallel
    return (m.hidden_size, m.num_attention_heads // p.tp, m.query_groups // p.tp, m.ffn // p.tp,
            rank_vocab(job), m.seq_length, job.training.micro_batch_size,
            int(job.training.flash_attention), int(p.sequence_parallel and p.tp > 1))


def phase_ops(graph: JobGraph, phase: TracePhase, job: Job) -> tuple[Op, ...]:
    """The graph ops a traced phase corresponds to (the recompute re-runs the forward)."""
    layer, emb, head = graph.layer, graph.embedding, graph.head
    return {TracePhase.EMBEDDING_FORWARD: emb.forward, TracePhase.EMBEDDING_BACKWARD: emb.backward,
            TracePhase.LAYER_FORWARD: layer.forward, TracePhase.LAYER_BACKWARD: layer.backward,
            TracePhase.LAYER_RECOMPUTE: layer.recompute or layer.forward,
            TracePhase.HEAD_FORWARD: head.forward, TracePhase.HEAD_BACKWARD: head.backward,
            }.get(phase, ())


def block_params(job: Job, phase: TracePhase, layers: int | None = None) -> float:
    """Parameters per rank of the block a phase belongs to (all of one stage for the optimizer)."""
    m, tp = job.model, job.parallel.tp
    h = m.hidden_size
    norm = h * (2 if m.norm is Norm.LAYERNORM else 1)
    vocab = rank_vocab(job) * h
    pos = m.seq_length * h if m.position_embedding is PositionEmbedding.LEARNED else 0
    emb = vocab + pos
    head = norm + (0 if m.tied_embeddings else vocab)
    layer = layer_params(m).per_rank(tp)
    if phase in (TracePhase.EMBEDDING_FORWARD, TracePhase.EMBEDDING_BACKWARD):
        return emb
    if phase in (TracePhase.HEAD_FORWARD, TracePhase.HEAD_BACKWARD):
        return head
    if phase is TracePhase.OPTIMIZER:
        return (layers if layers is not None else m.num_layers) * layer + emb + head
    return layer


def param_tensors(job: Job, layers: int) -> int:
    """Parameter tensors of one stage holding `layers` layers and the embedding and head.

    The optimizer step's host work is per tensor, whatever the implementation: PyTorch's
    `torch.optim.AdamW` gathers every parameter, gradient and state tensor in a Python loop
    (`_init_group`) before a fused or foreach kernel, and its single-tensor path (the default on
    CPU) runs a dozen ops per tensor (`torch/optim/adamw.py`, `_single_tensor_adamw`). A layer
    holds Megatron's tensors: two norms (weight, and bias with LayerNorm), the QKV, output, MLP
    up and down weights, their biases with `use_bias` (`megatron/core/transformer/
    transformer_layer.py`); a stack that splits Q, K, V or gate and up into separate tensors
    has more per layer, which moves the layers' share of the step by at most that ratio."""
    m = job.model
    norm = 2 if m.norm is Norm.LAYERNORM else 1
    layer = 2 * norm + 4 * (2 if m.use_bias else 1)
    learned = m.position_embedding is PositionEmbedding.LEARNED
    other = 1 + int(learned) + norm + (0 if m.tied_embeddings else 1)
    return layers * layer + other


@dataclass
class ClassSums:
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    kernels: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def membound(self) -> float:
        return sum(v for c, v in self.seconds.items() if c not in MATMUL_CLASSES)


def analytic_by_class(ops: Iterable[Op], analytic: AnalyticKernelModel) -> ClassSums:
    """Analytic seconds (without the launch gap) and launches per kernel class, token-scaled
    ops only (gradient accumulation is per parameter)."""
    sums = ClassSums()
    launch = analytic.hardware.efficiency.kernel_launch_s
    for op in ops:
        if op.variant in PARAM_VARIANTS:
            continue
        cls = GRAPH_CLASS[op.kind]
        sums.seconds[cls] += max(0.0, analytic.seconds(op) - launch * op.kernels)
        sums.kernels[cls] += op.kernels
    return sums
