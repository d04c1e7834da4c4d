"""The per-rank shard of a model that one GPU runs, and the job that describes it.

Megatron-LM's tensor parallelism (Shoeybi et al. 2019; megatron/core/tensor_parallel) gives each
of `tp` ranks heads / tp attention heads and query groups / tp key-value groups (column-parallel
QKV, row-parallel output projection), ffn / tp of the MLP and vocab / tp of the embedding and
output layer (padded to a multiple of 128 * tp by Megatron, kept as it is by plain PyTorch
and Hugging Face: `simulator.costs.traced_shapes.rank_vocab`); with sequence parallelism (Korthikanti et al.
2022) the norms, dropouts and residuals of a rank hold seq / tp of the tokens. A stack traced on
one device runs exactly these shapes; its communication is left to the simulator's network model.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.costs.traced_shapes import rank_vocab
from simulator.errors import ConfigError
from simulator.job.enums import Norm, PositionEmbedding, Recompute
from simulator.job.specs import Job


@dataclass(frozen=True)
class Shard:
    """What one rank computes: every size is per rank except `hidden`, `head_dim` and `seq`."""

    hidden: int
    heads: int
    groups: int
    head_dim: int
    ffn: int
    vocab: int
    seq: int
    layers: int
    micro_batch: int
    micro_batches: int
    tp: int
    sequence_parallel: bool
    gated_mlp: bool
    norm: Norm
    use_bias: bool
    position: PositionEmbedding
    tied: bool
    hidden_dropout: float
    attention_dropout: float
    flash: bool
    recompute: Recompute

    @property
    def local_seq(self) -> int:
        """Tokens per sample in the sequence-parallel regions."""
        return self.seq // self.tp if self.sequence_parallel else self.seq


def shard_of(job: Job, tp: int, micro_batch: int, recompute: Recompute, layers: int,
             micro_batches: int, sequence_parallel: bool) -> Shard:
    """One rank's shard of `job`'s model at tensor parallelism `tp`, with the validation
    Megatron applies (heads, query groups, FFN and, with sequence parallelism, the sequence
    divisible by tp)."""
    m = job.model
    problems = [f"{name}={value} is not divisible by tp={tp}"
                for name, value in (("model.num_attention_heads", m.num_attention_heads),
                                    ("model.num_query_groups", m.query_groups),
                                    ("model.ffn_hidden_size", m.ffn))
                if value % tp]
    if sequence_parallel and m.seq_length % tp:
        problems.append(f"model.seq_length={m.seq_length} is not divisible by tp={tp} "
                        f"(sequence parallelism)")
    if problems:
        raise ConfigError(f"{m.name}: " + "; ".join(problems) + "; choose another --tp")
    return Shard(hidden=m.hidden_size, heads=m.num_attention_heads // tp,
                 groups=m.query_groups // tp, head_dim=m.head_dim, ffn=m.ffn // tp,
                 vocab=rank_vocab(job, tp), seq=m.seq_length, layers=layers,
                 micro_batch=micro_batch, micro_batches=micro_batches, tp=tp,
                 sequence_parallel=sequence_parallel and tp > 1, gated_mlp=m.gated_mlp,
                 norm=m.norm, use_bias=m.use_bias, position=m.position_embedding,
                 tied=m.tied_embeddings, hidden_dropout=m.hidden_dropout,
                 attention_dropout=m.attention_dropout, flash=job.training.flash_attention,
                 recompute=recompute)


def shard_job(job: Job, shard: Shard) -> Job:
    """The job a traced shard stands for: `job`'s model and plan at the shard's tp, micro-batch,
    recompute and depth, one pipeline stage, the shard's micro-batches per iteration."""
    model = job.model.model_copy(update={"num_layers": shard.layers})
    training = job.training.model_copy(update={
        "micro_batch_size": shard.micro_batch, "recompute": shard.recompute,
        "global_batch_size": shard.micro_batch * shard.micro_batches,
        "flash_attention": shard.flash})
    parallel = job.parallel.model_copy(update={
        "tp": shard.tp, "pp": 1, "dp": 1, "virtual_stages": 1,
        "sequence_parallel": shard.sequence_parallel, "first_stage_layers": None,
        "last_stage_layers": None})
    cluster = job.cluster.model_copy(update={"num_gpus": shard.tp})
    return job.model_copy(update={"model": model, "training": training, "parallel": parallel,
                                  "cluster": cluster})
