"""The Megatron-Core stack: `megatron.core.models.gpt.GPTModel` wrapped in Megatron's
`Float16Module`, one rank in a one-process model-parallel group.

How Megatron-LM builds it (megatron/training/training.py `get_model`, pretrain_gpt.py
`model_provider`, `forward_step`, `loss_func`), reproduced for one rank of the shard:
- `torch.distributed` on a one-process group (gloo on CPU, nccl on CUDA; an in-process
  `HashStore`, so no port is opened) and `parallel_state.initialize_model_parallel(1, 1)`: the
  shard already has its per-rank sizes (heads, query groups, FFN and vocabulary / tp), so the
  model runs tp=1 on those sizes and its tensor-parallel collectives act on one rank.
- `TransformerConfig` from the shard; the layer spec is `get_gpt_layer_local_spec` (Megatron-Core
  modules only: ColumnParallelLinear / RowParallelLinear, DotProductAttention, torch norms), or
  `get_gpt_layer_with_transformer_engine_spec` on CUDA when transformer_engine is importable.
  The fusions Megatron-LM's arguments turn on by default (megatron/training/arguments.py:
  bias-dropout-add and bias-activation fusion, masked-softmax fusion where its CUDA extension
  exists) are on.
- Mixed precision the Megatron way, not torch.autocast: `Float16Module` casts the model to bf16
  (fp16 is refused: Megatron's fp16 needs its loss-scaling optimizer) and the loss function
  turns off the runner's autocast (Megatron's linear layers declare their autocast behaviour
  for device_type="cuda" only, tensor_parallel/layers.py `custom_fwd`/`custom_bwd`).
- forward with an explicit causal mask and `labels` (GPTModel returns the per-token loss from
  `vocab_parallel_cross_entropy`), mean loss, backward.
- The optimizer is the runner's plain `torch.optim.AdamW` over the model's (bf16) parameters:
  Megatron's DDP grad buffers and its mixed-precision / distributed optimizer are CUDA-only
  (distributed/param_and_grad_buffer.py allocates on `torch.cuda.current_device()`,
  optimizer/optimizer.py `Float16OptimizerWithFloat16Params` accepts only `torch.cuda.*Tensor`
  parameters), so the traced optimizer step has no fp32 main-parameter copies.
- Recompute: `recompute_granularity` full (uniform, one layer per checkpoint: Megatron's
  reentrant `tensor_parallel.checkpoint`) or selective (the attention core).

On CPU four places in megatron-core 0.16 hard-code CUDA; `_cpu_shims` replaces exactly these
with device-generic equivalents, none of which launches or removes a kernel:
1. `GlobalMemoryBuffer.get_tensor` (core/utils.py) allocates on `torch.cuda.current_device()`;
   DotProductAttention takes its attention-score buffer from it -> a CPU buffer of the same kind.
2. `CudaRNGStatesTracker.add` and `tensor_parallel.random._get_cuda_rng_state` /
   `_set_cuda_rng_state` read and write the CUDA generator (the forked state for dropout in the
   attention core, the states a recomputed layer restores) -> the CPU generator.
3. `RotaryEmbedding.get_emb` moves its frequencies to `torch.cuda.current_device()` -> they stay.
4. `get_default_causal_mask` (transformer/utils.py) builds the mask on "cuda" when none is given
   -> the loss function passes the causal mask, as Megatron-LM's data loader does.
On CUDA megatron-core runs unmodified.
"""

from __future__ import annotations

import functools
import importlib.util
import operator
import warnings
from collections.abc import Callable
from typing import Any

from profiler.stacks.shard import Shard
from simulator.errors import ConfigError
from simulator.job.enums import Norm, PositionEmbedding, Recompute


def available() -> bool:
    return importlib.util.find_spec("megatron") is not None and \
        importlib.util.find_spec("megatron.core") is not None


def build(shard: Shard) -> tuple[Any, Any]:
    """The model (Float16Module(GPTModel)) and its loss function of (model, input ids), on the
    device the runner builds under (`with device:`)."""
    if not available():
        raise ConfigError("--stack megatron-core needs the megatron-core package (pip install "
                          "'vtrain-ml[megatron]'); or use --stack reference")
    # megatron-core warns at import about every optional accelerator it falls back from (Apex,
    # Transformer Engine) and about its own default cuda_graph_scope; what it falls back to is
    # documented above, so these do not reach the user's terminal
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module=r"megatron\.")
        return _build(shard)


def _build(shard: Shard) -> tuple[Any, Any]:
    import torch

    _check(shard)
    device = torch.get_default_device()
    cuda = device.type == "cuda"
    te = cuda and importlib.util.find_spec("transformer_engine") is not None
    if not cuda and device.type != "cpu":
        raise ConfigError(f"--stack megatron-core runs on cuda or cpu, not {device.type}")
    if shard.flash and not te:
        raise ConfigError("--stack megatron-core: Megatron-Core's local layer spec computes "
                          "attention unfused (DotProductAttention: baddbmm, softmax, dropout, bmm), "
                          "so it cannot trace a flash-attention shape; use --attention unfused "
                          "(flash attention needs Transformer Engine on CUDA)")
    _init_parallel_state(cuda)
    from megatron.core import tensor_parallel
    from megatron.core.models.gpt import GPTModel
    from megatron.core.transformer.module import Float16Module

    tensor_parallel.model_parallel_cuda_manual_seed(torch.initial_seed() % 2**31)
    config = _config(shard, cuda, te)
    model = GPTModel(config=config, transformer_layer_spec=_layer_spec(shard, te),
                     vocab_size=shard.vocab, max_sequence_length=shard.seq,
                     share_embeddings_and_output_weights=shard.tied,
                     position_embedding_type="rope" if shard.position is PositionEmbedding.ROPE
                     else "learned_absolute")
    if not cuda and shard.position is PositionEmbedding.ROPE:
        model.rotary_pos_emb.__class__ = _cpu_rotary_class()
    return Float16Module(config, model), _loss(shard)


def _check(shard: Shard) -> None:
    if shard.sequence_parallel:
        raise ConfigError("--stack megatron-core runs one rank in a one-process group (tp=1 on "
                          "the rank's per-rank sizes), where Megatron has no sequence parallelism; "
                          "use --sequence-parallel off, or --stack reference")


def _init_parallel_state(cuda: bool) -> None:
    """A one-process default group and Megatron's model-parallel groups (idempotent: every
    traced shape of a run reuses them)."""
    import torch
    from megatron.core import parallel_state

    dist = torch.distributed
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0,
                                world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    if not cuda:
        _cpu_shims()


def _config(shard: Shard, cuda: bool, te: bool) -> Any:
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import TransformerConfig

    c = shard
    recompute = {Recompute.FULL: "full", Recompute.SELECTIVE: "selective"}.get(c.recompute)
    return TransformerConfig(
        num_layers=c.layers, hidden_size=c.hidden, num_attention_heads=c.heads,
        num_query_groups=c.groups, kv_channels=c.head_dim, ffn_hidden_size=c.ffn,
        gated_linear_unit=c.gated_mlp, activation_func=F.silu if c.gated_mlp else F.gelu,
        add_bias_linear=c.use_bias,
        normalization="RMSNorm" if c.norm is Norm.RMSNORM else "LayerNorm",
        hidden_dropout=c.hidden_dropout, attention_dropout=c.attention_dropout,
        bf16=True, params_dtype=torch.bfloat16, use_cpu_initialization=not cuda,
        # Megatron-LM's argument defaults (arguments.py) turn these fusions on; they are
        # torch.compile'd (megatron/core/jit.py), which on CPU takes ~20 s per shape: CUDA only
        bias_dropout_fusion=cuda, bias_activation_fusion=cuda and (c.use_bias or c.gated_mlp),
        masked_softmax_fusion=cuda and importlib.util.find_spec("scaled_masked_softmax_cuda")
        is not None,
        attention_backend=(AttnBackend.flash if c.flash else AttnBackend.unfused) if te
        else AttnBackend.local,
        recompute_granularity=recompute,
        recompute_method="uniform" if c.recompute is Recompute.FULL else None,
        recompute_num_layers=1 if c.recompute is Recompute.FULL else None)


def _layer_spec(shard: Shard, te: bool) -> Any:
    from megatron.core.models.gpt import gpt_layer_specs

    if te:
        return gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
    return gpt_layer_specs.get_gpt_layer_local_spec(
        normalization="RMSNorm" if shard.norm is Norm.RMSNORM else "LayerNorm")


def _loss(shard: Shard) -> Callable[[Any, Any], Any]:
    """Megatron-LM's forward_step + loss_func for a batch of token ids (labels = the ids: only
    the cost matters): explicit causal mask, per-token losses, their mean; no autocast."""
    import torch

    cached: dict[str, Any] = {}

    def loss(model: Any, ids: Any) -> Any:
        kind = ids.device.type
        if torch.is_autocast_enabled(kind) and torch.get_autocast_dtype(kind) == torch.float16:
            raise ConfigError("--stack megatron-core traces bf16 only (Megatron's fp16 needs its "
                              "loss-scaling optimizer); set training.precision: bf16")
        if kind not in cached:
            t = ids.shape[1]
            cached[kind] = (torch.arange(t, device=ids.device).unsqueeze(0),
                            torch.ones(t, t, dtype=torch.bool, device=ids.device).triu(1)
                            .view(1, 1, t, t))
        position_ids, mask = cached[kind]
        with torch.autocast(kind, enabled=False):
            return model(ids, position_ids, mask, labels=ids).mean()
    return loss


def _cpu_shims() -> None:
    """Points 1 and 2 of the module docstring: megatron-core's CUDA-only memory buffer and RNG
    state functions replaced by CPU ones (process-wide, like megatron's own parallel state)."""
    import torch
    from megatron.core import parallel_state
    from megatron.core import utils as core_utils
    from megatron.core.tensor_parallel import random as core_random

    class CpuMemoryBuffer(core_utils.GlobalMemoryBuffer):  # type: ignore[misc]
        def get_tensor(self, tensor_shape: Any, dtype: Any, name: str,
                       mem_alloc_context: Any = None) -> Any:
            size = functools.reduce(operator.mul, tensor_shape, 1)
            key = (name, dtype)
            if key not in self.buffer or self.buffer[key].numel() < size:
                self.buffer[key] = torch.empty(size, dtype=dtype, requires_grad=False)
            return self.buffer[key][0:size].view(*tensor_shape)

    class CpuRNGStatesTracker(core_random.CudaRNGStatesTracker):  # type: ignore[misc]
        def add(self, name: str, seed: int) -> None:
            self._is_initialized = True
            if seed in self.seeds_ or name in self.states_:
                raise ValueError(f"rng state {name} / seed {seed} already exists")
            self.seeds_.add(seed)
            self.states_[name] = torch.Generator().manual_seed(seed).get_state()

        def fork(self, name: str = core_random._MODEL_PARALLEL_RNG_TRACKER_NAME) -> Any:
            return _cpu_fork(self, name)

    if not isinstance(parallel_state._GLOBAL_MEMORY_BUFFER, CpuMemoryBuffer):
        parallel_state._GLOBAL_MEMORY_BUFFER = CpuMemoryBuffer()
    core_random._get_cuda_rng_state = lambda *_a, **_k: torch.get_rng_state()
    core_random._set_cuda_rng_state = lambda state, *_a, **_k: torch.set_rng_state(state)
    core_random._CUDA_RNG_STATE_TRACKER = CpuRNGStatesTracker()
    core_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


def _cpu_fork(tracker: Any, name: str) -> Any:
    """CudaRNGStatesTracker.fork on the CPU generator: run under the named state, keep its
    advance, restore the caller's state (megatron's fork warns whenever the CPU generator moves
    inside it, which on CPU is every dropout)."""
    import contextlib

    import torch

    @contextlib.contextmanager
    def fork() -> Any:
        if name not in tracker.states_:
            raise ValueError(f"rng state {name} is not added")
        outer = torch.get_rng_state()
        torch.set_rng_state(tracker.states_[name])
        try:
            yield
        finally:
            tracker.states_[name] = torch.get_rng_state()
            torch.set_rng_state(outer)
    return fork()


@functools.cache
def _cpu_rotary_class() -> type:
    """Point 3 of the module docstring: RotaryEmbedding whose frequencies stay on the CPU."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    class CpuRotaryEmbedding(RotaryEmbedding):  # type: ignore[misc]
        def get_emb(self, max_seq_len: int, offset: int = 0) -> Any:
            import torch

            freqs = self.get_freqs_non_repeated(max_seq_len, offset)
            if self.rotary_interleaved:
                emb = torch.stack((freqs.view(-1, 1), freqs.view(-1, 1)), dim=-1).view(
                    freqs.shape[0], -1)
            else:
                emb = torch.cat((freqs, freqs), dim=-1)
            return emb[:, None, None, :]
    return CpuRotaryEmbedding
