"""The surrogate's view of a job: one flat record of raw fields, plus closed-form physics features.

A record holds exactly `JOB_COLUMNS`, one scalar each, so that a table of jobs is a plain
DataFrame (Parquet, MLflow pyfunc input, the search's candidate batches). Fields a record does
not carry follow the model *family* convention of the presets: ``gated_mlp=True`` is a Llama-style
model (RMSNorm, no biases, untied embeddings, RoPE), ``gated_mlp=False`` a GPT/Megatron one
(LayerNorm, biases, tied embeddings, learned positions); Llama models train without dropout,
GPT ones with Megatron's 0.1. `job_to_record` warns when a job breaks
that convention, because the surrogate then predicts the convention's model, not the job's.

The columns of mixture of experts, multi-latent attention, multi-token prediction, context and
expert parallelism, low-precision recipes, sharding, CUDA graphs and NVLink domains
(`NEW_COLUMNS`, Megatron-Core's names, as the job's fields) are `surrogate.records`'; a table
saved before them reads as dense bf16/fp16 jobs without them (`with_new_defaults`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pandas as pd

from simulator.job.enums import Norm, PositionEmbedding
from simulator.job.specs import ClusterSpec, HardwareSpec, Job, ModelSpec, ParallelPlan, TrainingSpec, parse
from simulator.job.validation import validate_job
from surrogate.hardware import catalog_hardware
from surrogate.records import (
    NEW_BOOLEAN_COLUMNS,
    NEW_CATEGORICAL_COLUMNS,
    NEW_CLUSTER_COLUMNS,
    NEW_COLUMNS,
    NEW_DEFAULTS,
    NEW_MODEL_COLUMNS,
    NEW_PLAN_COLUMNS,
    NEW_TRAINING_COLUMNS,
    new_columns_of_job,
    new_fields_of_record,
)

log = logging.getLogger(__name__)

MODEL_COLUMNS = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups",
                 "ffn_hidden_size", "gated_mlp", "vocab_size", "seq_length")
TRAINING_COLUMNS = ("global_batch_size", "micro_batch_size", "precision", "recompute",
                    "flash_attention")
PLAN_COLUMNS = ("num_gpus", "tp", "pp", "dp", "virtual_stages", "schedule", "sequence_parallel",
                "distributed_optimizer", "overlap_grad_reduce")
CLUSTER_COLUMNS = ("gpu", "gpus_per_node", "intra_node_bandwidth_GBps", "inter_node_bandwidth_Gbps")
DENSE_COLUMNS: tuple[str, ...] = MODEL_COLUMNS + TRAINING_COLUMNS + PLAN_COLUMNS + CLUSTER_COLUMNS
JOB_COLUMNS: tuple[str, ...] = DENSE_COLUMNS + NEW_COLUMNS

CATEGORICAL_COLUMNS = ("precision", "recompute", "schedule", "gpu", *NEW_CATEGORICAL_COLUMNS)
BOOLEAN_COLUMNS = ("gated_mlp", "flash_attention", "sequence_parallel", "distributed_optimizer",
                   "overlap_grad_reduce", *NEW_BOOLEAN_COLUMNS)
INTEGER_COLUMNS = tuple(c for c in JOB_COLUMNS if c not in CATEGORICAL_COLUMNS + BOOLEAN_COLUMNS
                        and not c.endswith(("_GBps", "_Gbps")))

# The family convention for the ModelSpec fields a record does not carry (see module docstring).
_FAMILY: dict[bool, dict[str, Any]] = {
    True: {"norm": Norm.RMSNORM, "use_bias": False, "tied_embeddings": False,
           "position_embedding": PositionEmbedding.ROPE, "hidden_dropout": 0.0,
           "attention_dropout": 0.0},
    False: {"norm": Norm.LAYERNORM, "use_bias": True, "tied_embeddings": True,
            "position_embedding": PositionEmbedding.LEARNED, "hidden_dropout": 0.1,
            "attention_dropout": 0.1},
}


def job_to_record(job: Job) -> dict[str, object]:
    """The `JOB_COLUMNS` values of `job` (defaults resolved: dp, ffn, query groups, bandwidths).

    Raises `ConfigError` naming the field when the job uses something a record cannot hold
    (e.g. GPT-OSS's sliding-window attention), instead of predicting another job."""
    m, t, p, c = job.model, job.training, job.parallel, job.cluster
    family = _FAMILY[m.gated_mlp]
    off = [k for k, v in family.items() if getattr(m, k) != v]
    if off:
        log.warning("model %s breaks the %s family convention in %s; the surrogate predicts it as "
                    "if %s", m.name, "gated (Llama)" if m.gated_mlp else "GPT", ", ".join(off),
                    ", ".join(f"{k}={getattr(v, 'value', v)}" for k, v in family.items() if k in off))
    return {
        "num_layers": m.num_layers, "hidden_size": m.hidden_size,
        "num_attention_heads": m.num_attention_heads, "num_query_groups": m.query_groups,
        "ffn_hidden_size": m.ffn, "gated_mlp": m.gated_mlp, "vocab_size": m.vocab_size,
        "seq_length": m.seq_length,
        "global_batch_size": t.global_batch_size, "micro_batch_size": t.micro_batch_size,
        "precision": t.precision.value, "recompute": t.recompute.value,
        "flash_attention": t.flash_attention,
        "num_gpus": c.num_gpus, "tp": p.tp, "pp": p.pp, "dp": job.dp,
        "virtual_stages": p.virtual_stages, "schedule": p.schedule.value,
        "sequence_parallel": p.sequence_parallel, "distributed_optimizer": p.distributed_optimizer,
        "overlap_grad_reduce": p.overlap_grad_reduce,
        "gpu": job.hardware.name, "gpus_per_node": job.gpus_per_node,
        "intra_node_bandwidth_GBps": job.intra_node_bandwidth_Bps / 1e9,
        "inter_node_bandwidth_Gbps": job.inter_node_bandwidth_Bps * 8 / 1e9,
        **new_columns_of_job(job),
    }


def _scalar(value: object) -> object:
    """numpy / pandas scalars -> Python scalars (pydantic's strict ints reject numpy.int64)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def record_to_job(record: Mapping[str, object],
                  hardware: Mapping[str, HardwareSpec] | None = None) -> Job:
    """A validated `Job` from one record; raises `ConfigError` naming the bad field.

    `hardware` maps gpu names to specs (e.g. a calibrated file under the catalog's name); names
    it lacks are resolved from the catalog. A record without the `NEW_COLUMNS` (saved before
    them) is the dense job of their defaults.
    """
    from simulator.errors import ConfigError

    missing = [c for c in DENSE_COLUMNS if c not in record]
    if missing:
        raise ConfigError(f"record lacks column(s) {', '.join(missing)}; "
                          f"a record has {', '.join(JOB_COLUMNS)}")
    r = {k: _scalar(record[k]) if k in record else NEW_DEFAULTS[k] for k in JOB_COLUMNS}
    gpu = str(r["gpu"])
    spec = hardware[gpu] if hardware and gpu in hardware else catalog_hardware(gpu)
    new = new_fields_of_record(r)
    model = _model(r, new["model"])
    training = parse(TrainingSpec, {**{k: r[k] for k in TRAINING_COLUMNS}, **new["training"]},
                     "record")
    parallel = parse(ParallelPlan, {**{k: r[k] for k in PLAN_COLUMNS if k != "num_gpus"},
                                    **new["parallel"]}, "record")
    cluster = parse(ClusterSpec, {"gpu": spec.name, "num_gpus": r["num_gpus"],
                                  **{k: r[k] for k in CLUSTER_COLUMNS if k != "gpu"},
                                  **new["cluster"]}, "record")
    job = Job(model=model, training=training, parallel=parallel, cluster=cluster, hardware=spec)
    return validate_job(job)


def _model(r: Mapping[str, Any], new: Mapping[str, Any]) -> ModelSpec:
    return parse(ModelSpec, {"name": "surrogate-record", **{k: r[k] for k in MODEL_COLUMNS},
                             **_FAMILY[bool(r["gated_mlp"])], **new}, "record")


def model_of_record(record: Mapping[str, object]) -> ModelSpec:
    """The `ModelSpec` of a record's model columns (the physics asks the simulator's own
    functions about it: parameters, FLOPs, layer kinds)."""
    r = {k: _scalar(record[k]) if k in record else NEW_DEFAULTS.get(k) for k in JOB_COLUMNS}
    return _model(r, new_fields_of_record(r)["model"])


def with_new_defaults(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with every missing `NEW_COLUMNS` column at its dense default (a table saved before
    them: its jobs are dense, one precision family, no cp/ep); `df` itself when none is missing."""
    missing = [c for c in NEW_COLUMNS if c not in df.columns]
    if not missing:
        return df
    resolved = {"expert_tp": df["tp"], "nvlink_domain": df[["gpus_per_node", "num_gpus"]].min(axis=1)}
    return df.assign(**{c: resolved.get(c, NEW_DEFAULTS[c]) for c in missing})


def columns_with_new_defaults(columns: Mapping[str, Any]) -> Mapping[str, Any]:
    """`with_new_defaults` of a mapping of column arrays (the search's candidate batches built
    before these columns): constant columns at their dense defaults, choices as one code."""
    import numpy as np

    from surrogate.columns import Factorized

    missing = [c for c in NEW_COLUMNS if c not in columns]
    if not missing:
        return columns
    n = len(columns["num_layers"])
    out = dict(columns)
    for c in missing:
        value = NEW_DEFAULTS[c]
        out[c] = (Factorized(np.zeros(n, dtype=np.intp), (value,)) if isinstance(value, str)
                  else np.full(n, value))
    if "expert_tp" in missing:
        out["expert_tp"] = np.asarray(columns["tp"])
    if "nvlink_domain" in missing:
        out["nvlink_domain"] = np.minimum(np.asarray(columns["gpus_per_node"]),
                                          np.asarray(columns["num_gpus"]))
    return out


__all__ = ["BOOLEAN_COLUMNS", "CATEGORICAL_COLUMNS", "CLUSTER_COLUMNS", "DENSE_COLUMNS",
           "INTEGER_COLUMNS", "JOB_COLUMNS", "MODEL_COLUMNS", "NEW_CLUSTER_COLUMNS", "NEW_COLUMNS",
           "NEW_DEFAULTS", "NEW_MODEL_COLUMNS", "NEW_PLAN_COLUMNS", "NEW_TRAINING_COLUMNS",
           "PLAN_COLUMNS", "TRAINING_COLUMNS", "columns_with_new_defaults", "job_to_record",
           "model_of_record", "record_to_job", "with_new_defaults"]
