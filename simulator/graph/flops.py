"""FLOPs per iteration: the model's (for MFU) and what the hardware runs (for HFU).

Model FLOPs follow Narayanan et al. 2021 (Sec. 5.1, Appendix): matmul FLOPs only, forward plus
twice for backward, generalized to GQA and gated MLPs; for a GPT model they equal
72 B s l h^2 (1 + s/(6h) + V/(12 l h)). Hardware FLOPs add the recomputed forward (full: whole
layers; selective: the attention score and value matmuls -- flash attention included, since
Megatron checkpoints the core attention whatever its kernel and runs its forward again).
They are properties of the job's graph, not of a simulation's timing, so they live here and the
report divides them by its time (simulator.report.metrics).
"""

from __future__ import annotations

from simulator.job.enums import Recompute
from simulator.job.specs import Job, ModelSpec


def layer_forward_flops_per_token(model: ModelSpec) -> float:
    h, d, f = model.hidden_size, model.head_dim, model.ffn
    qkv = h * (h + 2 * model.query_groups * d)
    up = h * f * (2 if model.gated_mlp else 1)
    attention = 2 * model.seq_length * h  # QK^T and attention x V
    return 2.0 * (qkv + h * h + up + f * h + attention)


def model_flops_per_iteration(job: Job) -> float:
    m = job.model
    tokens = job.training.global_batch_size * m.seq_length
    forward = tokens * (m.num_layers * layer_forward_flops_per_token(m) + 2.0 * m.hidden_size * m.vocab_size)
    return 3.0 * forward


def hardware_flops_per_iteration(job: Job) -> float:
    m = job.model
    tokens = job.training.global_batch_size * m.seq_length
    extra = {
        Recompute.NONE: 0.0,
        Recompute.SELECTIVE: 4.0 * m.seq_length * m.hidden_size,
        Recompute.FULL: layer_forward_flops_per_token(m),
    }[job.training.recompute]
    return model_flops_per_iteration(job) + tokens * m.num_layers * extra
