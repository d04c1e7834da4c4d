"""Kineto (torch.profiler) traces of real training iterations -> phase costs for the simulator.

Data flows one way: `reader` streams the Chrome-trace JSON (never the whole file in memory),
`events` keeps the few fields we need per CPU op, runtime call and GPU kernel, `links` ties each
kernel to the CPU op that launched it (correlation ids), `phases` cuts the iteration into
embedding / layer forward, recompute, backward / head / optimizer from the trace's own structure,
`summary` aggregates kernel time, kernel classes and host time per phase, and `importer` writes
them into a profile (`simulator.costs.profile_format`, schema 2). The simulator never reads a trace.
"""
