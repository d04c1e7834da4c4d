"""Stage 6, the report: one frozen `SimulationResult` and its renderings.

`result` assembles the iteration time, breakdown, per-stage reports and memory into the result
(`to_dict` is the JSON); `metrics` MFU / HFU and cost; `render` the text tables; `trace` the
Perfetto (Chrome trace) view of the timeline.

May import: every stage below (`memory`, `timeline`, `costs`, `graph`, `network`, `job`) and the
base modules; never `simulator.simulate`.
Exports: `result.SimulationResult`, `render.table` / `memory_table`, `trace.chrome_trace`,
`metrics.utilization` / `cost_usd`.
"""
