"""`baseline:` -- a hand-picked plan (a published layout, the current one) the search must beat.

It is given by the knobs' names, which are the job's field names (`tp`, `pp`, `ep`, `cp`,
`precision`, `hardware`, `num_gpus`, ...); `schedule` and `virtual_stages` may be given apart (the
space searches them as one `pipeline` knob), and so may `recompute_modules` (one `recompute`
choice, `selective:<modules>`). A knob left out takes the space's first (or fixed)
value. A field the space does not search (`cp: 1` in a space without a cp knob, `dp` derived from
`num_gpus`) is accepted when the plan has that value and refused, naming it, when it does not:
the baseline is then not a plan of this space.
"""

from __future__ import annotations

from typing import Any

from simulator.errors import ConfigError
from simulator.job.enums import Recompute
from vtrain_ml.planner.choices import PIPELINE_SEP, recompute_label
from vtrain_ml.planner.dimensions import precision_choice
from vtrain_ml.planner.report import plan_dict
from vtrain_ml.planner.space import Candidate, SearchSpace


def baseline_params(space: SearchSpace) -> dict[str, Any] | None:
    """The baseline's knob values (every knob), or None without a baseline."""
    given = space.config.baseline
    if given is None:
        return None
    params = dict(given)
    if "schedule" in params or "virtual_stages" in params:
        schedule = str(params.pop("schedule", "interleaved_1f1b" if int(params.get("virtual_stages", 1)) > 1
                                  else "1f1b"))
        virtual = int(params.pop("virtual_stages", 1))
        params.setdefault("pipeline", f"{schedule} {PIPELINE_SEP}{virtual}" if virtual > 1 else schedule)
    if "recompute_modules" in params:  # one `recompute` choice, as the space lists them
        level = Recompute(str(params.get("recompute", Recompute.SELECTIVE.value)))
        params["recompute"] = recompute_label(level, params.pop("recompute_modules"))
    names = {k.name for k in space.knobs}
    return {k.name: _normal(k.name, params.get(k.name, k.choices[0])) for k in space.knobs} | {
        k: v for k, v in params.items() if k not in names}


def _normal(name: str, value: Any) -> Any:
    return str(value).strip().lower() if name == "precision" else value


def baseline_candidate(space: SearchSpace) -> Candidate | None:
    """The baseline as a checked candidate (a bad one is a `ConfigError` before any work)."""
    params = baseline_params(space)
    if params is None:
        return None
    names = {k.name for k in space.knobs}
    knobs = {k: v for k, v in params.items() if k in names}
    outside = [f"{k.name}={knobs[k.name]} (the space has {', '.join(map(str, k.choices))})"
               for k in space.knobs
               if not any(str(knobs[k.name]).lower() == str(c).lower() for c in k.choices)]
    if outside:  # a study records each exact plan as a trial of the space's choices
        raise ConfigError(f"baseline is not a plan of this space: {'; '.join(outside)}; add the "
                          f"value to the space's list (recompute modules: space.recompute_modules)")
    candidate = space.build(knobs, distinct=False)  # the plan the user gave, as given
    if candidate.job is None:
        raise ConfigError(f"baseline {space.config.baseline} is not a valid plan: "
                          f"{'; '.join(candidate.reasons)}")
    plan = plan_dict(candidate.job, with_model=False)
    others = {k: v for k, v in params.items() if k not in names}
    unknown = sorted(k for k in others if k not in plan)
    if unknown:
        raise ConfigError(f"baseline has unknown knob(s) {', '.join(unknown)}; "
                          f"knobs: {', '.join(sorted(names))}")
    wrong = [f"{k}={v} (the space's plans have {plan[k]}; add space.{k} to search it)"
             for k, v in others.items() if not _same(space, k, v, plan[k])]
    if wrong:
        raise ConfigError(f"baseline is not a plan of this space: {'; '.join(wrong)}")
    if not candidate.valid:
        raise ConfigError(f"baseline {space.config.baseline} is not a valid plan: "
                          f"{'; '.join(candidate.reasons)}")
    return candidate


def _same(space: SearchSpace, key: str, given: Any, value: Any) -> bool:
    if key == "precision":
        mine = precision_choice(space.config, given)
        theirs = str(value).split("/")
        return mine.precision.value == theirs[0] and (
            (mine.fp8_recipe or mine.fp4_recipe) is None or f"{mine.precision.value}/"
            f"{(mine.fp8_recipe or mine.fp4_recipe).value}" == value)  # type: ignore[union-attr]
    return str(given).lower() == str(value).lower()


__all__ = ["baseline_candidate", "baseline_params"]
