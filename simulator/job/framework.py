"""What the training software does differently: one table, keyed by `training.framework`.

The graph, memory model and schedule read these fields; nothing else in the simulator compares
framework names. Each entry cites where the behaviour comes from.

- ``megatron-lm``: NVIDIA Megatron-LM / Megatron-Core. Weight gradients are accumulated inside
  the weight-gradient GEMM into a persistent main-gradient buffer
  (`--gradient-accumulation-fusion`, on by default; `core/tensor_parallel/layers.py`,
  `LinearWithGradAccumulationAndAsyncCommunication.backward`: `wgrad_gemm_accum_fp32`). Bytes
  per parameter follow `docs/user-guide/features/dist_optimizer.md`: 20 with fp16 parameters and
  gradients (the optimizer keeps fp32 master weights and fp32 copies of the main gradients),
  18 with bf16 (the gradient buffer itself is fp32); 4 + 16/d and 6 + 12/d with the
  distributed optimizer. The optimizer all-reduces the gradient norm (clipping) and, with fp16,
  the overflow flag over the model-parallel ranks (`core/optimizer/clip_grads.py`,
  `optimizer.py::_unscale_main_grads_and_check_for_nan`). The interleaved schedule's warm-up is
  `min(2 (p - s - 1) + (v - 1) g, m v)` for micro-batch groups of g (`parallel.
  microbatch_group_size_per_vp_stage`, default p; `schedules.py::get_pp_rank_microbatches`;
  the groups and the removal of the special case "m == p: all forwards first" came in Nov
  2024, commit 4295be1a6c, core_r0.10.0). Pipeline
  stages exchange the full [s, b, h] activation, split by tp only under sequence parallelism
  (`schedules.py::get_tensor_shapes`; the scatter-gather optimization was removed in 2023).
  A column-parallel linear's input-gradient all-reduce runs asynchronously behind its
  weight-gradient GEMM (`--async-tensor-model-parallel-allreduce`, on by default;
  `LinearWithGradAccumulationAndAsyncCommunication.backward`).
- ``megatron-deepspeed``: Megatron-DeepSpeed (vTrain's measured runs). DeepSpeed owns the
  gradients: autograd writes `.grad` and a separate kernel accumulates each micro-batch's
  gradient; mixed-precision Adam keeps fp32 master weights, momentum and variance: 16 bytes per
  parameter with fp16 (2 + 2 + 12), 18 with bf16 (fp32 gradient accumulation). Its pipeline
  schedule is Megatron's 2021-2023 code, where m == p runs every forward first on every stage
  (`schedules.py::forward_backward_pipelining_with_interleaving`, `if num_microbatches ==
  pipeline_parallel_size: all_warmup_microbatches = True`), and its pipeline messages are split
  over the tp ranks and all-gathered on receipt (`--scatter-gather-tensors-in-pipeline`, on by
  default in `p2p_communication.py`; the all-gather runs on NVLink and is not modelled).
  Its tensor-parallel backward all-reduces block (microsoft/Megatron-DeepSpeed): until the July
  2023 rebase on Megatron-LM, `mpu/layers.py::ColumnParallelLinear.forward` is
  `copy_to_tensor_model_parallel_region` + `F.linear`, whose backward all-reduces the input
  gradient synchronously (`mpu/mappings.py::_reduce`) after both gradient GEMMs; after it,
  `arguments.py::validate_args` sets `async_tensor_model_parallel_allreduce = False` whenever
  `--deepspeed` is on (commit f90b8877, "DeepSpeed seems to be incompatible"), and the fused
  gradient accumulation is commented out in `core/tensor_parallel/layers.py` ("TODO: temporary
  commented"), so gradient accumulation stays a separate kernel in both versions.
- ``pytorch``: plain PyTorch or Hugging Face eager under `torch.autocast` (the usual AMP
  recipe): fp32 parameters and gradients, Adam momentum and variance (16 bytes per parameter,
  8 + 8/d with a ZeRO-1 optimizer); data-parallel gradients are already identical, so clipping
  needs no collective; weights are cast to 16 bits on every forward; norms, softmax
  and the loss run in fp32 and the residual stream stays fp32; the vocabulary is not padded.

Host dispatch (`host_launch_cost`): the host's time per kernel launch is the hardware file's
`Efficiency.host_overhead_s` (a property of the host and its software, calibrated per cluster),
weighted per direction by the stack's Python structure. Both come from measurements on lent H100
hosts (torch 2.11), `bench/measure_host_overhead.py`, never from validated iteration times:
- Megatron stacks: 1 for every launch. `host_overhead_s` is defined by their layer: a
  Megatron-structured layer (custom autograd linears, TorchScript bias-GeLU / bias-dropout-add,
  a softmax Function, reentrant recompute) took 4040 us of host time for forward + recompute +
  backward + its loss, which the graph counts as 77 launches: 52.5 us per launch.
- ``pytorch``: eager modules under autocast, measured by `profile trace` without the profiler on
  10 traced shapes without recompute and 9 with full recompute of the reference stack: a
  forward launch 52.9 us (x1.0: what a Megatron-structured launch costs), a backward launch
  27.3 us (x0.52: autograd's C++ engine runs it, no Python), and a recompute launch of
  `torch.utils.checkpoint` (non-reentrant) 91 us (x1.72), which carries what checkpointing adds
  to the layer's forward and backward (saved-tensor hooks, RNG state, the re-run). Hugging Face
  shapes agree (47.8 / 27.3 us; 76 us per recompute launch on the one shape without GPU waits).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.job.enums import Framework, Precision

FP32 = 4
ADAM_STATE_BYTES = 8  # fp32 momentum and variance


@dataclass(frozen=True)
class ParamBytes:
    """Bytes per parameter by role. `weights` and `gradients` live on every data-parallel rank;
    `master_weights`, `main_gradients` and `optimizer_states` are sharded over dp by the
    distributed optimizer (ZeRO-1). `main_gradients` are fp32 copies of 16-bit gradients that the
    optimizer makes for its step (Megatron-LM with fp16 parameters)."""

    weights: int
    gradients: int
    master_weights: int
    main_gradients: int
    optimizer_states: int = ADAM_STATE_BYTES

    @property
    def replicated(self) -> int:
        return self.weights + self.gradients

    @property
    def sharded(self) -> int:
        return self.master_weights + self.main_gradients + self.optimizer_states

    def per_param(self, shard: int = 1) -> float:
        """Bytes per parameter with the sharded roles split over `shard` ranks."""
        return self.replicated + self.sharded / shard


@dataclass(frozen=True)
class HostCost:
    """Host time per kernel launch of each direction, in units of `Efficiency.host_overhead_s`
    (see the module docstring for the measurements)."""

    forward: float = 1.0
    backward: float = 1.0
    recompute: float = 1.0


MEGATRON_HOST = HostCost()
EAGER_HOST = HostCost(forward=1.0, backward=0.52, recompute=1.72)


@dataclass(frozen=True)
class FrameworkSemantics:
    """The differences between training stacks that change kernels, bytes or the schedule."""

    gradient_accumulation_fusion: bool  # the stack's default (training.gradient_accumulation_fusion)
    fp32_parameters: bool  # AMP: fp32 weights are the master copy; 16-bit casts every forward
    fp32_main_grad_copy_fp16: bool  # the optimizer copies 16-bit gradients to fp32 for its step
    pads_vocab: bool  # Megatron pads the vocabulary to a multiple of 128 * tp
    all_forwards_first_when_m_equals_p: bool  # interleaved schedule with m == p
    grad_stats_all_reduce: bool  # the optimizer reduces gradient norm / overflow over model ranks
    p2p_scatter_gather: bool  # pipeline sends 1/tp of the activation, all-gathered on receipt
    eager_autocast: bool  # eager PyTorch ops under autocast (simulator.graph.eager)
    persistent_grad_buffer: bool  # gradients live in buffers allocated once (else: from the
    # first backward of an iteration until the optimizer step, `zero_grad(set_to_none=True)`)
    async_tp_grad_allreduce: bool  # without SP, the column-parallel input-gradient all-reduce
    # overlaps the weight-gradient GEMM (else it blocks the backward)
    host_launch_cost: HostCost  # host dispatch per launch of each direction (x host_overhead_s)
    megatron_core_buckets: bool = False  # gradient buckets sized and placed as Megatron-Core's
    # DDP does (simulator.job.buckets), else 25 MB ones on every chunk
    grad_buffer_passes: int = 0  # memory passes over the whole local gradient buffer per
    # iteration besides the optimizer's (Megatron-Core's DDP: zeroing and the NaN check)
    te_dummy_wgrads: bool = False  # Transformer Engine's linears cache a placeholder weight
    # gradient per weight shape when they accumulate into the main gradient (simulator.memory.te_dummy)
    sp_global_buffer: bool = False  # the output layer gathers its sequence-parallel input into
    # a buffer kept for the process (simulator.memory.global_buffer)

    def param_bytes(self, precision: Precision) -> ParamBytes:
        """Bytes per parameter of each role for `precision` (see the module docstring)."""
        if self.fp32_parameters:
            return ParamBytes(weights=FP32, gradients=FP32, master_weights=0, main_gradients=0)
        base = precision.base  # fp8 / fp4 keep bf16 weights and fp32 gradient buffers
        grad = FP32 if base is Precision.BF16 else base.bytes
        copy = FP32 if self.fp32_main_grad_copy_fp16 and grad < FP32 else 0
        return ParamBytes(weights=base.bytes, gradients=grad, master_weights=FP32,
                          main_gradients=copy)


FRAMEWORKS: dict[Framework, FrameworkSemantics] = {
    Framework.MEGATRON_LM: FrameworkSemantics(
        gradient_accumulation_fusion=True, fp32_parameters=False, fp32_main_grad_copy_fp16=True,
        pads_vocab=True, all_forwards_first_when_m_equals_p=False, grad_stats_all_reduce=True,
        p2p_scatter_gather=False, eager_autocast=False, persistent_grad_buffer=True,
        async_tp_grad_allreduce=True, host_launch_cost=MEGATRON_HOST, megatron_core_buckets=True,
        grad_buffer_passes=2, te_dummy_wgrads=True, sp_global_buffer=True),
    Framework.MEGATRON_DEEPSPEED: FrameworkSemantics(
        gradient_accumulation_fusion=False, fp32_parameters=False, fp32_main_grad_copy_fp16=False,
        pads_vocab=True, all_forwards_first_when_m_equals_p=True, grad_stats_all_reduce=True,
        p2p_scatter_gather=True, eager_autocast=False, persistent_grad_buffer=True,
        async_tp_grad_allreduce=False, host_launch_cost=MEGATRON_HOST),
    Framework.PYTORCH: FrameworkSemantics(
        gradient_accumulation_fusion=False, fp32_parameters=True, fp32_main_grad_copy_fp16=False,
        pads_vocab=False, all_forwards_first_when_m_equals_p=False, grad_stats_all_reduce=False,
        p2p_scatter_gather=False, eager_autocast=True, persistent_grad_buffer=False,
        async_tp_grad_allreduce=True, host_launch_cost=EAGER_HOST),
}


def semantics(framework: Framework) -> FrameworkSemantics:
    return FRAMEWORKS[framework]
