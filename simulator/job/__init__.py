"""Stage 1, the job: what the user asked for, parsed and validated at the edge.

One job is a model, a training setup, a parallel plan, a cluster and its hardware (`specs.Job`, frozen
pydantic models; `enums` for every closed choice). `loaders` read job files, presets and vTrain's
config files (`vtrain_config`) through the `catalog` of presets and hardware files under data/;
`validation` holds every cross-field rule and raises one `ConfigError` naming the fields and the fix;
`partition` splits the layers over pipeline stages (validation needs it, so it lives here);
`framework` is the one table of what differs between Megatron-LM, Megatron-DeepSpeed and eager
PyTorch. After this stage the rest of the simulator trusts its input.

May import: the base modules (`simulator.errors`, `fileio`, `memo`, `jit`) only.
Exports: `specs.Job` and its parts, `loaders.load_job` / `job_from_dict`, `validation.validate_job`,
`catalog.resolve_hardware` / `load_model` / `data_dir`, `framework.semantics`,
`partition.stage_layers` / `chunk_layers`, the enums.
Where new things go: a new field in `specs` (with its rule in `validation`); a new training stack
as a row of `framework.FRAMEWORKS`.
"""
