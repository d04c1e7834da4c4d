"""The surrogate's job columns (`surrogate.features.JOB_COLUMNS`) of many rows of a `SpaceTable`,
without building a `Job` per row.

The columns are whatever `surrogate.features.job_to_record` returns (the surrogate grows them:
issue 25 added MoE, MLA, cp, ep, recipes, sharding, ... by the job fields' names), so this module
does not list them all. Each column is read one of four ways:

1. *formula* (`FORMULAS`): the dense layout columns and the NVLink domain, from the table's
   knob grids -- the fast path of the 2.5M-plan case study 3;
2. *records on a few axes* (`AXES`): a column known to depend only on some knobs (the GPU type's
   bandwidths on `hardware`, the recipe on `hardware` and `precision`, the uneven pipeline split
   on the model, `pp` and `pipeline`, ...): one `job_to_record` per combination of those knobs'
   choices (a handful of jobs), so the record's own encoding is used whatever it is;
3. *model columns* (a `ModelSpec` field name, or `MODEL_DERIVED`): records of one job per model
   of the space (one, for a fixed model);
4. anything else -- a column this module does not know -- from `job_to_record` of every row's
   built job: slow (~0.3 ms per row) but correct; logged once, so that a new column gets a
   faster rule here.

tests/search_tests/test_table.py checks that every column equals `job_to_record` of the built
candidates on whole spaces, dense and MoE + CP.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.errors import ConfigError
from simulator.job.enums import DataParallelSharding
from simulator.job.specs import ModelSpec
from surrogate.columns import Factorized, factorize
from surrogate.features import job_to_record
from vtrain_ml.planner.choices import parse_recompute
from vtrain_ml.planner.rules import template
from vtrain_ml.planner.table import ARCHITECTURE_KNOBS, SpaceTable

log = logging.getLogger(__name__)

Grid = Callable[[SpaceTable], Any]


def _recompute(t: SpaceTable) -> Factorized:
    """The record's level (none / selective / full) of each `recompute` choice; the modules of
    `selective:<modules>` are the `recompute_modules` column's (AXES)."""
    choices = t.space.knobs[t.names.index("recompute")].choices
    levels = [parse_recompute(str(r))[0].value for r in choices]
    names = tuple(dict.fromkeys(levels))
    codes = np.array([names.index(level) for level in levels], dtype=np.intp)
    return Factorized(codes[np.asarray(t.code("recompute"), dtype=np.intp)], names)


def _nvlink_domain(t: SpaceTable) -> np.ndarray:
    """`Job.nvlink_domain`: the entry's (cluster's) domain, else the file's, else the node, at
    most the plan's GPUs."""
    per_node = t.space.config.gpus_per_node
    domain = t.hardware(lambda h, e: e.nvlink_domain or h.nvlink_domain or per_node or h.gpus_per_node,
                        np.int64)
    return np.minimum(domain, t.num_gpus)


FORMULAS: dict[str, Grid] = {
    "num_layers": lambda t: t.model(lambda m: m.num_layers),
    "hidden_size": lambda t: t.model(lambda m: m.hidden_size),
    "num_attention_heads": lambda t: t.model(lambda m: m.num_attention_heads),
    "num_query_groups": lambda t: t.model(lambda m: m.query_groups),
    "ffn_hidden_size": lambda t: t.model(lambda m: m.ffn),
    "gated_mlp": lambda t: t.model(lambda m: m.gated_mlp, bool),
    "vocab_size": lambda t: t.model(lambda m: m.vocab_size),
    "seq_length": lambda t: t.model(lambda m: m.seq_length),
    "global_batch_size": lambda t: np.asarray(t.space.config.global_batch),
    "micro_batch_size": lambda t: t.micro_batch,
    "recompute": _recompute,
    "flash_attention": lambda t: t.flag("flash_attention"),
    "num_gpus": lambda t: t.num_gpus, "tp": lambda t: t.tp, "pp": lambda t: t.pp, "dp": lambda t: t.dp,
    "virtual_stages": lambda t: t.virtual_stages,
    "schedule": lambda t: Factorized(np.asarray(t.schedule_code, dtype=np.intp), t.schedule_names),
    "sequence_parallel": lambda t: t.flag("sequence_parallel"),
    "distributed_optimizer": lambda t: t.sharding_level >= DataParallelSharding.OPTIM.level,
    "overlap_grad_reduce": lambda t: t.flag("overlap_grad_reduce"),
    "cp": lambda t: t.cp, "ep": lambda t: t.ep,
    "nvlink_domain": _nvlink_domain,
}

# Columns that depend on these knobs only (absent knobs are fixed): read from records.
_SPLIT = (*ARCHITECTURE_KNOBS, "pp", "pipeline")
AXES: dict[str, tuple[str, ...]] = {
    "gpu": ("hardware",), "gpus_per_node": ("hardware",), "intra_node_bandwidth_GBps": ("hardware",),
    "inter_node_bandwidth_Gbps": ("hardware",),
    "precision": ("precision",), "fp8_recipe": ("hardware", "precision"),
    "fp4_recipe": ("hardware", "precision"),
    "cuda_graphs": ("cuda_graphs",), "moe_token_dispatcher": ("moe_token_dispatcher",),
    "cp_comm_type": ("cp_comm_type",), "data_parallel_sharding": ("data_parallel_sharding",),
    "tp_comm_overlap": ("tp_comm_overlap",), "expert_tp": ("tp", "expert_tp"),
    "moe_overlap_ep_comm": ("moe_overlap_ep_comm",),
    "overlap_param_gather": ("overlap_param_gather",),
    "grad_reduce_in_fp32": ("grad_reduce_in_fp32",), "exp_avg_dtype": ("exp_avg_dtype",),
    "exp_avg_sq_dtype": ("exp_avg_sq_dtype",), "recompute_modules": ("recompute",),
    "first_stage_layers": _SPLIT, "last_stage_layers": _SPLIT,
}
# Record columns that hold a property of the model alone, under a name that is not a ModelSpec
# field (surrogate.records: the MoE layer pattern as leading dense layers).
MODEL_DERIVED = ("moe_first_dense_layers",)


def job_columns(table: SpaceTable, positions: np.ndarray) -> dict[str, Any]:
    """The surrogate's `JOB_COLUMNS` of the rows at `positions`, equal to `job_to_record` of
    their built jobs (see the module docstring)."""
    job = template(table)
    assert job is not None, "no valid plan in the space"
    names = list(job_to_record(job))
    digits = table.digits(positions)
    out: dict[str, Any] = {}
    unknown = []
    for name in names:
        if name in FORMULAS:
            out[name] = _gather(table, FORMULAS[name](table), digits)
        elif name in AXES:
            out[name] = _gather(table, _record_grid(table, AXES[name], name), digits)
        elif name in ModelSpec.model_fields or name in MODEL_DERIVED:
            out[name] = _gather(table, _record_grid(table, ARCHITECTURE_KNOBS, name), digits)
        else:
            unknown.append(name)
    if unknown:
        out |= _row_records(table, positions, unknown)
    return {name: out[name] for name in names}


def _gather(table: SpaceTable, grid: Any, digits: list[np.ndarray]) -> Any:
    if isinstance(grid, Factorized):
        return Factorized(np.asarray(table.gather(grid.codes, digits), dtype=np.intp), grid.uniques)
    return table.gather(grid, digits)


def _record_grid(table: SpaceTable, knobs: tuple[str, ...], column: str) -> Any:
    """Column `column` of the records of one job per combination of `knobs`' choices (the other
    knobs at row 0's values), on those knobs' axes; strings factorized."""
    records, shape = table.cached(f"records {knobs}", lambda: _records(table, knobs))
    values = [r[column] if r is not None else None for r in records]
    fallback = next((v for v in values if v is not None), 0)
    values = [fallback if v is None else v for v in values]
    if any(isinstance(v, str) for v in values):
        codes = factorize(np.asarray(values, dtype=object))
        return Factorized(np.asarray(codes.codes, dtype=np.intp).reshape(shape), codes.uniques)
    return np.asarray(values).reshape(shape)


def _records(table: SpaceTable, knobs: tuple[str, ...]) -> tuple[list[dict[str, Any] | None], list[int]]:
    space = table.space
    axes = [i for i, n in enumerate(table.names) if n in knobs]
    shape = [table.shape[i] if i in axes else 1 for i in range(len(table.shape))]
    base = table.params(0)
    records: list[dict[str, Any] | None] = []
    for index in np.ndindex(*shape):
        params = {**base, **{table.names[i]: space.knobs[i].choices[index[i]] for i in axes}}
        model = space._model(params)[0]
        try:
            records.append(job_to_record(space.job(params, model)) if model is not None else None)
        except ConfigError:  # a combination no valid row has (its value is never read)
            records.append(None)
    return records, shape


def _row_records(table: SpaceTable, positions: np.ndarray, columns: list[str]) -> dict[str, Any]:
    if not table.cached(f"warned {columns}", lambda: False):
        log.warning("job columns %s are not known to planner.columns: reading them from every row's "
                    "built job (slow); add them to FORMULAS or AXES", ", ".join(columns))
        table.memo[f"warned {columns}"] = True
    records = [job_to_record(job) for job in (table.candidate(int(p)).job for p in positions)
               if job is not None]
    out: dict[str, Any] = {}
    for name in columns:
        values = [r[name] for r in records]
        array = np.asarray(values, dtype=object if any(isinstance(v, str) for v in values) else None)
        out[name] = factorize(array) if array.dtype == object else array
    return out


__all__ = ["AXES", "FORMULAS", "MODEL_DERIVED", "job_columns"]
