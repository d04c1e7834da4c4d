"""The rules of `SearchSpace.build` on the grids of a `SpaceTable`.

Each rule is the vectorized form of one check a built candidate makes: the cross-field rules of
`simulator.job.validation.job_problems` for the jobs a search builds (Megatron-LM framework, even
pipeline split, dp given), the GPU budget, and the static memory bound
(`planner.space.static_memory_bytes`: the fullest stage's parameters as
`simulator.memory.states.stage_param_counts` counts them, with the simulator's own parameter
functions per model shape and tp). They decide which rows are scored; a plan that is simulated is
always rebuilt and checked by `SearchSpace.build`, and tests/search_tests/test_table.py checks
that these masks equal the built candidates' `valid` and `feasible` on whole spaces.
"""

from __future__ import annotations

import numpy as np

from simulator.graph.params import final_norm_params, layer_params, padded_vocab, position_params
from simulator.job.enums import Schedule
from simulator.job.framework import semantics
from simulator.job.specs import GiB, Job, TrainingSpec
from simulator.memory.states import OPTIMIZER_BYTES_PER_PARAM, grad_bytes_per_param
from vtrain_ml.planner.table import SpaceTable

FRAMEWORK = TrainingSpec.model_fields["framework"].default  # the framework of every searched job


def layout_grid(table: SpaceTable) -> np.ndarray:
    """Plans that break no rule of the job itself (everything but the GPU budget), on a grid."""
    return table.cached("layout", lambda: _layout_grid(table))


def _layout_grid(table: SpaceTable) -> np.ndarray:
    space, config = table.space, table.space.config
    assert not semantics(FRAMEWORK).eager_autocast  # whose extra rules (job_problems) are not here
    exists = table.model(lambda m: True, bool)
    heads = np.maximum(table.model(lambda m: m.num_attention_heads), 1)
    groups = np.maximum(table.model(lambda m: m.query_groups), 1)
    ffn, hidden = table.model(lambda m: m.ffn), table.model(lambda m: m.hidden_size)
    layers = table.model(lambda m: m.num_layers)
    tp, pp, dp, mb, v = table.tp, table.pp, table.dp, table.micro_batch, table.virtual_stages
    interleaved = np.asarray(table.schedule_names)[table.schedule_code] == Schedule.INTERLEAVED_1F1B.value
    gbs = config.global_batch
    ok = exists & (hidden % heads == 0) & (heads % groups == 0)
    ok = ok & (heads % tp == 0) & (groups % tp == 0) & (ffn % tp == 0)
    ok = ok & ~((v > 1) & ~interleaved) & ~(interleaved & ((v < 2) | (pp < 2)))
    ok = ok & (layers % (pp * v) == 0) & (gbs % (dp * mb) == 0)
    ok = ok & ~(interleaved & ((gbs // (dp * mb)) % pp != 0))
    gpus, per_node = table.num_gpus, config.gpus_per_node or space.hardware.gpus_per_node
    ok = ok & ~((gpus > per_node) & (gpus % per_node != 0))
    if not space.hardware.supports_flash_attention:
        ok = ok & ~table.flag("flash_attention")
    return ok & (config.precision in space.hardware.peak_tflops)


def budget_grid(table: SpaceTable) -> np.ndarray:
    """Plans within the GPU budget (all of it, with `use_all_gpus`), on a grid."""
    config = table.space.config
    if config.space.use_all_gpus:
        return table.num_gpus == config.max_gpus
    return table.num_gpus <= config.max_gpus


def static_memory_grid(table: SpaceTable) -> np.ndarray:
    """`static_memory_bytes` on a grid: weights, gradients and optimizer states of the fullest
    pipeline stage plus the reserved memory (a lower bound of the simulated peak)."""
    return table.cached("static", lambda: _static_memory_grid(table))


def _static_memory_grid(table: SpaceTable) -> np.ndarray:
    """`stage_param_counts(job).max()` for an even split: the first stage adds the word
    embedding's shard and the position embedding, the last the final norm and (untied, or with
    more than one stage) the output layer's shard; middle stages hold layers only. The additions
    run in `stage_param_counts`' order, so the bytes are the same floats."""
    pad = semantics(FRAMEWORK).pads_vocab
    specs, tp = table.model_specs, table.tp
    shape = np.broadcast_shapes(specs.shape, tp.shape)
    layer, vocab = np.zeros(shape), np.zeros(shape)
    for index in np.ndindex(*shape):
        model = specs[tuple(i if n > 1 else 0 for i, n in zip(index, specs.shape, strict=True))]
        t = int(tp[tuple(i if n > 1 else 0 for i, n in zip(index, tp.shape, strict=True))])
        if model is not None:
            layer[index] = layer_params(model).per_rank(t)
            vocab[index] = padded_vocab(model, t, pad) * model.hidden_size / t
    pos, norm = table.model(position_params, float), table.model(final_norm_params, float)
    untied = table.model(lambda m: not m.tied_embeddings, bool)
    pp = table.pp
    x = (table.model(lambda m: m.num_layers) // pp) * layer
    single = np.where(untied, ((x + (vocab + pos)) + norm) + vocab, (x + (vocab + pos)) + norm)
    most = np.where(pp == 1, single, np.maximum(x + (vocab + pos), (x + norm) + vocab))
    shard = np.where(table.flag("distributed_optimizer"), table.dp, 1)
    per_param = 2.0 + grad_bytes_per_param(table.space.config.precision) + OPTIMIZER_BYTES_PER_PARAM / shard
    return most * per_param + table.space.hardware.reserved_memory_GiB * GiB


def valid(table: SpaceTable) -> np.ndarray:
    """Rows that pass every rule of `SearchSpace.build` (`Candidate.valid`)."""
    return table.cached("valid", lambda: table.flat(layout_grid(table) & budget_grid(table)))


def feasible(table: SpaceTable) -> np.ndarray:
    """Valid rows whose model states fit in GPU memory (`Candidate.feasible`)."""
    capacity = table.space.hardware.memory_bytes
    return table.cached("feasible", lambda: valid(table) & table.flat(static_memory_grid(table) <= capacity))


def template(table: SpaceTable) -> Job | None:
    """One valid job of the space (built and checked): what every plan shares (the cluster,
    the price, the precision) comes from it. None when no row is valid."""
    def first() -> Job | None:
        for position in np.flatnonzero(valid(table))[:16]:
            candidate = table.candidate(int(position))
            if candidate.valid and candidate.job is not None:
                return candidate.job
        return None

    return table.cached("template", first)


__all__ = ["budget_grid", "feasible", "layout_grid", "static_memory_grid", "template", "valid"]
