"""How the transformer layers are split over pipeline stages and their model chunks.

Even split: every chunk of every stage holds `layers / (pp * v)` layers. Uneven split (Megatron's
`--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers`,
`core/transformer/transformer_block.py::get_num_layers_to_build`): the first and/or last stage
hold the given number of layers and the rest are divided evenly over the middle stages. With
interleaving, a stage's layers are spread over its v chunks; when the first (last) stage holds
fewer than a multiple of v, the chunks nearest the embedding (head) hold one layer fewer -- the
layout of Meta's Llama 3 405B (Llama Team 2024, Sec. 3.3.2: "the first model chunk on the first
stage has only the embedding, and the last model chunk on the last stage has only output
projection and loss"), which Megatron expresses as `--account-for-embedding-in-pipeline-split`
and `--account-for-loss-in-pipeline-split`.
"""

from __future__ import annotations

import numpy as np

from simulator.job.specs import Job


def stage_layers(job: Job) -> np.ndarray:
    """(pp,) transformer layers held by each pipeline stage (integers; assumes a valid job)."""
    p, m = job.parallel.pp, job.model
    first, last = job.parallel.first_stage_layers, job.parallel.last_stage_layers
    if first is None and last is None:
        return np.full(p, m.num_layers // p, dtype=np.int64)
    rest = m.num_layers - (first or 0) - (last or 0)
    middle = p - (first is not None) - (last is not None)
    layers = np.full(p, rest // middle if middle > 0 else 0, dtype=np.int64)
    if first is not None:
        layers[0] = first
    if last is not None:
        layers[-1] = last
    return layers


def _spread(n: int, v: int, short_first: bool) -> list[int]:
    """n layers over v chunks, the shorter chunks first (embedding side) or last (head side)."""
    base, extra = divmod(n, v)
    sizes = [base] * (v - extra) + [base + 1] * extra
    return sizes if short_first else sizes[::-1]


def chunk_layers(job: Job) -> np.ndarray:
    """(pp, v) transformer layers of every model chunk of every stage: each stage's layers
    `_spread` over its chunks, computed for all stages at once (chunk c holds one layer more
    when c >= v - extra on the first stage, c < extra on the others)."""
    p, v = job.parallel.pp, job.parallel.virtual_stages
    per_stage = stage_layers(job)
    if v == 1:
        return per_stage[:, None]
    base, extra = np.divmod(per_stage, v)
    c = np.arange(v)
    longer = np.where(np.arange(p)[:, None] == 0, c >= v - extra[:, None], c < extra[:, None])
    return base[:, None] + longer


def partition_problems(job: Job) -> list[str]:
    """The uneven-split rules, as user-facing sentences (empty when the split is valid)."""
    m, par = job.model, job.parallel
    p, v = par.pp, par.virtual_stages
    first, last = par.first_stage_layers, par.last_stage_layers
    if first is None and last is None:
        if m.num_layers % (p * v):
            what = f"pp*virtual_stages = {p}*{v} = {p * v}" if v > 1 else f"pipeline_parallel_size={p}"
            return [f"num_layers={m.num_layers} is not divisible by {what}; use a divisor of the "
                    f"layer count, or set parallel.first_stage_layers / last_stage_layers"]
        return []
    named = " and ".join(f"{k}={x}" for k, x in (("first_stage_layers", first),
                                                  ("last_stage_layers", last)) if x is not None)
    if p < 2:
        return [f"{named} needs pipeline_parallel_size >= 2 (got {p}); remove it"]
    if first is not None and last is not None and p == 2 and first + last != m.num_layers:
        return [f"{named} must add up to num_layers={m.num_layers} with 2 pipeline stages"]
    rest = m.num_layers - (first or 0) - (last or 0)
    middle = p - (first is not None) - (last is not None)
    problems = []
    if middle and (rest <= 0 or rest % middle):
        problems.append(
            f"{named} leave {rest} layers for the {middle} other pipeline stages of "
            f"num_layers={m.num_layers}; choose values that leave a positive multiple of {middle}")
    elif middle and (rest // middle) % v:
        problems.append(
            f"{named} leave {rest // middle} layers per middle stage, not a multiple of "
            f"virtual_stages={v}; adjust them so that each middle stage's layers divide by {v}")
    for key, value in (("first_stage_layers", first), ("last_stage_layers", last)):
        if value is not None and value < v - 1:
            problems.append(
                f"parallel.{key}={value} is fewer than virtual_stages - 1 = {v - 1}: only the "
                f"chunk holding the {'embedding' if key.startswith('first') else 'head'} may be "
                f"empty; use at least {v - 1}")
    return problems
