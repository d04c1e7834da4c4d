"""The one result of a search (or an exhaustive enumeration) and its renderings.

`SearchReport` holds exact evaluations only -- the surrogate's numbers appear solely as the
`predicted` side of the verified points, to report its error. `to_dict` is the `--json` output;
`render_table` and `pareto_figure` are views of the same object.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from simulator.graph.params import total_params
from simulator.job.precision import recipe_name
from simulator.job.specs import GiB, Job
from vtrain_ml.planner.choices import recompute_label
from vtrain_ml.planner.config import Objective, SearchConfig
from vtrain_ml.planner.evaluation import Evaluation
from vtrain_ml.planner.objective import constraint_values
from vtrain_ml.planner.ranking import rank

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plan_dict(job: Job, with_model: bool) -> dict[str, Any]:
    """The layout (and, for architecture searches, the model) of a candidate job."""
    p, t = job.parallel, job.training
    plan: dict[str, Any] = {}
    if with_model:
        m = job.model
        plan |= {"num_layers": m.num_layers, "hidden_size": m.hidden_size,
                 "num_attention_heads": m.num_attention_heads, "parameters": total_params(m)}
    plan |= {
        "tp": p.tp, "pp": p.pp, "dp": job.dp, "num_gpus": job.cluster.num_gpus,
        "micro_batch_size": t.micro_batch_size,
        "recompute": recompute_label(t.recompute, t.recompute_modules),
        "schedule": p.schedule.value, "virtual_stages": p.virtual_stages,
        "sequence_parallel": p.sequence_parallel, "distributed_optimizer": p.distributed_optimizer,
        "overlap_grad_reduce": p.overlap_grad_reduce, "flash_attention": t.flash_attention,
    }
    recipe = recipe_name(job)
    plan |= {  # issue 25's dimensions, by the job's field names
        "hardware": job.cluster.gpu, "cp": p.cp, "cp_comm_type": p.cp_comm_type.value, "ep": p.ep,
        "precision": t.precision.value + (f"/{recipe}" if recipe else ""),
        "data_parallel_sharding": job.sharding.value, "cuda_graphs": t.cuda_graphs.value,
        "tp_comm_overlap": p.tp_comm_overlap, "price_per_gpu_hour_usd": job.price_per_gpu_hour_usd,
        "overlap_param_gather": p.overlap_param_gather,
    }
    if t.grad_reduce_in_fp32 is not None:  # the memory settings, where a plan sets them
        plan["grad_reduce_in_fp32"] = t.grad_reduce_in_fp32
    if t.exp_avg_dtype.value != "fp32" or t.exp_avg_sq_dtype.value != "fp32":
        plan |= {"exp_avg_dtype": t.exp_avg_dtype.value, "exp_avg_sq_dtype": t.exp_avg_sq_dtype.value}
    if job.model.is_moe:
        plan |= {"expert_tp": job.expert_tp, "moe_token_dispatcher": t.moe_token_dispatcher.value,
                 "moe_overlap_ep_comm": t.moe_overlap_ep_comm}
    return plan


# Columns of the table for issue 25's dimensions: (plan key, header, width, shown when a value
# differs from this default; None: only when the rows differ)
EXTRA_COLUMNS: tuple[tuple[str, str, int, Any], ...] = (
    ("hardware", "gpu", 14, None), ("cp", "cp", 3, 1), ("cp_comm_type", "cp comm", 10, "p2p"),
    ("ep", "ep", 4, 1), ("expert_tp", "etp", 3, None), ("precision", "precision", 15, None),
    ("data_parallel_sharding", "sharding", 18, None), ("cuda_graphs", "graphs", 14, "none"),
    ("tp_comm_overlap", "tpo", 3, False), ("moe_token_dispatcher", "dispatch", 9, None),
    ("moe_overlap_ep_comm", "epo", 3, False), ("grad_reduce_in_fp32", "g32", 3, True),
    ("exp_avg_dtype", "m1", 4, "fp32"), ("exp_avg_sq_dtype", "m2", 4, "fp32"),
    ("overlap_param_gather", "opg", 3, False),
)


def extra_columns(plans: Sequence[dict[str, Any]],
                  always: Collection[str] = ()) -> list[tuple[str, str, int]]:
    """The issue-25 columns worth showing for `plans`: those whose values differ between them
    or from the default (a dense single-GPU-type 16-bit search shows none: its table as before);
    low precision is always shown, and so are the columns `always` names (`searched_columns`)."""
    shown = []
    for key, head, width, default in EXTRA_COLUMNS:
        if key in always:
            shown.append((key, head, width))
            continue
        values = [p.get(key) for p in plans if key in p]
        low = key == "precision" and any(str(v).startswith(("fp8", "fp4")) for v in values)
        if key == "data_parallel_sharding":  # no_shard / optim: the D flag already says it
            values = [v for v in values if v not in ("no_shard", "optim")]
            if values:
                shown.append((key, head, width))
            continue
        if values and (len(set(values)) > 1 or (default is not None and values[0] != default) or low):
            shown.append((key, head, width))
    return shown


def searched_columns(report: SearchReport) -> set[str]:
    """The GPU type and the precision wherever the search simulated more than one (and the GPU
    type wherever it searched several): "which GPU should I rent, in which format?" is answered
    in the table even when the top rows all chose the same."""
    shown = {key for key in ("hardware", "precision")
             if len({o.plan.get(key) for o in report.evaluated if key in o.plan}) > 1}
    return shown | ({"hardware"} if len(report.hardware) > 1 else set())


@dataclass(frozen=True)
class PlanOutcome:
    """One exactly simulated plan (and what the surrogate had predicted for it, if anything)."""

    plan: dict[str, Any]
    exact: Evaluation
    predicted: Evaluation | None = None

    def to_dict(self) -> dict[str, Any]:
        e = self.exact
        out: dict[str, Any] = {
            "plan": self.plan, "iteration_time_s": e.iteration_time_s, "cost_usd": e.cost_usd,
            "cost_per_iteration_usd": e.cost_per_iteration_usd,
            "usd_per_million_tokens": e.usd_per_million_tokens, "time_to_train_s": e.time_to_train_s,
            "cost_to_train_usd": e.cost_to_train_usd, "mfu": e.mfu, "peak_memory_bytes": e.peak_memory_bytes,
            "fits_in_memory": e.fits_in_memory, "num_gpus": e.num_gpus, "parameters": e.parameters,
        }
        if self.predicted is not None:
            out["predicted_iteration_time_s"] = self.predicted.iteration_time_s
        return out


@dataclass(frozen=True)
class SearchReport:
    objective: Objective
    mode: str  # "search" or "exhaustive"
    best: PlanOutcome | None
    top: tuple[PlanOutcome, ...]
    pareto: tuple[PlanOutcome, ...]
    evaluated: tuple[PlanOutcome, ...] = field(repr=False)
    exact_evaluations: int
    trials: int
    wall_s: float
    space_size: int
    baseline: PlanOutcome | None = None
    surrogate: dict[str, Any] = field(default_factory=dict)
    study: str | None = None
    storage: str | None = None
    pruned_values: dict[str, dict[str, str]] = field(default_factory=dict)
    ranked: tuple[PlanOutcome, ...] = field(default=(), repr=False)  # every evaluated plan, best first
    n_feasible: int = 0  # the first n_feasible of `ranked` meet every constraint
    complete: bool = False  # every valid plan of the space was simulated (the front is exact)
    notes: tuple[str, ...] = ()  # what the space holds once, what it leaves out (`rules.*_notes`)
    hardware: tuple[str, ...] = ()  # the GPU types searched (a `hardware:` list's entries)

    @property
    def feasible(self) -> tuple[PlanOutcome, ...]:
        return self.ranked[: self.n_feasible]

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective.value, "mode": self.mode,
            "best": self.best.to_dict() if self.best else None,
            "pareto": [p.to_dict() for p in self.pareto],
            "top": [p.to_dict() for p in self.top],
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "exact_evaluations": self.exact_evaluations, "trials": self.trials, "wall_s": self.wall_s,
            "space_size": self.space_size, "feasible_evaluated": sum(o.exact.fits_in_memory
                                                                    for o in self.evaluated),
            "surrogate": self.surrogate, "study": self.study, "storage": self.storage,
            "pruned_values": self.pruned_values, "complete": self.complete, "notes": list(self.notes),
            "hardware": list(self.hardware),
            "strategy": self.surrogate.get("strategy"),
            "interrupted": bool(self.surrogate.get("interrupted")),
        }


def ranked_outcomes(config: SearchConfig, capacity_bytes: float,
                    outcomes: Sequence[PlanOutcome]) -> tuple[tuple[PlanOutcome, ...], int]:
    """Every outcome in the objective's order (feasible first), and how many are feasible."""
    constraints = [constraint_values(config, capacity_bytes, o.exact) for o in outcomes]
    order = rank(config.objective, [o.exact for o in outcomes], constraints)
    return tuple(outcomes[i] for i in order), sum(all(c <= 0 for c in cs) for cs in constraints)


def summarize(config: SearchConfig, capacity_bytes: float, outcomes: Sequence[PlanOutcome],
              top_n: int = 10) -> tuple[PlanOutcome | None, tuple[PlanOutcome, ...], tuple[PlanOutcome, ...]]:
    """Best, top-n and the time-versus-cost Pareto front of exactly evaluated, feasible plans."""
    constraints = [constraint_values(config, capacity_bytes, o.exact) for o in outcomes]
    feasible = [all(c <= 0 for c in cs) for cs in constraints]
    order = [i for i in rank(config.objective, [o.exact for o in outcomes], constraints) if feasible[i]]
    top = tuple(outcomes[i] for i in order[:top_n])
    front = rank(Objective.PARETO, [o.exact for o in outcomes], constraints)
    pareto_idx = [i for i in front if feasible[i] and not any(
        feasible[j] and _dominates(outcomes[j].exact, outcomes[i].exact) for j in range(len(outcomes)))]
    pareto = tuple(sorted((outcomes[i] for i in pareto_idx), key=lambda o: o.exact.iteration_time_s))
    return (top[0] if top else None), top, pareto


def _dominates(a: Evaluation, b: Evaluation) -> bool:
    ta, ca, tb, cb = a.iteration_time_s, a.cost_usd, b.iteration_time_s, b.cost_usd
    return ta <= tb and ca <= cb and (ta < tb or ca < cb)


def surrogate_error(outcomes: Sequence[PlanOutcome]) -> dict[str, Any]:
    """Surrogate-versus-exact error on the verified points (absolute percentage errors)."""
    pairs = [(o.predicted, o.exact) for o in outcomes if o.predicted is not None]
    if not pairs:
        return {"verified_points": 0}
    time_ape = np.array([abs(p.iteration_time_s / e.iteration_time_s - 1) for p, e in pairs]) * 100
    mem_ape = np.array([abs(p.peak_memory_bytes / e.peak_memory_bytes - 1) for p, e in pairs]) * 100
    fit_agree = np.mean([p.fits_in_memory == e.fits_in_memory for p, e in pairs]) * 100
    return {"verified_points": len(pairs), "time_mape_pct": float(time_ape.mean()),
            "time_max_ape_pct": float(time_ape.max()), "memory_mape_pct": float(mem_ape.mean()),
            "fits_agreement_pct": float(fit_agree)}


def _layout(plan: dict[str, Any]) -> str:
    sched = plan["schedule"] + (f"x{plan['virtual_stages']}" if plan["virtual_stages"] > 1 else "")
    flags = "".join(s for s, on in (("S", plan["sequence_parallel"]), ("D", plan["distributed_optimizer"]),
                                    ("O", plan["overlap_grad_reduce"])) if on) or "-"
    return (f"{plan['tp']:>2}x{plan['pp']:<3}x{plan['dp']:<4} {plan['num_gpus']:>5} "
            f"mb{plan['micro_batch_size']:<2} {plan['recompute']:<9} {sched:<19} {flags:<3}")


# --sort keys: smaller first (MFU: larger first)
SORT_KEYS: dict[str, Callable[[Evaluation], float]] = {
    "time": lambda e: e.iteration_time_s, "cost": lambda e: e.cost_usd, "gpus": lambda e: e.num_gpus,
    "mfu": lambda e: -e.mfu, "memory": lambda e: e.peak_memory_bytes,
}


def sorted_plans(plans: Sequence[PlanOutcome], key: str | None) -> list[PlanOutcome]:
    """`plans` by a --sort key (ties: faster first); None keeps their order."""
    if key is None:
        return list(plans)
    by = SORT_KEYS[key]
    return sorted(plans, key=lambda o: (by(o.exact), o.exact.iteration_time_s))


def table_rows(report: SearchReport, sort: str | None) -> tuple[PlanOutcome, ...]:
    """The plans of the table: the objective's top plans, or the top by a --sort key."""
    if sort is None:
        return report.top
    return tuple(sorted_plans(report.feasible, sort)[: len(report.top)])


def plans_frame(report: SearchReport, sort: str | None = None) -> pd.DataFrame:
    """Every exactly evaluated plan as a table (--csv): rank, feasibility, knobs, exact results."""
    feasible = {id(o) for o in report.feasible}
    ordered = sorted_plans(report.feasible, sort) + [o for o in report.ranked if id(o) not in feasible]
    rows = [{"rank": i + 1, "feasible": id(o) in feasible, **o.plan,
             **{k: v for k, v in o.to_dict().items() if k not in {"plan", "num_gpus", "parameters"}}}
            for i, o in enumerate(ordered)]
    return pd.DataFrame(rows)


def describe_plan(plan: dict[str, Any], hardware: bool = False) -> str:
    """One plan in words: 'tp=8 pp=21 dp=20 on 3,360 GPUs (micro-batch 1, full recompute, 1f1b)'."""
    model = (f"{plan['parameters'] / 1e9:.1f}B parameters ({plan['num_layers']} layers x "
             f"{plan['hidden_size']:,} hidden) with " if "num_layers" in plan else "")
    sched = plan["schedule"] + (f" x{plan['virtual_stages']}" if plan["virtual_stages"] > 1 else "")
    extras = [name for name, on in (("sequence parallel", plan["sequence_parallel"]),
                                    ("distributed optimizer", plan["distributed_optimizer"]),
                                    ("overlapped grad reduce", plan["overlap_grad_reduce"])) if on]
    extras += [f"{key}={plan[key]}" for key, value in (("cp", 1), ("ep", 1), ("cp_comm_type", "p2p"),
                                                        ("cuda_graphs", "none"), ("tp_comm_overlap", False),
                                                        ("moe_overlap_ep_comm", False),
                                                        ("overlap_param_gather", False))
               if key in plan and plan[key] != value and (key != "cp_comm_type" or plan.get("cp", 1) > 1)]
    if str(plan.get("precision", "")).startswith(("fp8", "fp4")):
        extras.append(str(plan["precision"]))
    if plan.get("data_parallel_sharding", "no_shard") not in ("no_shard", "optim"):
        extras.append(f"sharding {plan['data_parallel_sharding']}")
    gpus = f"{plan['hardware']} GPUs" if hardware and plan.get("hardware") else "GPUs"
    return (f"{model}tp={plan['tp']} pp={plan['pp']} dp={plan['dp']} on {plan['num_gpus']:,} {gpus} "
            f"(micro-batch {plan['micro_batch_size']}, {plan['recompute']} recompute, {sched}"
            + "".join(f", {x}" for x in extras) + ")")


describe = describe_plan


def _cost_text(e: Evaluation, tokens: float | None) -> str:
    price = e.usd_per_million_tokens
    per_million = f" (${price:,.2f} per million tokens)" if price else ""
    if e.time_to_train_s is not None and e.cost_to_train_usd is not None:
        budget = f"{tokens / 1e9:,.0f}B tokens" if tokens else "the token budget"
        return (f"{e.time_to_train_s / 86400:,.1f} days and ${e.cost_to_train_usd:,.0f} to train {budget}"
                + per_million)
    return f"${e.cost_per_iteration_usd:,.2f} per iteration" + per_million


def recommendation(report: SearchReport, tokens: float | None = None) -> list[str]:
    """The answer in words: the recommended plan, its time and cost (to train `tokens`, when the
    search had a token budget), against the baseline."""
    if report.best is None:
        return ["no feasible plan found: see the reasons above, or widen the space"]
    shown = (*report.evaluated, *([report.baseline] if report.baseline else []))
    kinds = {o.plan.get("hardware") for o in shown}

    def describe_plan(plan: dict[str, Any]) -> str:  # the GPU type named when the search had several
        return describe(plan, len(kinds) > 1 or len(report.hardware) > 1)

    if report.objective is Objective.PARETO and report.pareto:
        fast, cheap = report.pareto[0], report.pareto[-1]
        if fast is cheap:  # one plan is both
            lines = [f"the front is one plan, fastest and cheapest: {describe_plan(fast.plan)}: "
                     f"{fast.exact.iteration_time_s:.2f} s/iteration, {_cost_text(fast.exact, tokens)}"]
        else:
            lines = [f"fastest on the front: {describe_plan(fast.plan)}: {fast.exact.iteration_time_s:.2f} "
                     f"s/iteration, {_cost_text(fast.exact, tokens)}",
                     f"cheapest on the front: {describe_plan(cheap.plan)}: "
                     f"{cheap.exact.iteration_time_s:.2f} s/iteration, {_cost_text(cheap.exact, tokens)}"]
        who = ("the front's plan is", "") if fast is cheap else ("the front's fastest is", "its cheapest ")
    else:
        fast = cheap = report.best
        lines = [f"recommended: {describe_plan(fast.plan)}: {fast.exact.iteration_time_s:.2f} s/iteration, "
                 f"{_cost_text(fast.exact, tokens)}"]
        who = ("the recommendation is", "")
    if report.baseline is not None:
        base = report.baseline.exact
        saving = base.cost_usd - cheap.exact.cost_usd
        lines.append(f"  vs the baseline {describe_plan(report.baseline.plan)}: "
                     f"{base.iteration_time_s:.2f} s/iteration, {_cost_text(base, tokens)}; {who[0]} "
                     f"{base.iteration_time_s / fast.exact.iteration_time_s:.3f}x faster and {who[1]}"
                     f"${abs(saving):,.0f} ({abs(100 * saving / base.cost_usd):.1f}%) "
                     f"{'cheaper' if saving >= 0 else 'more expensive'}")
    return lines


def render_table(report: SearchReport, sort: str | None = None) -> str:
    """The top plans (exact numbers), the baseline, and how the answer was obtained."""
    rows_shown = table_rows(report, sort)
    arch = bool(rows_shown and "num_layers" in rows_shown[0].plan)
    extra = extra_columns([o.plan for o in (*rows_shown, *([report.baseline] if report.baseline else []))],
                          searched_columns(report))
    head = (f"{'#':>4} {'model (L/h/heads, params)':<28}" if arch else f"{'#':>4}") + \
        f" {'tp x pp x dp':<13} {'gpus':>5} {'mb':<4} {'recompute':<9} {'schedule':<19} flg " + \
        "".join(f"{h:<{w}} " for _, h, w in extra) + \
        f"{'iter s':>8} {'train days':>10} {'cost USD':>12} {'MFU%':>5} {'peak GiB':>8}"
    lines = [head, "-" * len(head)]
    rows = [(str(i + 1), o) for i, o in enumerate(rows_shown)]
    if report.baseline:
        rows.append(("base", report.baseline))
    for tag, o in rows:
        e, p = o.exact, o.plan
        model = (f" {p['num_layers']:>3}/{p['hidden_size']:<6}/{p['num_attention_heads']:<4} "
                 f"{p['parameters'] / 1e9:>8.1f}B   ") if arch else ""
        days = f"{e.time_to_train_s / 86400:10.1f}" if e.time_to_train_s else f"{'-':>10}"
        cost = f"{e.cost_usd:12,.0f}" if e.cost_usd >= 100 else f"{e.cost_usd:12,.4f}"
        more = "".join(f"{p.get(k, '-')!s:<{w}} " for k, _, w in extra)
        lines.append(f"{tag:>4}{model} {_layout(p)} {more}{e.iteration_time_s:8.2f} {days} {cost} "
                     f"{100 * e.mfu:5.1f} {e.peak_memory_bytes / GiB:8.1f}")
    if not report.top:
        lines.append("   no feasible plan found")
    lines.append("")
    per_train = bool(report.top and report.top[0].exact.cost_to_train_usd)
    best_first = {Objective.TIME: "fastest first", Objective.COST: "cheapest first",
                  Objective.PARETO: "non-dominated first, then faster",
                  Objective.LARGEST_MODEL: "largest model first"}[report.objective]
    order = f"sorted by {sort}" if sort else best_first
    lines.append("flags: S sequence parallel, D distributed optimizer, O overlapped grad reduce; "
                 f"cost = {'to train the token budget' if per_train else 'per iteration'}; {order}")
    if any(o.exact.mfu > 1.0 for _, o in rows):  # simulator.report.metrics' convention
        lines.append("MFU% is against the GPU's 16-bit peak, as published FP8 and FP4 runs quote it: a "
                     "plan whose GEMMs run in FP4 can exceed 100%")
    err = report.surrogate.get("error", {})
    strategy = report.surrogate.get("strategy") or {}
    screened = report.surrogate.get("screened") or 0
    how = (f"{report.mode}" + (f" ({strategy['name']})" if strategy else "") + ": "
           + (f"{report.trials} trials, " if report.trials or not strategy else "")
           + (f"{screened:,} plans screened by the surrogate, " if screened else "")
           + f"{report.exact_evaluations} exact evaluations (space of {report.space_size:,} combinations), "
           f"{report.wall_s:.1f} s")
    if report.surrogate.get("stopped_early"):
        how += (f"; stopped early: the best exact answer did not change for {report.surrogate['patience']} "
                f"verification rounds")
    lines.append(how)
    if report.surrogate.get("tolerance"):
        lines.append(f"optimality gap {100 * report.surrogate['tolerance']:g}%: no plan the surrogate did "
                     f"not rule out could beat the answer by more")
    if strategy:
        lines.append(f"strategy {strategy['name']}: {strategy['reason']}")
    lines += list(report.notes)
    if report.surrogate.get("interrupted"):
        lines.append("interrupted: these are the plans simulated so far; resume the study to finish")
    if err.get("verified_points"):
        lines.append(f"surrogate vs exact on {err['verified_points']} verified points: iteration time "
                     f"MAPE {err['time_mape_pct']:.1f}% (max {err['time_max_ape_pct']:.1f}%), "
                     f"peak memory MAPE {err['memory_mape_pct']:.1f}%")
    return "\n".join(lines)


def pareto_figure(report: SearchReport) -> Figure:
    """Exactly evaluated plans in (iteration time, cost); the front, the best and the baseline."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    pts = [o for o in report.evaluated if o.exact.fits_in_memory]
    ax.scatter([o.exact.iteration_time_s for o in pts], [o.exact.cost_usd for o in pts], s=10,
               color="0.7", label=f"exact evaluations ({len(report.evaluated)})")
    front = report.pareto
    ax.plot([o.exact.iteration_time_s for o in front], [o.exact.cost_usd for o in front], "o-",
            color="C0", label="Pareto front")
    if report.best:
        ax.scatter([report.best.exact.iteration_time_s], [report.best.exact.cost_usd], marker="*", s=200,
                   color="C3", zorder=3, label="best")
    if report.baseline:
        ax.scatter([report.baseline.exact.iteration_time_s], [report.baseline.exact.cost_usd],
                   marker="X", s=100, color="k", zorder=3, label="baseline")
    ax.set_xlabel("iteration time (s)")
    ax.set_ylabel("cost (USD)")
    ax.set_title(f"{report.mode}: time versus cost (exact)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
