"""The saved surrogate: XGBoost UBJ boosters plus ``metadata.json`` (never pickle).

A target predicted by its closed form alone (`Surrogate.closed_form_targets`) has no booster file;
metadata.json lists it under ``closed_form``.

metadata.json records the schema version, feature names, the hardware each GPU name was trained
with (spec, content hash and where it came from), the space, the simulator version, the
training-data hash and the test metrics. Loading checks that each hardware source still hashes the
same: a profile recalibrated since training makes the model stale, which is refused unless
`allow_stale`.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simulator.errors import ConfigError, DataError, ProfileError
from simulator.fileio import read_json_file, write_json_atomic
from simulator.job.catalog import data_dir, hardware_fingerprint, read_yaml, resolve_hardware
from simulator.job.specs import HardwareSpec, parse

log = logging.getLogger(__name__)

# 2: the GEMM-efficiency features come from simulator.costs.analytic (its depth factor rounds differently
# in the last bit), so the trees of a version-1 model split on slightly other numbers.
# 3: features other than the two baselines are no longer logarithms, shares multiply by one
# reciprocal, and a target the closed form already predicts has no booster file.
# 4: the MoE / cp / precision columns and features (surrogate.records); 5: moe_overlap_ep_comm;
# 6: the layer's host floor and the userbuffers saving as features, cp x dp optimizer sharding,
# quantized activations and weight copies in the memory baseline; 7: the uneven pipeline split,
# MoE dispatch / host / expert-tail and attention terms; 8: the data-parallel exposure pays the
# slowdown of the compute it hides behind (simulator.timeline.contention); 9: fused attention at
# the GPU's attention ceiling and depth (Hopper's measured 0.625 and 713 keys, B200's 0.42), not
# the GEMMs'; 10: the parameter gather under the next forward (`overlap_param_gather` column);
# 11: the DDP's zeroing and NaN-check passes over the gradient buffer in the optimizer term;
# 12: Transformer Engine's cached dummy weight gradients in the memory baseline; 13: a
# low-precision recipe's saving as the layer's projection GEMMs at its rate (extended_terms),
# cp's steps and gathers, recompute's core attention and MoE forward; 14: the recipe's quantize
# kernels (three more lookups); 15: a ring gather's network steps k - 1 over the k nodes it spans
# and an NVL72 domain's members' NICs (moe_terms.ring_gather_s, _gather_s); 16: the pipeline's
# fill and drain through stages without the output layer (timing.iteration); 17: multi-token
# prediction's depths on the last stage (pipeline_terms.uneven_time_s); 18: no pass over the GEMM
# weights' gradients per micro-batch (gradient-accumulation fusion, timing.layer_times), the
# recipe's quantize kernels at the measured quantize bandwidth with the weights' casts, and
# current scaling's amax all-reduces launched (extended_terms.quantize_s); 19: the gradient
# reduction's dtype (`grad_reduce_in_fp32`) in the data-parallel bytes, the buffer passes and
# the embedding gradient's accumulation (dp_terms.grad_dtype_s); 20: with context
# parallelism the dense gradients reduced, and the optimizer sharded, over dp x cp
# (dp_terms.dp_correction); 21: a ring across nodes is NCCL's, 2(n-1)/n of the buffer
# through the node's network share (timing._ring_s; it charged a hierarchical 2(k-1)/k); 22:
# and its 2(n-1) steps' latency, 2(k-1) over the network (the tree's correction against them);
# 23: a ring all-gather across nodes moves (n-1)/n through the network too (moe_terms.ring_gather_s)
# 24: NCCL's protocol and algorithm choice in the closed form's collectives (surrogate.nccl_terms:
# LL / LL128 / Simple rings and NVLS inside a domain, per-bucket ring and tree latencies of the
# experts' gradient reduction), the recipe's rate for the experts' grouped GEMMs and their
# quantize kernels (surrogate.quantize_terms)
# 25: an uneven 1F1B pipeline's makespan walked in the simulator's 1F1B order where the last
# stage is not the busiest (surrogate.one_f_one_b; GPipe's chain sum S + (m - 1) max S before);
# a MoE row's overlapped parameter gather of its own parameters, once (param_gather_terms); the
# combined-1F1B overlap under the MoE layer's compute; the experts' weight gradients' traffic
# into the gradient buffer (moe_terms._gemm_s)
# 26: a grouped GEMM's tiles fill the SMs together, each pass at its own shape, reading the
# recipe's operand bytes (moe_terms._gemm_s, as simulator.graph.moe.experts); an uneven split's
# or a MoE model's leading dense layers' stage times and tails (pipeline_terms.stage_times,
# uneven_tail_s); a MoE row's dense gradients (outside the routed experts) reduced and stepped
# over dp, and the experts' reduction hidden in what the dense one leaves of the last backward
# (dp_terms.dp_correction, expert_tail_s); overlap_param_gather's waits a term of every row,
# on the effective rows (the NVLink domain as the node: param_gather_terms); tp_comm_overlap's
# saving beside a recipe's faster GEMMs (extended_terms.lowp_saving_s)
# 27: the memory closed form follows the simulator's 2026-11-28 sources: the output layer's cached
# placeholder weight gradient and Megatron's sequence-parallel gather buffer on the last stage
# (physics.memory), no unpermute copies saved
# (moe_terms.saved_activations_bytes)
# 28: a MoE layout's memory: the routed experts hold the optimizer's dtype settings' bytes (their
# sharded roles over expert_dp) and the recipe's weight copies; a MoE layer saves its router's
# and shared experts' inputs, the router's scores and, without sequence parallelism, its experts'
# whole intermediates per tp rank (moe_terms.saved_activations_bytes), counted on the dense
# form's first and last stage by their micro-batches in flight, none under full recompute; an
# uneven split's stages hold the first stage's activations per layer without the loss's (and
# the output block's buffers per context share), against the larger even stage
# (pipeline_terms.uneven_memory_bytes); the attention's saved tensors at its true head sizes and
# query / key norms (attention_terms.attention_saved_bytes); ZeRO-2 / 3: the gradient dtype's
# bytes sharded, the embedding's and output layer's states whole, FP8 copies and whole
# parameters / gradients for the two units in flight only, and no 0.3x floor (0.02x); a MoE
# layer's linear inputs at the recipe's quantized bytes; the MTP depths' layer and loss on the
# last stage (extended_terms.mtp_saved_bytes)
# 29: Megatron-FSDP's per-layer collectives over dp x cp (FSDP with context parallelism), hidden
# behind the layer's compute as it runs: the true attention's, ring attention's steps, and a
# low-precision recipe's saving taken out (dp_terms.fsdp_layer_s)
SCHEMA_VERSION = 29
METADATA = "metadata.json"
XGBOOST_PREFIX = re.compile(r"^\[[\d:]+\]\s+\S+:\d+:\s*")  # "[09:01:48] src/c_api.cc:1532: "
BOOSTER_FILES = {"time": "iteration_time.ubj", "memory": "peak_memory.ubj"}


def _save_booster(booster: Any, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        booster.save_model(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_artifact(folder: Path, boosters: Mapping[str, Any], closed_form: list[str],
                  fields: Mapping[str, Any]) -> Path:
    """Write `boosters` (target -> XGBoost booster) and metadata.json holding `fields` (the
    model's own entries: feature names, hyperparameters, hardware, bounds, ...). Boosters first,
    metadata last: a folder with metadata.json is complete. A `closed_form` target's file from an
    earlier model is removed."""
    from surrogate.dataset import simulator_version

    folder.mkdir(parents=True, exist_ok=True)
    for key, booster in boosters.items():
        _save_booster(booster, folder / BOOSTER_FILES[key])
    for key in closed_form:
        (folder / BOOSTER_FILES[key]).unlink(missing_ok=True)  # a previous model's trees
    metadata = {
        "schema_version": SCHEMA_VERSION,
        "kind": "vtrain-ml surrogate",
        "outputs": ["iteration_time_s", "peak_memory_bytes", "fits_in_memory"],
        "targets": {"time": "log(iteration_time_s) - est_log_time_s",
                    "memory": "log(peak_memory_bytes) - est_log_memory_bytes"},
        "boosters": {key: BOOSTER_FILES[key] for key in boosters},
        "closed_form": list(closed_form),
        "simulator_version": simulator_version(),
        **dict(fields),
    }
    write_json_atomic(folder / METADATA, metadata)
    return folder


# key -> (type, what it is): the fields loading needs, checked before anything is built from them
REQUIRED: dict[str, tuple[type, str]] = {
    "feature_names": (list, "the feature names"), "boosters": (dict, "the booster files"),
    "best_iterations": (dict, "the boosting rounds"), "hardware": (dict, "the hardware specs"),
    "bounds": (dict, "the training ranges"), "n_train": (int, "the training row count"),
    "hyperparameters": (dict, "the hyperparameters"),
}


def read_metadata(folder: Path) -> dict[str, Any]:
    """metadata.json, checked: a model folder damaged or written by something else is one
    `DataError` line naming the file and the field, never a KeyError from deep inside."""
    path = folder / METADATA
    data = read_json_file(path, DataError, f"{folder} is not a surrogate model folder (no {METADATA}); "
                          "train one with `python -m vtrain_ml.surrogate train`", "retrain the model")
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        version = data.get("schema_version") if isinstance(data, dict) else None
        raise DataError(f"{path} has schema_version {version}, this vtrain-ml reads "
                        f"{SCHEMA_VERSION} (its features are computed differently); retrain it: "
                        f"vtrain-surrogate retrain --model {folder} --hardware GPU --out NEW_FOLDER")
    for key, (kind, what) in REQUIRED.items():
        if not isinstance(data.get(key), kind):
            got = "missing" if key not in data else f"a {type(data[key]).__name__}"
            raise DataError(f"{path}: '{key}' ({what}) is {got}, expected a {kind.__name__}; "
                            f"the model folder is damaged, retrain the model")
    if not set(data["boosters"]) <= set(BOOSTER_FILES):
        raise DataError(f"{path}: 'boosters' names {sorted(data['boosters'])}, expected some of "
                        f"{sorted(BOOSTER_FILES)}; retrain the model")
    for name, entry in data["hardware"].items():
        if not isinstance(entry, dict) or not {"hash", "source", "spec"} <= set(entry):
            raise DataError(f"{path}: hardware '{name}' lacks its hash, source or spec; retrain the model")
    return dict(data)


def _stored_spec(path: Path, name: str, spec: Any) -> HardwareSpec:
    try:
        return HardwareSpec.model_validate(spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise DataError(f"{path}: hardware '{name}' field {where}: {first['msg']}; "
                        f"retrain the model") from None


def load_booster(path: Path, n_features: int) -> Any:
    """One saved XGBoost model; a missing, truncated or foreign file is one `DataError` line
    (XGBoost itself raises a multi-line C++ stack)."""
    import xgboost as xgb

    if not path.is_file():
        raise DataError(f"model file {path} is missing; the model folder is incomplete, retrain the model")
    booster = xgb.Booster()
    try:
        _check_complete(path)
        booster.load_model(str(path))
    except (xgb.core.XGBoostError, OSError, ValueError) as exc:
        first = next((ln for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        first = XGBOOST_PREFIX.sub("", first.strip()).removeprefix("Check failed: ")
        raise DataError(f"model file {path} is not a readable XGBoost model ({first[:160]}); "
                        f"the file is corrupt, retrain the model") from None
    if booster.num_features() != n_features:
        raise DataError(f"model file {path} expects {booster.num_features()} features, its metadata "
                        f"names {n_features}; the folder mixes two models, retrain the model")
    return booster


def _check_complete(path: Path) -> None:
    """A saved model (UBJSON or JSON) is one object: its first byte is `{` and its last `}`.
    XGBoost 3.2 can crash the process (segmentation fault) on a truncated UBJSON file instead of
    raising, so a file cut short is refused here, before XGBoost parses it."""
    with path.open("rb") as f:
        first = f.read(1)
        f.seek(0, os.SEEK_END)
        f.seek(max(f.tell() - 64, 0))
        last = f.read().rstrip()[-1:]
    if (first, last) != (b"{", b"}"):
        raise ValueError("not one complete UBJSON/JSON object: the file is truncated or not a model")


def hardware_source(name_or_file: str) -> str:
    """What a model records as where its hardware came from: a catalog name as given, a
    hardware file as its absolute path (so that the staleness check finds the file again from
    any working directory)."""
    path = Path(name_or_file)
    return str(path.resolve()) if path.is_file() else name_or_file


def current_hardware(source: str) -> HardwareSpec:
    """The hardware `source` names, read from disk now (the catalog memoizes files by path, which
    would hide an edit made since this process first read it)."""
    path = Path(source)
    if not path.is_file():
        path = data_dir() / "hardware" / f"{resolve_hardware(source).name}.yaml"
    if not path.is_file():
        return resolve_hardware(source)
    return parse(HardwareSpec, read_yaml(path), f"hardware file {path}")


def stale_hardware(metadata: Mapping[str, Any]) -> list[str]:
    """Sentences for each trained hardware whose source now hashes differently."""
    problems = []
    for name, entry in metadata["hardware"].items():
        try:
            current = hardware_fingerprint(current_hardware(entry["source"]))
        except ConfigError:
            continue  # a file that is gone cannot have changed; the stored spec is used
        if current != entry["hash"]:
            problems.append(f"{name} from {entry['source']} now hashes {current}, the model was "
                            f"trained with {entry['hash']}")
    return problems


@dataclass(frozen=True)
class Artifact:
    """A saved model as read back: its metadata, its boosters and its hardware specs."""

    metadata: dict[str, Any]
    boosters: dict[str, Any]  # target -> XGBoost booster
    hardware: dict[str, HardwareSpec]


def load_artifact(folder: Path, allow_stale: bool) -> Artifact:
    """Read a saved model's folder; refuses one whose hardware sources hash differently now
    (a recalibrated profile) unless `allow_stale`, which only warns."""
    meta = read_metadata(folder)
    stale = stale_hardware(meta)
    if stale and not allow_stale:
        raise ProfileError(f"stale surrogate {folder}: hardware profile changed since training ("
                           + "; ".join(stale) + "); retrain it (python -m vtrain_ml.surrogate retrain) "
                           "or pass --allow-stale / allow_stale=True")
    for problem in stale:
        log.warning("using a stale surrogate: %s", problem)
    n_features = len(meta["feature_names"])
    boosters = {key: load_booster(folder / str(name), n_features)
                for key, name in meta["boosters"].items()}
    path = folder / METADATA
    hardware = {n: _stored_spec(path, n, e["spec"]) for n, e in meta["hardware"].items()}
    return Artifact(meta, boosters, hardware)
