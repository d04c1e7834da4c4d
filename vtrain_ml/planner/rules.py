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

from typing import Any

import numpy as np

from simulator.graph.params import final_norm_params, layer_params, padded_vocab, position_params
from simulator.job.enums import (
    CpCommType,
    DataParallelSharding,
    Recompute,
    Schedule,
    SoftmaxType,
    TokenDispatcher,
)
from simulator.job.framework import semantics
from simulator.job.limits import MAX_PIPELINE_STEPS
from simulator.job.param_bytes import param_bytes
from simulator.job.precision import precision_problems
from simulator.job.recompute_rules import recompute_problems
from simulator.job.specs import ClusterSpec, GiB, Job, ParallelPlan, TrainingSpec
from simulator.memory.states import OPTIMIZER_BYTES_PER_PARAM, grad_bytes_per_param, stage_param_counts
from vtrain_ml.planner.choices import parse_recompute
from vtrain_ml.planner.config import MEMORY_KNOBS
from vtrain_ml.planner.dimensions import PROBE_MODEL, precision_choice, uneven_split
from vtrain_ml.planner.space import SearchSpace, divisors, memory_settings
from vtrain_ml.planner.table import SpaceTable

FRAMEWORK = TrainingSpec.model_fields["framework"].default  # the framework of every searched job
# the model of a (hardware, precision) probe job in an architecture search (precision rules do
# not read the model of the plans a search builds)


def layout_grid(table: SpaceTable) -> np.ndarray:
    """Plans that break no rule of the job itself (everything but the GPU budget), on a grid."""
    return table.cached("layout", lambda: _layout_grid(table))


def _layout_grid(table: SpaceTable) -> np.ndarray:
    config = table.space.config
    assert not semantics(FRAMEWORK).eager_autocast  # whose extra rules (job_problems) are not here
    exists = table.model(lambda m: True, bool)
    heads = np.maximum(table.model(lambda m: m.num_attention_heads), 1)
    groups = np.maximum(table.model(lambda m: m.query_groups), 1)
    ffn, hidden = table.model(lambda m: m.ffn), table.model(lambda m: m.hidden_size)
    tp, pp, dp, mb, v = table.tp, table.pp, table.dp, table.micro_batch, table.virtual_stages
    interleaved = np.asarray(table.schedule_names)[table.schedule_code] == Schedule.INTERLEAVED_1F1B.value
    gbs = config.global_batch
    ok = exists & (hidden % heads == 0) & (heads % groups == 0)
    ok = ok & (heads % tp == 0) & (groups % tp == 0) & (ffn % tp == 0)
    ok = ok & ~((v > 1) & ~interleaved) & ~(interleaved & ((v < 2) | (pp < 2)))
    ok = ok & split_grid(table) & table.whole_dp & (gbs % (dp * mb) == 0)
    if table.space.sequence_parallel_both:  # tp 1 with and without it: one plan (space.SP_TWIN)
        ok = ok & ~((tp == 1) & table.flag("sequence_parallel"))
    ok = ok & ~(interleaved & ((gbs // (dp * mb)) % pp != 0))
    ok = ok & ((gbs // np.maximum(1, dp * mb)) * pp * v <= MAX_PIPELINE_STEPS)
    gpus = table.num_gpus
    per_node = table.hardware(lambda h, e: config.gpus_per_node or h.gpus_per_node, np.int64)
    ok = ok & ~((gpus > per_node) & (gpus % per_node != 0))
    supported = table.hardware(lambda h, e: h.supports_flash_attention, bool)
    ok = ok & ~(table.flag("flash_attention") & ~supported)
    return ok & precision_grid(table) & new_rules_grid(table) & recompute_grid(table)


def split_grid(table: SpaceTable) -> np.ndarray:
    """The layers split over pp x virtual stages: evenly, or (with `account_for_embedding_and_
    loss`) by `planner.dimensions.uneven_split`, which `partition_problems` accepts."""
    layers, pp, v = table.model(lambda m: m.num_layers), table.pp, table.virtual_stages
    even = layers % (pp * v) == 0
    if not table.space.config.space.account_for_embedding_and_loss:
        return even
    return even | (uneven_split_grid(table)[0] > 0)


def uneven_split_grid(table: SpaceTable) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) stage layers of each (model, pp, pipeline) (0, 0: an even split or none)."""
    def make() -> tuple[np.ndarray, np.ndarray]:
        specs, pp, v = table.model_specs, table.pp, table.virtual_stages
        shape = np.broadcast_shapes(specs.shape, pp.shape, v.shape)
        first, last = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
        for index in np.ndindex(*shape):
            model = specs[_at(index, specs.shape)]
            split = uneven_split(model, int(pp[_at(index, pp.shape)]), int(v[_at(index, v.shape)])) \
                if model is not None else None
            if split is not None:
                first[index], last[index] = split
        return first, last

    return table.cached("uneven split", make)


def _at(index: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(i if n > 1 else 0 for i, n in zip(index, shape, strict=True))


def precision_grid(table: SpaceTable) -> np.ndarray:
    """The GPU runs the plan's precision and recipe (`job_problems`' peak-FLOP/s check and
    `precision_problems`), and no earlier precision entry runs the same there
    (`precision_twin`), on the (hardware, precision) axes: one small job per pair asked."""
    def make() -> np.ndarray:
        space = table.space
        hw, prec = table.knob("hardware", None), table.knob("precision", None)
        shape = np.broadcast_shapes(hw.shape, prec.shape)
        ok = np.zeros(shape, dtype=bool)
        for index in np.ndindex(*shape):
            name = hw[_at(index, hw.shape)]
            choice = prec[_at(index, prec.shape)]
            ok[index] = not precision_pair_problems(space, name, choice) and space.precision_twin(
                choice, _probe_job(space, name, choice)) is None
        return ok

    return table.cached("precision", make)


def recompute_grid(table: SpaceTable) -> np.ndarray:
    """The recompute modules Megatron accepts with the plan's precision (`recompute_problems`:
    moe_act and layernorm are refused with delayed-scaling FP8), on the (hardware, precision,
    recompute) axes: one small job per combination asked (the modules the model lacks are
    refused with the space, planner.dimensions)."""
    def make() -> np.ndarray:
        space = table.space
        hw, prec = table.knob("hardware", None), table.knob("precision", None)
        rec = table.knob("recompute", Recompute.NONE.value)
        shape = np.broadcast_shapes(hw.shape, prec.shape, rec.shape)
        ok = np.ones(shape, dtype=bool)
        if not space.config.space.recompute_modules:
            return ok
        for index in np.ndindex(*shape):
            level, modules = parse_recompute(str(rec[_at(index, rec.shape)]))
            if modules is None:
                continue
            job = _probe_job(space, hw[_at(index, hw.shape)], prec[_at(index, prec.shape)],
                             recompute=level, recompute_modules=modules)
            ok[index] = not recompute_problems(job)
        return ok

    return table.cached("recompute_modules", make)


def _probe_job(space: SearchSpace, hardware: str | None, precision: object, **training: Any) -> Job:
    """A one-GPU job of the space's model (a small GPT for architecture searches) on a GPU type
    with a precision choice and `training` fields: what the per-axis rules check."""
    name = hardware or next(iter(space.entries))
    low = precision_choice(space.config, precision)
    return Job(model=space.base_model or PROBE_MODEL,
               training=TrainingSpec(global_batch_size=1, precision=low.precision,
                                     fp8_recipe=low.fp8_recipe, fp4_recipe=low.fp4_recipe, **training),
               parallel=ParallelPlan(), cluster=ClusterSpec(gpu=name, num_gpus=1),
               hardware=space.hardware_specs[name])


def precision_pair_problems(space: SearchSpace, hardware: str | None, precision: object) -> list[str]:
    """Why a GPU type cannot run a precision choice (empty: it can): the rules of a job that
    depend on nothing else for the plans a search builds (no fp8 options set)."""
    job = _probe_job(space, hardware, precision)
    problems = precision_problems(job)
    if job.training.precision not in job.hardware.peak_tflops:
        problems.append(f"precision={job.training.precision.value} is not supported on {job.hardware.name}")
    return problems


def precision_notes(space: SearchSpace) -> tuple[str, ...]:
    """One line per precision entry that runs on some of the space's GPUs exactly as an earlier
    entry does (`precision_twin`): where, and as what, it is searched once."""
    entries = [str(e).strip().lower() for e in space.config.space.precision or ()]
    twins: dict[tuple[str, str], list[str]] = {}
    for name in space.entries:
        for entry in entries:
            if precision_pair_problems(space, name, entry):
                continue
            twin = space.precision_twin(entry, _probe_job(space, name, entry))
            if twin is not None:
                twins.setdefault((entry, twin), []).append(name)
    return tuple(f"precision {entry} runs on {', '.join(gpus)} exactly as {twin} does (the same "
                 f"format): those plans are searched once, as {twin}"
                 for (entry, twin), gpus in twins.items())


def pipeline_notes(space: SearchSpace) -> tuple[str, ...]:
    """A line when the default pipeline sizes (those that divide the layers) leave out powers of
    two that Megatron's uneven split would allow (`account_for_embedding_and_loss`: the sizes
    that divide layers + 2 + MTP). DeepSeek-V3's 61 layers allow only pp 1 and 61 by default, so
    a search from flags alone would otherwise stay at pp 1 without saying why."""
    c, s, m = space.config, space.config.space, space.base_model
    if m is None or s.pp or s.account_for_embedding_and_loss:
        return ()
    plain = divisors(m.num_layers, c.max_gpus)
    more = [d for d in divisors(m.num_layers + 2 + m.mtp_num_layers, c.max_gpus) if d not in plain]
    if not any(d & (d - 1) == 0 for d in more):
        return ()
    return (f"pp: the default tries the sizes that divide the model's {m.num_layers} layers "
            f"({', '.join(map(str, plain))}); Megatron's uneven split (space.account_for_embedding_and_loss: "
            f"true, or --account-for-embedding-and-loss) would also try {', '.join(map(str, more))}",)


def hardware_notes(table: SpaceTable, feasible: np.ndarray) -> tuple[str, ...]:
    """A line per GPU type of a hardware list none of whose plans (of the table's rows) passes
    the rules and the static memory bound (`feasible`: their positions): the results then hold
    no plan on it, and without this line a user who asked "H100 or B200?" would see B200 rows and
    not why."""
    space = table.space
    if "hardware" not in table.names or len(space.entries) < 2:
        return ()
    on = table.flat(table.axis("hardware"), feasible) if len(feasible) else np.zeros(0, dtype=object)
    rows = "" if table.complete else f" of the {len(table):,} sampled"
    return tuple(f"{name}: none{rows} of its plans passes the rules and the static memory bound "
                 f"(model states within its {spec.memory_GiB:g} GiB), so no plan on it was simulated"
                 for name, spec in space.hardware_specs.items() if not (on == name).any())


def new_rules_grid(table: SpaceTable) -> np.ndarray:
    """`moe_cp_problems`, `_sharding_problems` and `_overlap_problems` of the plans a search
    builds: the rules that depend on the plan (the others are `planner.dimensions.model_problems`,
    refused before the search). Every entry is True for a space without issue 25's knobs."""
    space = table.space
    model = space.base_model
    ok = np.ones([1] * len(table.shape), dtype=bool)
    tp, cp, ep, etp = table.tp, table.cp, table.ep, table.expert_tp
    sp, flash = table.flag("sequence_parallel"), table.flag("flash_attention")
    comm = table.knob("cp_comm_type", CpCommType.P2P.value)
    ok = ok & ~(table.flag("tp_comm_overlap") & ~(sp & (tp > 1)))
    # --overlap-param-gather needs a sharded optimizer and overlapped reduction (validation)
    ok = ok & ~(table.flag("overlap_param_gather")
                & ~((table.sharding_level >= DataParallelSharding.OPTIM.level)
                    & table.flag("overlap_grad_reduce")))
    # the precision-aware optimizer needs the distributed optimizer (param_bytes'
    # optimizer_precision_problems)
    low_moments = ~(table.equals("exp_avg_dtype", "fp32", "fp32")
                    & table.equals("exp_avg_sq_dtype", "fp32", "fp32"))
    ok = ok & ~(low_moments & (table.sharding_level < DataParallelSharding.OPTIM.level))
    fused = table.model(lambda m: m.multi_latent_attention or m.window_size is not None
                        or m.softmax_type is not SoftmaxType.VANILLA, bool)
    ok = ok & ~((fused | (cp > 1)) & ~flash)
    a2a = (comm == CpCommType.A2A.value) & (cp > 1)
    heads = table.model(lambda m: m.num_attention_heads) // tp
    groups = table.model(lambda m: m.query_groups) // tp
    ok = ok & ~(a2a & ((heads % cp != 0) | (groups % cp != 0)))
    window = table.model(lambda m: m.window_size is not None, bool)
    ok = ok & ~(window & (cp > 1) & (comm != CpCommType.ALL_GATHER.value))
    if model is None:  # architecture searches: dense GPT models
        return ok
    if not model.is_moe:
        return ok
    ok = ok & ((tp * cp * table.dp) % (etp * ep) == 0)
    ok = ok & ~((ep * etp > 1) & (tp > 1) & ~sp)
    flex = table.equals("moe_token_dispatcher", TokenDispatcher.FLEX.value, TokenDispatcher.ALLTOALL.value)
    ok = ok & ~(flex & (etp > 1))
    # moe_overlap_ep_comm (simulator.job.moe_cp_rules): ep > 1, not the allgather dispatcher, no
    # full recompute, the interleaved schedule when pp > 1
    gather = table.equals("moe_token_dispatcher", TokenDispatcher.ALLGATHER.value,
                          TokenDispatcher.ALLTOALL.value)
    full = table.equals("recompute", Recompute.FULL.value, Recompute.NONE.value)
    interleaved = np.asarray(table.schedule_names)[table.schedule_code] == Schedule.INTERLEAVED_1F1B.value
    refused = (ep == 1) | gather | full | ((table.pp > 1) & ~interleaved)
    return ok & ~(table.flag("moe_overlap_ep_comm") & refused)

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
    """The fullest stage's parameters times the bytes per parameter of the plan's precision and
    sharding, as `static_memory_bytes` adds them (the same floats), plus the GPU's reserve."""
    dp, level = table.dp, table.sharding_level
    ranks = dp * table.cp  # FSDP's units and the dense optimizer states shard over dp x cp
    grads = table.precision(lambda c: grad_bytes_per_param(c.precision), np.int64) / np.where(
        level >= DataParallelSharding.OPTIM_GRADS.level, ranks, 1)
    weights = 2.0 / np.where(level >= DataParallelSharding.OPTIM_GRADS_PARAMS.level, ranks, 1)
    # the distributed optimizer's shards: dense states over dp x cp, experts' over expert_dp
    # (simulator.graph.params.optimizer_shards); the wider divides both, as the scalar bound
    expert_dp = np.maximum(1, table.tp * table.cp * dp // (table.expert_tp * table.ep))
    shard = np.where(level >= DataParallelSharding.OPTIM.level, np.maximum(ranks, expert_dp), 1)
    per_param = weights + grads + OPTIMIZER_BYTES_PER_PARAM / shard
    if any(name in table.names for name in MEMORY_KNOBS):
        per_param = _with_memory_settings(table, per_param, ranks, level, shard)
    reserved = table.hardware(lambda h, e: h.reserved_memory_GiB, float)
    return stage_params_grid(table) * per_param + reserved * GiB


def _with_memory_settings(table: SpaceTable, per_param: np.ndarray, ranks: np.ndarray, level: np.ndarray,
                          shard: np.ndarray) -> np.ndarray:
    """`static_memory_bytes`' bytes per parameter where a plan sets the memory knobs: the
    framework's exact bytes (simulator.job.param_bytes) where they are fewer, from one job per
    combination of the knobs that decide them (precision, GPU type, the memory knobs)."""
    space = table.space
    axes = [i for i, n in enumerate(table.names) if n in (*MEMORY_KNOBS, "precision", "hardware")]
    shape = [table.shape[i] if i in axes else 1 for i in range(len(table.shape))]
    roles = np.zeros((3, *shape))  # weights, gradients, sharded roles
    on = np.zeros(shape, dtype=bool)
    base = table.params(0)
    for index in np.ndindex(*shape):
        params = {**base, **{table.names[i]: space.knobs[i].choices[index[i]] for i in axes}}
        model = space._model(params)[0]
        if model is None:
            continue
        job = space.job(params, model)
        if memory_settings(job.training):
            pb = param_bytes(job)
            roles[(slice(None), *index)] = (pb.weights, pb.gradients, pb.sharded)
            on[index] = True
    exact = (roles[0] / np.where(level >= DataParallelSharding.OPTIM_GRADS_PARAMS.level, ranks, 1)
             + roles[1] / np.where(level >= DataParallelSharding.OPTIM_GRADS.level, ranks, 1)
             + roles[2] / shard)
    return np.where(on, np.minimum(per_param, exact), per_param)


def stage_params_grid(table: SpaceTable) -> np.ndarray:
    """`stage_param_counts(job).max()` on a grid: by formula for an even split of a dense model,
    else from one job per (model, tp, pp, pipeline, ep, expert_tp) combination."""
    model = table.space.base_model
    if table.space.config.space.account_for_embedding_and_loss or (
            model is not None and (model.is_moe or model.mtp_num_layers)):
        return table.cached("stage params", lambda: _stage_params_of_jobs(table))
    return _dense_stage_params(table)


def _stage_params_of_jobs(table: SpaceTable) -> np.ndarray:
    space = table.space
    axes = [i for i, n in enumerate(table.names) if n in STAGE_PARAM_KNOBS]
    shape = [table.shape[i] if i in axes else 1 for i in range(len(table.shape))]
    out = np.zeros(shape)
    base = table.params(0)
    for index in np.ndindex(*shape):
        params = {**base, **{table.names[i]: space.knobs[i].choices[index[i]] for i in axes}}
        model = space._model(params)[0]
        if model is not None:
            out[index] = float(stage_param_counts(space.job(params, model)).max())
    return out


STAGE_PARAM_KNOBS = ("num_layers", "hidden_size", "head_dim", "tp", "pp", "pipeline", "ep", "expert_tp")


def _dense_stage_params(table: SpaceTable) -> np.ndarray:
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
    return np.where(pp == 1, single, np.maximum(x + (vocab + pos), (x + norm) + vocab))


def valid_of(table: SpaceTable) -> np.ndarray:
    return layout_grid(table) & budget_grid(table)


def valid(table: SpaceTable) -> np.ndarray:
    """Rows that pass every rule of `SearchSpace.build` (`Candidate.valid`)."""
    return table.cached("valid", lambda: table.flat(valid_of(table)))


def feasible(table: SpaceTable) -> np.ndarray:
    """Valid rows whose model states fit in GPU memory (`Candidate.feasible`)."""
    capacity = table.hardware(lambda h, e: h.memory_bytes, float)
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
