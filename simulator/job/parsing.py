"""Config mappings -> typed specs, with one user-facing line per problem.

Pydantic reports nested errors as tuples and type names; a user needs the key path, the value
and, for a mistyped key, the closest known one (including the names vTrain and Megatron-LM give
our fields). Split from `specs` so that the specs module holds only the specs.
"""

from __future__ import annotations

import difflib
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from simulator.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def parse(cls: type[M], data: Any, where: str) -> M:
    """Validate `data` into `cls`, turning pydantic's report into one `ConfigError` line.

    Unknown keys get the closest known key as a suggestion.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping of keys to values, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("; ".join(_describe(e, cls, where) for e in exc.errors())) from None


# Names other tools give our fields (vTrain's and Megatron-LM's arguments): an unknown key close
# to one of them is pointed at our field ("tensor_parallel_size" is `tp`, not "sequence_parallel").
FOREIGN_NAMES = {
    "tensor_parallel_size": "tp", "tensor_model_parallel_size": "tp",
    "pipeline_parallel_size": "pp", "pipeline_model_parallel_size": "pp",
    "data_parallel_size": "dp", "virtual_pipeline_model_parallel_size": "virtual_stages",
    "num_virtual_stages_per_pipeline_rank": "virtual_stages",
    "microbatch_group_size_per_virtual_pipeline_stage": "microbatch_group_size_per_vp_stage",
    "use_distributed_optimizer": "distributed_optimizer", "micro_batch": "micro_batch_size",
    "global_batch": "global_batch_size", "recompute_granularity": "recompute",
    "use_flash_attn": "flash_attention", "num_gpu": "num_gpus", "gpus": "num_gpus",
    "num_heads": "num_attention_heads", "hidden": "hidden_size", "layers": "num_layers",
    "seq_len": "seq_length", "max_position_embeddings": "seq_length", "vocab": "vocab_size",
    "ffn_hidden": "ffn_hidden_size", "intermediate_size": "ffn_hidden_size",
}


def _suggestion(key: str, cls: type[BaseModel]) -> str:
    """'; did you mean ...?' for an unknown key, from our field names and the foreign names of
    our fields; the closest of all wins."""
    fields = list(cls.model_fields)
    foreign = {name: ours for name, ours in FOREIGN_NAMES.items() if ours in fields}
    close = difflib.get_close_matches(key, fields + list(foreign), n=1, cutoff=0.5)
    if not close:
        return f"; known keys: {', '.join(fields)}"
    if close[0] in foreign:
        return f"; did you mean '{foreign[close[0]]}'? ({close[0]} in vTrain / Megatron-LM)"
    return f"; did you mean '{close[0]}'?"


def _describe(err: Any, cls: type[BaseModel], where: str) -> str:
    loc = ".".join(str(part) for part in err["loc"])
    field = f"{where}.{loc}" if loc else where
    if err["type"] == "extra_forbidden":
        return f"unknown key '{field}'{_suggestion(str(err['loc'][-1]), _model_at(cls, err['loc'][:-1]))}"
    if err["type"] == "missing":
        return f"missing required key '{field}'"
    value = err.get("input")
    return f"{field}={value!r}: {err['msg']}"


def _model_at(cls: type[BaseModel], path: tuple[Any, ...]) -> type[BaseModel]:
    """The config class a nested key path (e.g. cluster.topology.tiers.0) leads to."""
    for part in path:
        if isinstance(part, int) or part not in cls.model_fields:
            continue
        annotation = cls.model_fields[part].annotation
        inner = [a for a in (getattr(annotation, "__args__", None) or (annotation,))
                 for a in (getattr(a, "__args__", None) or (a,))
                 if isinstance(a, type) and issubclass(a, BaseModel)]
        if inner:
            cls = inner[0]
    return cls
