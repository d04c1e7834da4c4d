"""Stage 2b, the network: where ranks sit and what a collective costs there.

`topology` places each parallel group's ranks on nodes (tp, dp, pp boundaries, embedding and
gradient-statistics groups) as `Placement`s; `collectives.NetworkModel` turns (collective,
bytes, placement) into seconds from the hardware's link bandwidths, efficiencies and latencies, or
from measured NCCL tables (`nccl`).

May import: `simulator.job` and the base modules (never the graph: a collective is kind, bytes and
placement).
Exports: `collectives.NetworkModel`, `topology.*_placement` / `Placement`, `nccl.NcclTable` /
`load_nccl_table`.
Where new things go: topology as data (tiers, links, the NVLink domain) in `topology`; a new
collective algorithm (tree, NVLS, all-to-all) as a cost in `collectives` chosen the way NCCL
chooses it.
"""
