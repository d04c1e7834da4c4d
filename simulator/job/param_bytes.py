"""Bytes per parameter of each model-state role for one job: the framework's table
(simulator.job.framework) with the job's own gradient and optimizer precisions.

- `training.grad_reduce_in_fp32` (Megatron-Core's `DistributedDataParallelConfig.
  grad_reduce_in_fp32`, core/distributed/distributed_data_parallel_config.py; Megatron-LM's
  `--accumulate-allreduce-grads-in-fp32` / `--grad-reduce-in-bf16`, megatron/training/
  arguments.py): the dtype of the persistent main-gradient buffer, which the weight-gradient
  GEMMs accumulate into and the data-parallel reduce-scatter / all-reduce moves. None is
  Megatron's default: fp32 for bf16 training (fp8 / fp4 keep bf16 parameters), 16 bits for fp16.
  With a 16-bit buffer the distributed optimizer casts its shard of the gradient to fp32 for the
  step (`DistributedOptimizer._copy_model_grads_to_main_grads`: `shard_model_grad.float()`), the
  fp32 copy the fp16 path has always had (`main_gradients`).
- The precision-aware optimizer (`--use-precision-aware-optimizer`, core/optimizer/
  optimizer_config.py; Transformer Engine's FusedAdam): `exp_avg_dtype` and `exp_avg_sq_dtype`
  store Adam's moments, `main_params_dtype` the master weights. Megatron refuses these dtypes
  without it and refuses it without the distributed optimizer (core/optimizer/__init__.py:
  "--use-precision-aware-optimizer only supported with distributed optimizer"); a job turns it on
  by setting any of them below fp32. When Transformer Engine holds the master weights
  (`use_precision_aware_optimizer_no_fp8_or_ds_fp8`: main params below fp32, or a bf16 / fp16 /
  fp8-delayed run) the optimizer reads the 16-bit gradient buffer in place (`decoupled_grad`, no
  fp32 copy), and with bf16 parameters and fp32 main params it stores only the 16 bits of each
  fp32 master weight that the bf16 parameter lacks (`store_param_remainders`, on by default
  with Transformer Engine >= 2.1): 2 bytes. Otherwise Megatron-Core keeps fp32 master weights.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.job.enums import Fp8Recipe, Framework, Precision, StateDtype
from simulator.job.framework import FP32, ParamBytes, semantics
from simulator.job.precision import recipe_name
from simulator.job.specs import Job, TrainingSpec

PARAM_REMAINDER_BYTES = 2  # the low 16 bits of an fp32 master weight over its bf16 parameter


def precision_aware_optimizer(job: Job) -> bool:
    """Megatron's `--use-precision-aware-optimizer`: on when any optimizer dtype is below fp32."""
    return _precision_aware(job.training)


def _precision_aware(t: TrainingSpec) -> bool:
    return any(d is not StateDtype.FP32
               for d in (t.exp_avg_dtype, t.exp_avg_sq_dtype, t.main_params_dtype))


def te_master_weights(job: Job) -> bool:
    """Transformer Engine's FusedAdam holds the master weights (optimizer_config.py's
    `use_precision_aware_optimizer_no_fp8_or_ds_fp8`)."""
    return _te_master_weights(job.training, recipe_name(job))


def _te_master_weights(t: TrainingSpec, recipe: str | None) -> bool:
    if not _precision_aware(t):
        return False
    return (t.main_params_dtype is not StateDtype.FP32 or recipe is None
            or recipe == Fp8Recipe.DELAYED.value)


def param_bytes(job: Job) -> ParamBytes:
    """Bytes per parameter of each role (see the module docstring); the framework's table when
    the job leaves these fields at their defaults."""
    return training_param_bytes(job.training, recipe_name(job))


def training_param_bytes(t: TrainingSpec, recipe: str | None) -> ParamBytes:
    """`param_bytes` of a job with training settings `t` and low-precision recipe `recipe` (its
    `recipe_name`): what the surrogate and the planner's memory bound use without a Job."""
    pb = semantics(t.framework).param_bytes(t.precision)
    if t.grad_reduce_in_fp32 is not None and not semantics(t.framework).fp32_parameters:
        grad = FP32 if t.grad_reduce_in_fp32 else t.precision.base.bytes
        copy = FP32 if semantics(t.framework).fp32_main_grad_copy_fp16 and grad < FP32 else 0
        pb = replace(pb, gradients=grad, main_gradients=copy)
    if not _precision_aware(t):
        return pb
    moments = t.exp_avg_dtype.bytes + t.exp_avg_sq_dtype.bytes
    if not _te_master_weights(t, recipe):
        return replace(pb, optimizer_states=moments)
    master = t.main_params_dtype.bytes
    if (t.main_params_dtype is StateDtype.FP32 and t.precision.base is Precision.BF16
            and not t.fp8_param_gather):  # remainders need bf16 parameters
        master = PARAM_REMAINDER_BYTES
    return replace(pb, optimizer_states=moments, master_weights=master, main_gradients=0)


def optimizer_precision_problems(job: Job) -> list[str]:
    """The combinations Megatron refuses (arguments.py, optimizer_config.py, optimizer/__init__)."""
    t = job.training
    problems = []
    if t.main_params_dtype in (StateDtype.BF16, StateDtype.FP8):
        problems.append(f"training.main_params_dtype={t.main_params_dtype.value} is not one of "
                        f"Megatron's choices; use fp32 or fp16")
    if t.grad_reduce_in_fp32 is not None and t.framework is not Framework.MEGATRON_LM:
        problems.append(f"training.grad_reduce_in_fp32 is Megatron-LM's DDP setting (framework="
                        f"{t.framework.value}); remove it or use framework megatron-lm")
    if not precision_aware_optimizer(job):
        return problems
    fields = ", ".join(f"{k}={getattr(t, k).value}" for k in
                       ("exp_avg_dtype", "exp_avg_sq_dtype", "main_params_dtype")
                       if getattr(t, k) is not StateDtype.FP32)
    if t.framework is not Framework.MEGATRON_LM:
        problems.append(f"training.{fields} is Megatron-LM's precision-aware optimizer (framework="
                        f"{t.framework.value}); remove it or use framework megatron-lm")
    elif not job.shards_optimizer:
        problems.append(f"training.{fields} needs Megatron's distributed optimizer (its "
                        f"precision-aware optimizer is refused without it); set "
                        f"parallel.distributed_optimizer: true")
    return problems
