"""The surrogate: sample the exact simulator, train a gradient-boosted model, serve fast predictions.

Data flow, one module per stage: `space` (the YAML space) -> `sampling` (unit-cube points ->
valid job records) -> `generate` / `dataset` (parallel exact simulation, Parquet chunks) ->
`features` / `physics` / `timing` / `kernel` / `encoding` (records -> closed-form features,
compiled per row where numba is installed) -> `model`
(`Surrogate`: XGBoost on log residuals; `splits` by model shape; `tuning` with Optuna) ->
`evaluate` / `plots` (metrics, figures) -> `artifact` (UBJ + metadata.json, hash guard);
`workflow` strings them into the CLI's commands. Depends on `simulator` only.
"""
