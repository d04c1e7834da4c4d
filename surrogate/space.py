"""The sampled space: a YAML file of ranges and choices, validated once (`load_space`).

Every axis (numeric or categorical) is one coordinate of a quasi-random point in the unit cube
(Sobol or Latin hypercube via `scipy.stats.qmc`); `surrogate.sampling` maps a point to a job
constructively. Ranges of integers that grow geometrically (GPUs, parameters, micro-batches) are
sampled log-uniformly.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field, PositiveInt, model_validator

from simulator.errors import ConfigError
from simulator.job.catalog import data_dir, read_yaml
from simulator.job.enums import (
    CpCommType,
    CudaGraphs,
    DataParallelSharding,
    Fp8Recipe,
    Precision,
    Recompute,
    Schedule,
    StateDtype,
    TokenDispatcher,
)
from simulator.job.specs import Frozen, parse


class Method(StrEnum):
    """Quasi-random design of the unit-cube points."""

    SOBOL = "sobol"
    LHS = "lhs"
    RANDOM = "random"


class Family(StrEnum):
    """Model families (see surrogate.features: the convention for fields a record lacks)."""

    GPT = "gpt"
    LLAMA = "llama"


class Range(Frozen):
    min: float
    max: float

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if not 0 < self.min <= self.max:
            raise ValueError(f"needs 0 < min <= max (got min={self.min}, max={self.max})")
        return self


class ModelAxes(Frozen):
    """Generated dense models (parameters x aspect ratio) and, with `preset_fraction`, presets."""

    families: tuple[Family, ...] = (Family.GPT, Family.LLAMA)
    parameters: Range = Range(min=1e9, max=1e12)
    aspect_ratio: Range = Range(min=64, max=224)  # hidden_size / num_layers
    head_dim: tuple[PositiveInt, ...] = (128,)
    gqa_groups: tuple[PositiveInt, ...] = (8,)  # llama: query groups (0 would mean multi-head)
    gqa_fraction: float = Field(0.5, ge=0, le=1)  # share of llama models using GQA
    vocab_size: dict[Family, tuple[PositiveInt, ...]] = Field(
        default_factory=lambda: {Family.GPT: (51200,), Family.LLAMA: (32000, 128256)})
    presets: tuple[str, ...] = ()
    preset_fraction: float = Field(0.0, ge=0, le=1)


class Space(Frozen):
    """Ranges and choices of every job field the surrogate learns."""

    name: str = "space"
    description: str = ""
    hardware: tuple[str, ...] = ("a100-80gb",)
    models: ModelAxes = ModelAxes()
    seq_length: tuple[PositiveInt, ...] = (2048,)
    num_gpus: Range = Range(min=8, max=1024)  # powers of two in the range
    tp: tuple[PositiveInt, ...] = (1, 2, 4, 8)
    pp_max: PositiveInt = 64
    virtual_stages: tuple[PositiveInt, ...] = (2,)
    schedule: tuple[Schedule, ...] = (Schedule.ONE_F_ONE_B,)
    micro_batch_size: tuple[PositiveInt, ...] = (1, 2, 4)
    num_microbatches: Range = Range(min=1, max=256)
    global_batch_tokens: Range = Range(min=2**18, max=2**25)
    precision: tuple[Precision, ...] = (Precision.BF16,)
    recompute: tuple[Recompute, ...] = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
    flash_attention: tuple[bool, ...] = (True, False)
    sequence_parallel: tuple[bool, ...] = (True, False)
    distributed_optimizer: tuple[bool, ...] = (True, False)
    overlap_grad_reduce: tuple[bool, ...] = (True, False)
    inter_node_bandwidth_Gbps: tuple[float, ...] = ()  # empty: each GPU type's default
    # The dimensions of MoE / context parallelism / low precision (surrogate.records); the
    # defaults leave a dense space's draws unchanged (they are drawn from a second design).
    cp: tuple[PositiveInt, ...] = (1,)
    cp_comm_type: tuple[CpCommType, ...] = (CpCommType.P2P,)
    ep: tuple[PositiveInt, ...] = (1,)  # MoE models only (dense ones: 1)
    expert_tp: tuple[PositiveInt, ...] = ()  # empty: the job's tp
    fp8_recipe: tuple[Fp8Recipe, ...] = ()  # empty: the GPU's default recipe
    data_parallel_sharding: tuple[DataParallelSharding, ...] = ()  # empty: distributed_optimizer
    cuda_graphs: tuple[CudaGraphs, ...] = (CudaGraphs.NONE,)  # dense models only (dropless MoE: none)
    tp_comm_overlap: tuple[bool, ...] = (False,)  # needs sequence parallelism and tp > 1
    moe_token_dispatcher: tuple[TokenDispatcher, ...] = (TokenDispatcher.ALLTOALL,)
    # Megatron's combined-1F1B dispatch overlap, where a job allows it (ep > 1, not the allgather
    # dispatcher, no full recompute, the interleaved schedule when pp > 1); else False
    moe_overlap_ep_comm: tuple[bool, ...] = (False,)
    # the memory settings of today's recipes (simulator.job.param_bytes): None is Megatron's
    # default; moments below fp32 only where the optimizer is distributed (else fp32)
    grad_reduce_in_fp32: tuple[bool | None, ...] = (None,)
    exp_avg_dtype: tuple[StateDtype, ...] = (StateDtype.FP32,)
    exp_avg_sq_dtype: tuple[StateDtype, ...] = (StateDtype.FP32,)
    uneven_pipeline: bool = False  # presets whose layers pp does not divide: first stage larger
    # Megatron-Core's parameter gather under the next forward, where a job allows it (the
    # distributed optimizer with overlapped reduction); else False
    overlap_param_gather: tuple[bool, ...] = (False,)

    @model_validator(mode="after")
    def _non_empty(self) -> Space:
        for key in ("hardware", "seq_length", "tp", "schedule", "micro_batch_size", "precision",
                    "recompute", "flash_attention", "sequence_parallel", "distributed_optimizer",
                    "overlap_grad_reduce", "virtual_stages", "cp", "cp_comm_type", "ep",
                    "cuda_graphs", "tp_comm_overlap", "moe_token_dispatcher", "moe_overlap_ep_comm",
                    "grad_reduce_in_fp32", "exp_avg_dtype", "exp_avg_sq_dtype",
                    "overlap_param_gather"):
            if not getattr(self, key):
                raise ValueError(f"'{key}' needs at least one choice")
        if CpCommType.A2A_P2P in self.cp_comm_type:
            raise ValueError("cp_comm_type a2a+p2p needs hierarchical sizes, which a surrogate "
                             "record does not hold; use p2p, a2a or all_gather")
        if not self.models.families and not (self.models.presets and self.models.preset_fraction):
            raise ValueError("models needs at least one family or presets with preset_fraction > 0")
        return self

    def with_hardware(self, hardware: tuple[str, ...]) -> Space:
        return self.model_copy(update={"hardware": hardware})

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def content_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def space_from_dict(data: Any) -> Space:
    return parse(Space, data, "space")


def default_space_path() -> Path:
    """The shipped default space (inside the installed package, or the repository's data/)."""
    return data_dir() / "spaces" / "default.yaml"


def load_space(path: str | Path) -> Space:
    """Read and validate a space file; unknown keys are rejected with the closest known key."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"space file {path} does not exist (the default space is {default_space_path()})")
    return space_from_dict(read_yaml(path))
