"""The exact, profile-driven training simulator (no dependency on the rest of vtrain-ml).

A simulation runs the stages of one iteration, each a package (docs/architecture.md draws them):
`job` (specs, validation, loaders) -> `graph` (ops of one micro-batch) and `network` (placements,
collectives) -> `costs` (op and block seconds from the analytic model, a profile or traces) ->
`timeline` (lowering, pipeline schedule and engine, the tail after it) -> `memory` (peak per stage)
-> `report` (result, metrics, renderings). `prepare` memoizes what a job alone decides (graph, round
plan, memory, FLOPs) and `simulate` composes the stages. The base modules `errors`, `fileio`,
`memo` and `jit` serve every stage. The layering is declared in pyproject.toml
([tool.importlinter]) and checked by `lint-imports`.
"""

from simulator.errors import ConfigError, VTrainError
from simulator.job.loaders import job_from_dict, load_job
from simulator.job.specs import Job
from simulator.report.result import SimulationResult
from simulator.simulate import simulate

__all__ = ["ConfigError", "Job", "SimulationResult", "VTrainError", "job_from_dict", "load_job",
           "simulate"]
