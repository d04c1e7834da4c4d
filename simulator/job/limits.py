"""How much work one simulation may take: a stated limit instead of the kernel's OOM killer.

The timeline engine and the memory stage walk every forward and backward of every micro-batch on
every pipeline stage (and model chunk): the round plan holds one entry per step and a handful of
arrays over them. Measured with /usr/bin/time on MT-NLG 530B at pp=105 (this machine, 2026): 86 MB
for 105 thousand steps, 421 MB for 1.05 million, 1.9 GB for 5.25 million, i.e. about 350 bytes
per stage x micro-batch step, and a few seconds per million. A job of 262 million steps
(`--global-batch 9999600 --pp 105`) would need ~90 GB and was killed by the kernel without a
word. Real runs are far below the limit: Megatron-LM's largest published layouts (pp <= 128,
a few thousand micro-batches) stay under ~0.5 million steps.
"""

from __future__ import annotations

from simulator.job.specs import Job

MAX_PIPELINE_STEPS = 4_000_000  # stage x model chunk x micro-batch steps (~1.4 GB, ~15 s)
BYTES_PER_STEP = 350  # measured, see the module docstring


def size_problems(job: Job) -> list[str]:
    """The job's simulation would exceed `MAX_PIPELINE_STEPS` (one sentence, or nothing)."""
    t, p = job.training, job.parallel
    dp = job.cluster.num_gpus // (p.tp * p.cp * p.pp) if p.dp is None else p.dp
    micro_batches = t.global_batch_size // max(1, dp * t.micro_batch_size)
    steps = micro_batches * p.pp * p.virtual_stages
    if steps <= MAX_PIPELINE_STEPS:
        return []
    return [f"global_batch_size={t.global_batch_size} / (dp*micro_batch_size = {dp}*{t.micro_batch_size}) "
            f"= {micro_batches:,} micro-batches on pp={p.pp} stages x virtual_stages={p.virtual_stages} "
            f"is {steps:,} pipeline steps, about {steps * BYTES_PER_STEP / 1e9:,.0f} GB to simulate; the "
            f"limit is {MAX_PIPELINE_STEPS:,} steps (~{MAX_PIPELINE_STEPS * BYTES_PER_STEP / 1e9:.1f} GB): "
            f"use a smaller global batch or a larger micro-batch (past a few times pp micro-batches, "
            f"the iteration time grows linearly with their number)"]
