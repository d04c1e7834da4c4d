"""Knob choices that hold two job fields as one value, so that a search never lists a
combination that is the same plan twice: the pipeline schedule with its virtual stages
("interleaved_1f1b x2"), and selective recompute with its modules
("selective:mla_up_proj+moe_act", Megatron-Core's --recompute-modules)."""

from __future__ import annotations

from typing import Any

from simulator.job.enums import Recompute, RecomputeModule, Schedule

PIPELINE_SEP = "x"  # "interleaved_1f1b x2": schedule and virtual stages as one choice


def pipeline_choices(schedules: tuple[Schedule, ...], virtual: tuple[int, ...]) -> list[str]:
    out: list[str] = []
    for schedule in schedules:
        if schedule is Schedule.INTERLEAVED_1F1B:
            out += [f"{schedule.value} {PIPELINE_SEP}{v}" for v in virtual if v >= 2]
        else:
            out.append(schedule.value)
    return out


def parse_pipeline(choice: str) -> tuple[Schedule, int]:
    name, _, v = choice.partition(f" {PIPELINE_SEP}")
    return Schedule(name), int(v) if v else 1


RECOMPUTE_SEP = ":"  # "selective:mla_up_proj+moe_act": selective recompute of these modules
DEFAULT_MODULES = (RecomputeModule.CORE_ATTN,)  # Megatron's default: plain `selective`


def recompute_choices(recompute: tuple[Recompute, ...],
                      modules: tuple[tuple[RecomputeModule, ...], ...] | None) -> list[str]:
    """The `recompute` knob's choices: each level, selective once per module list."""
    out: list[str] = []
    for level in recompute:
        if level is not Recompute.SELECTIVE or not modules:
            out.append(level.value)
            continue
        for group in modules:
            out.append(recompute_label(Recompute.SELECTIVE, group))
    return out


def canonical_modules(modules: Any) -> tuple[RecomputeModule, ...] | None:
    """Modules in the enum's order, without repeats; None for Megatron's default."""
    if modules is None:
        return None
    chosen = {RecomputeModule(str(getattr(m, "value", m)).strip().lower()) for m in modules}
    ordered = tuple(m for m in RecomputeModule if m in chosen)
    return None if ordered == DEFAULT_MODULES else ordered


def recompute_label(level: Recompute, modules: Any) -> str:
    """`selective:<a>+<b>` for selective recompute of modules other than the default, else the
    level's name (what tables, reports and the study's parameters show)."""
    chosen = canonical_modules(modules) if level is Recompute.SELECTIVE else None
    if chosen is None:
        return level.value
    return f"{level.value}{RECOMPUTE_SEP}{'+'.join(m.value for m in chosen)}"


def parse_recompute(choice: str) -> tuple[Recompute, tuple[RecomputeModule, ...] | None]:
    level, _, modules = str(choice).partition(RECOMPUTE_SEP)
    return Recompute(level), canonical_modules(modules.split("+")) if modules else None
