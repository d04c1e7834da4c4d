"""Stage 2b, the network: where ranks sit and what a collective costs there.

`fabric` resolves the cluster's network as data (NVLink domains, a NIC per GPU, a fat tree's
switch tiers with oversubscription and hop latency: `cluster.topology`, `cluster.nvlink_domain`);
`topology` places each parallel group's ranks on it (tp, dp, pp boundaries, embedding and
gradient-statistics groups) as `Placement`s: members per domain, the tier they climb, the share
of bandwidth the oversubscribed tiers leave them; `algorithms` is NCCL's tuning model (ring,
tree, NVLS, NVLS-Tree, CollNet, PAT; LL, LL128, Simple) and its choice; `collectives.NetworkModel`
turns (collective, bytes, placement) into seconds through one cost function per kind, or from
measured NCCL tables (`nccl`).

May import: `simulator.job` and the base modules (never the graph: a collective is kind, bytes and
placement).
Exports: `collectives.NetworkModel`, `topology.*_placement` / `Placement`, `fabric.fabric`,
`algorithms.choose`, `nccl.NcclTable` / `load_nccl_table`.
Where new things go: topology as data in `fabric` (read from `job.specs.TopologySpec`); a new
collective kind (all-to-all) as a cost function in `collectives.COSTS` (its algorithm in a module
of its own); a new NCCL algorithm in `algorithms.candidates`.
"""
