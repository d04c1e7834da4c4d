"""Which job fields a content hash of a dumped job leaves out: those added after hashes were
first recorded, while they hold their defaults (a calibrated hardware file keeps the
fingerprints of the rows it was fitted on, vtrain_ml.accuracy.runs)."""

from __future__ import annotations

from typing import Any

from simulator.job.specs import ClusterSpec, Frozen, ModelSpec, ParallelPlan, TrainingSpec

# The sections whose fields past `_FIRST_FIELDS` `without_unused_fields` leaves out while they
# hold their defaults, so that a job which does not use them hashes as before.
LATER_FIELDS: dict[str, type[Frozen]] = {"model": ModelSpec, "training": TrainingSpec,
                                         "parallel": ParallelPlan, "cluster": ClusterSpec}
_FIRST_FIELDS = {
    "model": {"name", "num_layers", "hidden_size", "num_attention_heads", "num_query_groups",
              "ffn_hidden_size", "gated_mlp", "activation_function", "vocab_size", "seq_length",
              "norm", "use_bias", "tied_embeddings", "position_embedding", "hidden_dropout",
              "attention_dropout", "published_params"},
    "training": {"global_batch_size", "micro_batch_size", "precision", "recompute",
                 "flash_attention", "optimizer", "framework", "fused_softmax",
                 "gradient_accumulation_fusion", "train_tokens"},
    "parallel": {"tp", "pp", "dp", "virtual_stages", "schedule", "sequence_parallel",
                 "distributed_optimizer", "overlap_grad_reduce", "bucket_size_mb",
                 "first_stage_layers", "last_stage_layers"},
    "cluster": {"gpu", "num_gpus", "gpus_per_node", "intra_node_bandwidth_GBps",
                "inter_node_bandwidth_Gbps", "price_per_gpu_hour_usd"},
}


# First fields whose default changed since: a job that leaves one unset hashes with the value
# the default dumped as then (the row says the same; what the default means is the simulator's).
# `bucket_size_mb`: 25.0 until None came to mean the framework's (simulator.job.buckets).
_FORMER_DEFAULTS: dict[tuple[str, str], Any] = {("parallel", "bucket_size_mb"): 25.0}


def without_unused_fields(dumped: dict[str, Any]) -> dict[str, Any]:
    """A job's `model_dump(mode="json")` without the later fields that hold their defaults."""
    out = dict(dumped)
    for section, cls in LATER_FIELDS.items():
        if not isinstance(out.get(section), dict):
            continue
        defaults = {name: field.default for name, field in cls.model_fields.items()}
        out[section] = {k: (_FORMER_DEFAULTS.get((section, k), v) if v is None else v)
                        for k, v in out[section].items()
                        if k in _FIRST_FIELDS[section] or v != _json(defaults.get(k))}
    return out


def _json(value: Any) -> Any:
    return value.value if hasattr(value, "value") else value
