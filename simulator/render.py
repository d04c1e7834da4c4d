"""Views of a `SimulationResult`: human table, JSON-ready dict, Chrome/Perfetto trace."""

from __future__ import annotations

from typing import Any

from simulator.result import BREAKDOWN_KEYS, SimulationResult

GiB = 1024**3


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    return f"{seconds * 1e3:.3f} ms"


def table(result: SimulationResult) -> str:
    """A readable multi-line report with units."""
    j, it = result.job, result.iteration_time_s
    lines = [
        f"{j['model']} ({j['parameters'] / 1e9:.1f}B params) on {j['num_gpus']} x {j['gpu']}",
        f"  layout: tp={j['tp']} pp={j['pp']} dp={j['dp']} v={j['virtual_stages']} "
        f"{j['schedule']}, micro-batch {j['micro_batch_size']} x {result.num_microbatches}, "
        f"global batch {j['global_batch_size']}, seq {j['seq_length']}, {j['precision']}, "
        f"recompute {j['recompute']}",
        "",
        f"  iteration time      {_duration(it)}",
        f"  throughput          {result.tokens_per_s:,.0f} tokens/s",
        f"  MFU / HFU           {result.mfu:.1%} / {result.hfu:.1%}",
        f"  cost per iteration  ${result.cost_per_iteration_usd:,.2f}",
    ]
    if result.time_to_train_s is not None and result.cost_to_train_usd is not None:
        lines.append(f"  time to train       {_duration(result.time_to_train_s)} for "
                     f"{result.train_tokens:.3g} tokens, ${result.cost_to_train_usd:,.0f}")
    lines += ["", f"  breakdown (critical stage {result.critical_stage}):"]
    for key in BREAKDOWN_KEYS:
        value = result.breakdown[key]
        lines.append(f"    {key:<18}{_duration(value):>14}  {value / it:6.1%}")
    fits = "fits" if result.fits_in_memory else (
        f"DOES NOT FIT: over by {result.memory_overflow_bytes / GiB:.1f} GiB")
    lines += ["", f"  peak memory         {result.peak_memory_bytes / GiB:.1f} GiB of "
              f"{result.memory_capacity_bytes / GiB:.0f} GiB ({fits})",
              "    stage  params  grads  optim  activ   total  busy      idle"]
    shown = result.stages if len(result.stages) <= 8 else (*result.stages[:4], *result.stages[-4:])
    for s in shown:
        m = s.memory
        lines.append(
            f"    {s.stage:>5} {m.parameters_bytes / GiB:7.1f}{m.gradients_bytes / GiB:7.1f}"
            f"{m.optimizer_states_bytes / GiB:7.1f}{m.activations_bytes / GiB:7.1f}"
            f"{m.total_bytes / GiB:8.1f}  {_duration(s.busy_s):>9} {_duration(s.idle_s):>9}")
    if any(v > 0 for k, v in result.profile_coverage.items() if k != "analytic"):
        cov = ", ".join(f"{k} {v:.0%}" for k, v in result.profile_coverage.items())
        lines += ["", f"  profile coverage    {cov}"]
    return "\n".join(lines)


def chrome_trace(result: SimulationResult) -> dict[str, Any]:
    """Chrome trace JSON (opens in Perfetto): pid = pipeline stage, tid = stream, times in us."""
    tl = result.timeline
    if tl is None:
        raise ValueError("result has no timeline")
    plan = tl.plan
    events: list[dict[str, Any]] = []
    for s in range(len(result.stages)):
        events.append({"ph": "M", "name": "process_name", "pid": s, "args": {"name": f"stage {s}"}})
        events.append({"ph": "M", "name": "thread_name", "pid": s, "tid": 0, "args": {"name": "compute"}})
        events.append({"ph": "M", "name": "thread_name", "pid": s, "tid": 1, "args": {"name": "dp-comm"}})
    chunked = bool(plan.chunk.max())
    for i in range(plan.stage.size):
        kind = "B" if plan.backward[i] else "F"
        name = f"{kind}{int(plan.microbatch[i])}" + (f".c{int(plan.chunk[i])}" if chunked else "")
        events.append({
            "ph": "X", "pid": int(plan.stage[i]), "tid": 0, "cat": kind, "name": name,
            "ts": float(tl.start[i]) * 1e6, "dur": float(tl.duration[i]) * 1e6,
        })
    for s, stage_end in enumerate(tl.stage_end):
        dp = result.dp_comm_s[s] if result.dp_comm_s else 0.0
        if dp > 0:
            events.append({"ph": "X", "pid": s, "tid": 1, "cat": "dp", "name": "dp grad reduce",
                           "ts": float(stage_end) * 1e6, "dur": dp * 1e6})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
