"""A transformer layer being assembled from its halves (attention: simulator.graph.dense or
.mla; MLP: dense, or the mixture of experts of simulator.graph.moe): the ops in execution order,
each half's collectives, and what the parameter-gradient kernels and the memory model need."""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.graph.ops import CommOp, Op


@dataclass
class LayerParts:
    fwd: list[Op] = field(default_factory=list)
    bwd: list[Op] = field(default_factory=list)  # in forward order; reversed when done
    attn_fwd_comm: list[CommOp] = field(default_factory=list)
    attn_bwd_comm: list[CommOp] = field(default_factory=list)
    mlp_fwd_comm: list[CommOp] = field(default_factory=list)
    mlp_bwd_comm: list[CommOp] = field(default_factory=list)
    # weights whose gradients are produced by a weight-gradient GEMM: name -> (in, out) per
    # rank, and how many such tensors (grouped experts: one per local expert)
    linears: dict[str, tuple[int, int]] = field(default_factory=dict)
    linear_tensors: dict[str, int] = field(default_factory=dict)
    linear_tokens: dict[str, int] = field(default_factory=dict)  # rows a bias gradient sums
    # norms (and other small weights) reduced over the tokens: their weight-gradient kernel and
    # tensor sizes
    small_weights: list[tuple[Op, list[int]]] = field(default_factory=list)
    dispatch_buffer_bytes: float = 0.0
    moe_saved_bytes: float = 0.0

    def add(self, pair: tuple[Op, Op] | tuple[Op, list[Op]]) -> None:
        f, b = pair
        self.fwd.append(f)
        self.bwd.extend(b if isinstance(b, list) else [b])

    def add_linear(self, ops: tuple[list[Op], list[Op]]) -> None:
        """A linear's forward ops and backward ops (simulator.graph.quantize.linear)."""
        self.fwd.extend(ops[0])
        self.bwd.extend(ops[1])

    @property
    def forward_comm(self) -> tuple[CommOp, ...]:
        return tuple(self.attn_fwd_comm + self.mlp_fwd_comm)

    @property
    def backward_comm(self) -> tuple[CommOp, ...]:
        return tuple(self.mlp_bwd_comm + self.attn_bwd_comm)
