"""vTrain's configuration files with vTrain's semantics (github.com/VIA-Research/vTrain, MIT).

vTrain reads a flat JSON file with `vTrainConfig.load_from_file` (src/config.py): `json.load`, then
`vTrainConfig(**data)`, whose `__init__` gives every key a default and whose `validate_config`

1. derives the one missing value of num_gpus / tensor_parallel_size / data_parallel_size /
   pipeline_parallel_size (num_gpus = tp * pp * dp; a missing parallel size = num_gpus // the
   product of the other two, floor division);
2. asserts num_gpus == tp * pp * dp when all four are given;
3. when pipeline_parallel_size <= 1, replaces micro_batch_size by
   global_batch_size // data_parallel_size (and prints that it did);
4. asserts global_batch_size % dp == 0, global_batch_size % micro_batch_size == 0,
   num_layers % pp == 0, hidden_size % num_attention_heads == 0, num_attention_heads % tp == 0.

This module does the same, as pure functions: `parse_vtrain` (keys and value types),
`validate_vtrain` (steps 1-4, returning the derived config and notes that say what was derived),
`vtrain_to_native` (the native job sections). Where vTrain would assert or crash, the error is a
`VTrainRejects` -- a `ConfigError` that is also an `AssertionError`, as vTrain's is -- saying that
vTrain rejects the file too and how to fix it.

What the predictor (src/predictor.py) then simulates, and how we map it: a Megatron-DeepSpeed GPT
(`ShardedGptModel`: learned positions, LayerNorm, GeLU MLP of 4h, biases) in fp16; use_checkpoint
is full activation recomputation; `(global_batch_size // dp) // micro_batch_size` micro-batches
(`create_layer_graph`). vTrain always simulates 1F1B whatever pipeline_scheduling says (its graph
builder has no other schedule); we simulate the schedule the file names and say so.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from simulator.errors import ConfigError

VTRAIN_SOURCE = "vTrain's src/config.py, vTrainConfig.validate_config"
VTRAIN_MODEL_ARCH = "ShardedGptModel"  # the only model vTrain's predictor builds
VTRAIN_SCHEDULES = {"1f1b": "1f1b", "gpipe": "gpipe"}


class VTrainRejects(ConfigError, AssertionError):
    """A file vTrain itself rejects (its `validate_config` asserts or fails on it).

    Also an `AssertionError`, so that scripts written for vTrain that catch its assertion keep
    working with `vtrain_ml.compat.vtrain`."""


class VTrainKeyError(ConfigError, TypeError):
    """An unknown key: vTrain's `vTrainConfig(**data)` raises TypeError on it."""


@dataclass(frozen=True)
class VTrainConfig:
    """vTrainConfig.__init__'s keys, order and defaults (src/config.py), unchanged."""

    num_gpus: int | None = None
    tensor_parallel_size: int | None = None
    data_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    gpu_name: str = "A100"
    global_batch_size: int = 1920
    micro_batch_size: int | None = None
    model_arch: str = VTRAIN_MODEL_ARCH
    num_layers: int = 105
    hidden_size: int = 20480
    num_attention_heads: int = 128
    max_length: int = 2048
    vocab_size: int = 50257
    use_gradient_bucket: bool = False
    use_checkpoint: bool = True
    ddp_bucket_size: float | None = None  # MB
    inter_node_bandwidth: float = 800  # Gbps, per node
    intra_node_bandwidth: float = 150  # GB/s
    pipeline_scheduling: str = "1f1b"
    node_size: int = 8
    trace_path: str = "trace/"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


VTRAIN_KEYS: tuple[str, ...] = tuple(f.name for f in fields(VTrainConfig))
PARALLEL_KEYS = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size")
_NULLABLE_INTS = {"num_gpus", *PARALLEL_KEYS, "micro_batch_size"}
_INTS = _NULLABLE_INTS | {"global_batch_size", "num_layers", "hidden_size", "num_attention_heads",
                          "max_length", "vocab_size", "node_size"}
_NUMBERS = {"inter_node_bandwidth", "intra_node_bandwidth", "ddp_bucket_size"}
_BOOLS = {"use_gradient_bucket", "use_checkpoint"}
_STRINGS = {"gpu_name", "model_arch", "pipeline_scheduling"}
_DEFAULTS = VTrainConfig().to_dict()


def is_vtrain_config(data: Mapping[str, Any]) -> bool:
    """A flat dict of vTrain keys (a native job has model/training/parallel/cluster sections)."""
    native = {"model", "training", "parallel", "cluster"}
    return bool(data) and not native & set(data) and bool(set(VTRAIN_KEYS) & set(data))


def parse_vtrain(data: Mapping[str, Any]) -> VTrainConfig:
    """Keys and value types of a vTrain config; a missing key takes vTrain's default."""
    unknown = [k for k in data if k not in VTRAIN_KEYS]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, VTRAIN_KEYS, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(VTRAIN_KEYS)}"
        raise VTrainKeyError(f"unknown vTrain config key '{key}' (vTrain rejects it too: "
                             f"vTrainConfig() got an unexpected keyword argument); {hint}")
    problems = [p for key, value in data.items() if (p := _type_problem(key, value))]
    if problems:
        raise ConfigError("; ".join(problems))
    return VTrainConfig(**data)


def _type_problem(key: str, value: Any) -> str | None:
    if value is None:
        if key in _NULLABLE_INTS or key in {"ddp_bucket_size", "trace_path"}:
            return None
        return f"{key} is null; give a value or leave the key out for vTrain's default {_DEFAULTS[key]!r}"
    if key in _INTS and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        return f"{key}={value!r} must be a positive integer"
    if key in _NUMBERS and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
        return f"{key}={value!r} must be a positive number"
    if key in _BOOLS and not isinstance(value, bool):
        return f"{key}={value!r} must be true or false"
    if key in _STRINGS and not isinstance(value, str):
        return f"{key}={value!r} must be a string"
    return None


def validate_vtrain(cfg: VTrainConfig) -> tuple[VTrainConfig, tuple[str, ...]]:
    """vTrain's `validate_config`: the config with derived values filled in, and notes saying
    what vTrain derived or ignores. Raises `VTrainRejects` where vTrain asserts or fails."""
    cfg, notes = _derive_layout(cfg)
    cfg, mb_notes = _micro_batch(cfg)
    notes += mb_notes
    _assert_divisible(cfg)
    if cfg.model_arch != VTRAIN_MODEL_ARCH:
        raise ConfigError(
            f"model_arch={cfg.model_arch!r} is not supported: vTrain's predictor builds only its GPT "
            f"('{VTRAIN_MODEL_ARCH}'); remove the key or set it to '{VTRAIN_MODEL_ARCH}' (for other "
            f"models write a native job file with a model section)")
    schedule = cfg.pipeline_scheduling.lower()
    if schedule not in VTRAIN_SCHEDULES:
        raise ConfigError(f"pipeline_scheduling={cfg.pipeline_scheduling!r} is not a schedule; use "
                          f"'1f1b' (what vTrain simulates) or 'gpipe'")
    if schedule != "1f1b":
        notes.append(f"pipeline_scheduling={cfg.pipeline_scheduling!r}: vTrain simulates 1F1B whatever "
                     f"this key says; vtrain-ml simulates {VTRAIN_SCHEDULES[schedule]} as asked")
    return cfg, tuple(notes)


def _rejects(problem: str, fix: str) -> VTrainRejects:
    return VTrainRejects(f"{problem} (vTrain rejects this file too: {VTRAIN_SOURCE}); {fix}")


def _derive_layout(cfg: VTrainConfig) -> tuple[VTrainConfig, list[str]]:
    sizes = {k: getattr(cfg, k) for k in PARALLEL_KEYS}
    missing = [k for k, v in sizes.items() if v is None]
    given = ", ".join(f"{k}={v}" for k, v in sizes.items() if v is not None) or "none of them"
    if cfg.num_gpus is None:
        if missing:
            raise _rejects(f"num_gpus is missing and so is {' and '.join(missing)} ({given})",
                           "give num_gpus, or all three of tensor_parallel_size, data_parallel_size "
                           "and pipeline_parallel_size")
        tp, dp, pp = (int(v) for v in sizes.values())
        return replace(cfg, num_gpus=tp * dp * pp), [f"num_gpus derived as tp*dp*pp = {tp * dp * pp}"]
    if len(missing) > 1:
        raise _rejects(f"{' and '.join(missing)} are both missing: only one of "
                       f"tensor_parallel_size, data_parallel_size, or pipeline_parallel_size can be None",
                       "give all but one of them (the missing one is num_gpus // the other two)")
    if missing:
        return _derive_one(cfg, missing[0])
    tp, dp, pp = (int(v) for v in sizes.values())
    if cfg.num_gpus != tp * pp * dp:
        fix = f"set num_gpus to {tp * pp * dp}"
        if cfg.num_gpus % (tp * pp) == 0:
            fix += f", or data_parallel_size to num_gpus // (tp*pp) = {cfg.num_gpus // (tp * pp)}"
        raise _rejects(f"num_gpus={cfg.num_gpus} != tensor_parallel_size*pipeline_parallel_size*"
                       f"data_parallel_size = {tp}*{pp}*{dp} = {tp * pp * dp}: num_gpus must be "
                       f"equivalent to (tensor_parallel_size * pipeline_parallel_size * "
                       f"data_parallel_size)", fix)
    return cfg, []


def _derive_one(cfg: VTrainConfig, key: str) -> tuple[VTrainConfig, list[str]]:
    others = [k for k in PARALLEL_KEYS if k != key]
    product = int(getattr(cfg, others[0])) * int(getattr(cfg, others[1]))
    num_gpus = int(cfg.num_gpus or 0)
    value = num_gpus // product
    formula = f"num_gpus // ({others[0]}*{others[1]}) = {num_gpus} // {product} = {value}"
    if value == 0:
        raise _rejects(f"{key} would be {formula}, and vTrain then fails dividing by it",
                       f"give num_gpus >= {product} (a multiple of {product})")
    derived: dict[str, Any] = {key: value}
    cfg = replace(cfg, **derived)
    notes = [f"{key} derived as {formula} (vTrain's rule)"]
    if value * product != num_gpus:
        notes.append(f"num_gpus={num_gpus} is not a multiple of {product}: like vTrain, the job runs "
                     f"on {key}*{others[0]}*{others[1]} = {value * product} GPUs")
        cfg = replace(cfg, num_gpus=value * product)
    return cfg, notes


def _micro_batch(cfg: VTrainConfig) -> tuple[VTrainConfig, list[str]]:
    pp, dp = int(cfg.pipeline_parallel_size or 0), int(cfg.data_parallel_size or 0)
    gbs = cfg.global_batch_size
    if pp > 1:
        if cfg.micro_batch_size is None:
            raise _rejects("micro_batch_size is missing while pipeline_parallel_size="
                           f"{pp} > 1 (vTrain fails computing global_batch_size % None)",
                           "add micro_batch_size")
        return cfg, []
    mb = gbs // dp
    if mb == 0:
        raise _rejects(f"global_batch_size={gbs} < data_parallel_size={dp}: vTrain sets "
                       f"micro_batch_size = {gbs} // {dp} = 0 and fails dividing by it",
                       f"use global_batch_size >= {dp}")
    was = cfg.micro_batch_size
    replaced = f" (the file's micro_batch_size={was} is not used)" if was not in (None, mb) else ""
    note = (f"micro_batch_size set to global_batch_size // data_parallel_size = {gbs} // {dp} = {mb} "
            f"because pipeline_parallel_size is {pp}, as vTrain does{replaced}")
    return replace(cfg, micro_batch_size=mb), [note]


def _assert_divisible(cfg: VTrainConfig) -> None:
    tp, dp, pp = (int(getattr(cfg, k)) for k in PARALLEL_KEYS)
    gbs, mb = cfg.global_batch_size, int(cfg.micro_batch_size or 0)
    checks = [
        (gbs % dp, f"global_batch_size={gbs} is not divisible by data_parallel_size={dp}",
         f"use a global_batch_size that is a multiple of {dp}"),
        (gbs % mb, f"global_batch_size={gbs} is not divisible by micro_batch_size={mb}",
         "use a micro_batch_size that divides global_batch_size"),
        (cfg.num_layers % pp, f"num_layers={cfg.num_layers} is not divisible by "
         f"pipeline_parallel_size={pp}", "use a pipeline_parallel_size that divides num_layers"),
        (cfg.hidden_size % cfg.num_attention_heads, f"hidden_size={cfg.hidden_size} is not divisible "
         f"by num_attention_heads={cfg.num_attention_heads}",
         "use a head count that divides hidden_size"),
        (cfg.num_attention_heads % tp, f"num_attention_heads={cfg.num_attention_heads} is not "
         f"divisible by tensor_parallel_size={tp}", "use a tensor_parallel_size that divides the heads"),
    ]
    failed = [(problem, fix) for bad, problem, fix in checks if bad]
    if failed:
        problems = "; ".join(p for p, _ in failed)
        fixes = "; ".join(f for _, f in failed)
        raise _rejects(problems, fixes)


def microbatch_note(cfg: VTrainConfig) -> tuple[int, str | None]:
    """vTrain's global batch as simulated: `(gbs // dp) // micro_batch_size` micro-batches per
    replica (predictor.create_layer_graph), which drops the remainder when dp * micro_batch_size
    does not divide global_batch_size; the note says so."""
    dp, mb, gbs = int(cfg.data_parallel_size or 1), int(cfg.micro_batch_size or 1), cfg.global_batch_size
    m = (gbs // dp) // mb
    if m * dp * mb == gbs:
        return gbs, None
    return m * dp * mb, (f"vTrain runs (global_batch_size // dp) // micro_batch_size = ({gbs} // {dp}) "
                         f"// {mb} = {m} micro-batches, i.e. {m * dp * mb} samples per iteration, not "
                         f"{gbs}; so does vtrain-ml")


def vtrain_to_native(cfg: VTrainConfig) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The native job sections of a validated vTrain config, and notes on what was adjusted."""
    gbs, note = microbatch_note(cfg)
    if gbs == 0:
        raise ConfigError(f"micro_batch_size={cfg.micro_batch_size} is larger than global_batch_size // "
                          f"data_parallel_size = {cfg.global_batch_size // int(cfg.data_parallel_size or 1)}"
                          f": vTrain would simulate zero micro-batches; use a smaller micro_batch_size")
    parallel: dict[str, Any] = {
        "tp": cfg.tensor_parallel_size, "pp": cfg.pipeline_parallel_size, "dp": cfg.data_parallel_size,
        "schedule": VTRAIN_SCHEDULES.get(cfg.pipeline_scheduling.lower(), cfg.pipeline_scheduling),
        "overlap_grad_reduce": cfg.use_gradient_bucket,
    }
    if cfg.ddp_bucket_size is not None:
        parallel["bucket_size_mb"] = cfg.ddp_bucket_size
    native = {
        "model": {"name": "vtrain-gpt", "num_layers": cfg.num_layers, "hidden_size": cfg.hidden_size,
                  "num_attention_heads": cfg.num_attention_heads, "seq_length": cfg.max_length,
                  "vocab_size": cfg.vocab_size},
        "training": {"global_batch_size": gbs, "micro_batch_size": cfg.micro_batch_size,
                     "precision": "fp16", "recompute": "full" if cfg.use_checkpoint else "none",
                     "framework": "megatron-deepspeed"},
        "parallel": parallel,
        "cluster": {"gpu": cfg.gpu_name, "num_gpus": cfg.num_gpus, "gpus_per_node": cfg.node_size,
                    "inter_node_bandwidth_Gbps": cfg.inter_node_bandwidth,
                    "intra_node_bandwidth_GBps": cfg.intra_node_bandwidth},
    }
    return native, (note,) if note else ()


def read_vtrain(data: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A vTrain config dict -> (native job sections, notes), with vTrain's defaults and rules."""
    cfg, notes = validate_vtrain(parse_vtrain(data))
    native, more = vtrain_to_native(cfg)
    return native, notes + more
