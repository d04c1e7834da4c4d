"""The one result of a search (or an exhaustive enumeration) and its renderings.

`SearchReport` holds exact evaluations only -- the surrogate's numbers appear solely as the
`predicted` side of the verified points, to report its error. `to_dict` is the `--json` output;
`render_table` and `pareto_figure` are views of the same object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.params import total_params
from simulator.specs import GiB, Job
from vtrain_ml.planner.config import Objective, SearchConfig
from vtrain_ml.planner.evaluation import Evaluation
from vtrain_ml.planner.objective import constraint_values
from vtrain_ml.planner.verify import rank

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
    return plan | {
        "tp": p.tp, "pp": p.pp, "dp": job.dp, "num_gpus": job.cluster.num_gpus,
        "micro_batch_size": t.micro_batch_size, "recompute": t.recompute.value,
        "schedule": p.schedule.value, "virtual_stages": p.virtual_stages,
        "sequence_parallel": p.sequence_parallel, "distributed_optimizer": p.distributed_optimizer,
        "overlap_grad_reduce": p.overlap_grad_reduce, "flash_attention": t.flash_attention,
    }


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
            "cost_per_iteration_usd": e.cost_per_iteration_usd, "time_to_train_s": e.time_to_train_s,
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
            "pruned_values": self.pruned_values,
        }


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


def render_table(report: SearchReport) -> str:
    """The top plans (exact numbers), the baseline, and how the answer was obtained."""
    arch = bool(report.top and "num_layers" in report.top[0].plan)
    head = (f"{'#':>4} {'model (L/h/heads, params)':<28}" if arch else f"{'#':>4}") + \
        f" {'tp x pp x dp':<13} {'gpus':>5} {'mb':<4} {'recompute':<9} {'schedule':<19} flg " \
        f"{'iter s':>8} {'train days':>10} {'cost USD':>12} {'MFU%':>5} {'peak GiB':>8}"
    lines = [head, "-" * len(head)]
    rows = [(str(i + 1), o) for i, o in enumerate(report.top)]
    if report.baseline:
        rows.append(("base", report.baseline))
    for tag, o in rows:
        e, p = o.exact, o.plan
        model = (f" {p['num_layers']:>3}/{p['hidden_size']:<6}/{p['num_attention_heads']:<4} "
                 f"{p['parameters'] / 1e9:>8.1f}B   ") if arch else ""
        days = f"{e.time_to_train_s / 86400:10.1f}" if e.time_to_train_s else f"{'-':>10}"
        lines.append(f"{tag:>4}{model} {_layout(p)} {e.iteration_time_s:8.2f} {days} {e.cost_usd:12,.0f} "
                     f"{100 * e.mfu:5.1f} {e.peak_memory_bytes / GiB:8.1f}")
    if not report.top:
        lines.append("   no feasible plan found")
    lines.append("")
    per_train = bool(report.top and report.top[0].exact.cost_to_train_usd)
    lines.append("flags: S sequence parallel, D distributed optimizer, O overlapped grad reduce; "
                 f"cost = {'to train the token budget' if per_train else 'per iteration'}")
    err = report.surrogate.get("error", {})
    how = (f"{report.mode}: {report.trials} trials, {report.exact_evaluations} exact evaluations "
           f"(space of {report.space_size:,} combinations), {report.wall_s:.1f} s")
    lines.append(how)
    if err.get("verified_points"):
        lines.append(f"surrogate vs exact on {err['verified_points']} verified points: iteration time "
                     f"MAPE {err['time_mape_pct']:.1f}% (max {err['time_max_ape_pct']:.1f}%), "
                     f"peak memory MAPE {err['memory_mape_pct']:.1f}%")
    if report.best and report.baseline:
        b, x = report.baseline.exact, report.best.exact
        lines.append(f"best vs baseline: {b.iteration_time_s / x.iteration_time_s:.2f}x faster, "
                     f"{100 * (1 - x.cost_usd / b.cost_usd):+.1f}% cost saving")
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
