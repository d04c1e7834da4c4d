"""Text views of schedule results: the summary, the per-job table, runs side by side."""

from __future__ import annotations

from collections.abc import Sequence

from vtrain_ml.scheduler.result import ScheduleResult

HOUR = 3600.0


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / HOUR:,.2f} h"


def render_summary(result: ScheduleResult) -> str:
    s = result.summary()
    info = result.oracle_info
    oracle = (f"{info.get('exact_simulations', 0):,} exact simulations, {info.get('shapes', 0)} job "
              f"shapes ({info.get('shapes_from_cache', 0)} from cache), {info.get('wall_s', 0.0):.1f} s"
              ) if info else ""
    lines = [
        f"{s['num_jobs']} jobs on {result.num_gpus} x {result.gpu}: {result.policy} policy, "
        f"{result.oracle} oracle, restart cost {result.restart_s:g} s",
        f"  deadline satisfaction ratio  {s['deadline_satisfaction_ratio']:.3f}  "
        f"(met {s['met']}, missed {s['missed']}, rejected {s['rejected']})",
        f"  average / P95 JCT            {_hours(s['average_jct_s'])} / {_hours(s['p95_jct_s'])} "
        f"over {s['completed']} completed jobs",
        f"  makespan                     {_hours(s['makespan_s'])}",
        f"  GPU utilization              {s['gpu_utilization']:.1%}",
        f"  re-allocations (restarts)    {s['restarts']}, {s['decisions']} scheduling decisions",
    ]
    if oracle:
        lines.append(f"  oracle                       {oracle}")
    missed = [j for j in result.jobs if j.outcome.value == "missed"]
    for j in missed[:3]:
        lines.append(f"  missed: {j.name} by {_hours((j.finish_s or 0.0) - j.deadline_s)}: {j.why_missed}")
    if len(missed) > 3:
        lines.append(f"  ... and {len(missed) - 3} more missed (--json gives each one's why_missed)")
    return "\n".join(lines)


def render_jobs(result: ScheduleResult) -> str:
    head = (f"{'row':>4} {'job':<28} {'model':<20} {'arrive':>10} {'deadline':>10} {'finish':>10} "
            f"{'JCT':>10} {'outcome':<8} {'GPUs over time':<24} plan(s)")
    lines = [head, "-" * len(head)]
    for j in result.jobs:
        counts = [a.gpus for a in j.history if a.gpus > 0]
        gpus = "->".join(str(c) for c in counts)
        gpus = gpus if len(gpus) <= 24 else gpus[:21] + "..."
        plans = "; ".join(j.plans[-2:]) + (" ..." if len(j.plans) > 2 else "")
        lines.append(f"{j.row:>4} {j.name[:28]:<28} {j.model[:20]:<20} {_hours(j.arrival_s):>10} "
                     f"{_hours(j.deadline_s):>10} {_hours(j.finish_s):>10} {_hours(j.jct_s):>10} "
                     f"{j.outcome.value:<8} {gpus:<24} {plans}")
    return "\n".join(lines)


def render_comparison(results: Sequence[ScheduleResult]) -> str:
    head = (f"{'policy':<8} {'oracle':<10} {'satisfied':>9} {'avg JCT':>10} {'P95 JCT':>10} "
            f"{'makespan':>10} {'util':>6} {'met':>5} {'missed':>6} {'rejected':>8} {'oracle s':>9}")
    lines = [head, "-" * len(head)]
    for r in results:
        s = r.summary()
        lines.append(f"{r.policy:<8} {r.oracle:<10} {s['deadline_satisfaction_ratio']:>9.3f} "
                     f"{_hours(s['average_jct_s']):>10} {_hours(s['p95_jct_s']):>10} "
                     f"{_hours(s['makespan_s']):>10} {s['gpu_utilization']:>6.1%} {s['met']:>5} "
                     f"{s['missed']:>6} {s['rejected']:>8} {r.oracle_info.get('wall_s', 0.0):>9.1f}")
    return "\n".join(lines)
