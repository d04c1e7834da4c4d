"""Views of a `SimulationResult`: the human table, money and durations with units, the Chrome/
Perfetto trace (`simulator.report.trace`). JSON is `SimulationResult.to_dict()`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from simulator.memory.stages import StageMemory
from simulator.report.result import BREAKDOWN_KEYS, SimulationResult, StageReport
from simulator.report.trace import chrome_trace

GiB = 1024**3
MAX_STAGE_ROWS = 8  # longer pipelines show the first and last stages and the peak one

__all__ = ["chrome_trace", "duration", "fit_verdict", "memory_table", "table", "usd"]


def duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    return f"{seconds * 1e3:.3f} ms"


def usd(amount: float) -> str:
    """Dollars with cents, or three significant digits below ten cents (a small job's iteration
    costs fractions of a cent: "$0.00123", not "$0.00")."""
    if amount >= 1000:
        return f"${amount:,.0f}"
    if amount >= 0.1 or amount == 0:
        return f"${amount:,.2f}"
    digits = max(2, 2 - math.floor(math.log10(abs(amount))))
    return f"${amount:.{digits}f}"


def fit_verdict(result: SimulationResult) -> str | None:
    """One line when the job does not fit in GPU memory: where, by how much; None when it fits."""
    if result.fits_in_memory:
        return None
    peak = max(result.stages, key=lambda s: s.memory.total_bytes)
    over = result.memory_overflow_bytes
    needed = result.memory_required_bytes or result.peak_memory_bytes
    why = ("the allocated peak alone is over" if result.memory_decided_by == "allocated" else
           f"the allocated peak and context ({result.peak_memory_bytes / GiB:.1f} GiB) would fit: "
           "the allocator's reservation decides")
    return (f"DOES NOT FIT in GPU memory: stage {peak.stage} needs {needed / GiB:.1f} "
            f"GiB of {result.memory_capacity_bytes / GiB:.0f} GiB, over by {over / GiB:.1f} GiB "
            f"(+{over / result.memory_capacity_bytes:.0%}): {why}")


def table(result: SimulationResult, notes: Sequence[str] = (), advice: Sequence[str] = ()) -> str:
    """A readable multi-line report with units. `notes` (what the loader decided, e.g. vTrain's
    derived values) and, for a job that does not fit, its verdict and `advice` come first."""
    j, it = result.job, result.iteration_time_s
    lines = [f"note: {n}" for n in notes]
    verdict = fit_verdict(result)
    if verdict:
        lines += [verdict, *(f"  {a}" for a in advice)]
    if lines:
        lines.append("")
    lines += [
        f"{j['model']} ({j['parameters'] / 1e9:.1f}B params) on {j['num_gpus']} x {j['gpu']}",
        f"  layout: tp={j['tp']} pp={j['pp']} dp={j['dp']} v={j['virtual_stages']} "
        + "".join(f"{k}={j[k]} " for k in ("cp", "cp_comm_type", "ep", "expert_tp") if k in j)
        + f"{j['schedule']}{_groups(j)}, micro-batch {j['micro_batch_size']} x {result.num_microbatches}, "
        f"global batch {j['global_batch_size']}, seq {j['seq_length']}, {_precision(j)}, "
        f"recompute {j['recompute']}{_modern(j)}",
        "",
        f"  iteration time      {duration(it)}",
        f"  throughput          {result.tokens_per_s:,.0f} tokens/s",
        f"  MFU / HFU           {result.mfu:.1%} / {result.hfu:.1%}"
        + (" (against the 16-bit peak, as published FP8 / FP4 runs quote it)" if result.hfu > 1.0 else ""),
        f"  cost per iteration  {usd(result.cost_per_iteration_usd)} "
        f"({usd(result.usd_per_million_tokens)} per million tokens)",
    ]
    if result.time_to_train_s is not None and result.cost_to_train_usd is not None:
        lines.append(f"  time to train       {duration(result.time_to_train_s)} for "
                     f"{result.train_tokens:.3g} tokens, {usd(result.cost_to_train_usd)}")
    lines += ["", f"  breakdown (critical stage {result.critical_stage}):"]
    extra = [k for k in result.breakdown if k not in BREAKDOWN_KEYS]  # ep_comm, cp_comm
    for key in (*BREAKDOWN_KEYS, *extra):
        value = result.breakdown.get(key, 0.0)
        if key == "fsdp_comm" and not value:
            continue  # only FSDP (ZeRO-2/3) jobs have it
        lines.append(f"    {key:<18}{duration(value):>14}  {value / it:6.1%}{_terms(result, key)}")
    fits = "fits" if result.fits_in_memory else (
        f"DOES NOT FIT: over by {result.memory_overflow_bytes / GiB:.1f} GiB")
    lines += ["", f"  peak memory         {result.peak_memory_bytes / GiB:.1f} GiB of "
              f"{result.memory_capacity_bytes / GiB:.0f} GiB ({fits}; with the allocator's least "
              f"reservation {result.memory_required_bytes / GiB:.1f} GiB)", *memory_table(result)]
    if any(v > 0 for k, v in result.profile_coverage.items() if k != "analytic"):
        cov = ", ".join(f"{k} {v:.0%}" for k, v in result.profile_coverage.items())
        lines += ["", f"  profile coverage    {cov}"]
    return "\n".join(lines)


def _terms(result: SimulationResult, key: str) -> str:
    """What a breakdown entry is made of, where its name does not say: `scale_loss`'s two
    terms (simulator.timeline.stragglers)."""
    loss = result.scale_loss
    if key != "scale_loss" or loss is None or not loss.total_s:
        return ""
    return (f"  (waiting for the slowest of {loss.ranks:,} ranks: GPU speed {duration(loss.persistent_s)}, "
            f"kernel jitter {duration(loss.transient_s)})")


def _groups(j: dict[str, Any]) -> str:
    """The interleaved schedule's micro-batch groups where a job sets them (default: pp)."""
    group = j.get("microbatch_group_size_per_vp_stage")
    return f" (groups of {group} micro-batches)" if group else ""


def _precision(j: dict[str, Any]) -> str:
    """`bf16`, or `fp8 (mxfp8)` with the recipe of a low-precision run."""
    recipe = j.get("low_precision_recipe")
    return f"{j['precision']} ({recipe})" if recipe else str(j["precision"])


def _modern(j: dict[str, Any]) -> str:
    """The summary's FSDP, CUDA graph, overlap and fused-loss entries, when the job has them."""
    parts = [f"sharding {j['data_parallel_sharding']}" if "data_parallel_sharding" in j else "",
             f"cuda graphs {j['cuda_graphs']}" if "cuda_graphs" in j else "",
             "tp comm overlap" if j.get("tp_comm_overlap") else "",
             "fp8 param gather" if j.get("fp8_param_gather") else "",
             "param gather overlapped with the next forward" if j.get("overlap_param_gather") else "",
             f"{j['cross_entropy_fusion']} fused cross-entropy" if "cross_entropy_fusion" in j else ""]
    shown = ", ".join(p for p in parts if p)
    return f", {shown}" if shown else ""


def _memory_columns(stages: list[StageReport]) -> list[str]:
    """The memory terms of `StageMemory` (its `*_bytes` fields, in order: a new term appears
    without an edit here) that any shown stage holds; they sum to a stage's total (the
    allocated peak plus the CUDA context). Derived figures (allocated, reserved) are not terms."""
    terms = [f.name for f in fields(StageMemory) if f.name.endswith("_bytes")]
    return [t for t in terms if any(getattr(s.memory, t) for s in stages)]


def _shown_stages(result: SimulationResult) -> list[StageReport]:
    stages = list(result.stages)
    if len(stages) <= MAX_STAGE_ROWS:
        return stages
    half = MAX_STAGE_ROWS // 2
    peak = max(stages, key=lambda s: s.memory.total_bytes)
    keep = {s.stage for s in stages[:half] + stages[-half:]} | {peak.stage}
    return [s for s in stages if s.stage in keep]


def memory_table(result: SimulationResult) -> list[str]:
    """Per-stage memory (GiB per GPU) by term, their total, what the caching allocator reserves
    beside it (`torch.cuda.max_memory_reserved`; not part of the total: PyTorch frees its cache
    and retries before it runs out of memory), and each stage's busy and idle time; stages left
    out of a long pipeline are marked, with the largest one always shown."""
    if not result.stages:
        return []
    shown = _shown_stages(result)
    columns = _memory_columns(shown)
    labels = [c.removesuffix("_bytes") for c in columns] + ["total", "reserved"]
    widths = [max(len(label), 6) + 2 for label in labels]
    header = "    stage" + "".join(f"{lab:>{w}}" for lab, w in zip(labels, widths, strict=True))
    lines = [header + "       busy       idle"]
    previous = -1
    peak_stage = max(result.stages, key=lambda s: s.memory.total_bytes).stage
    for s in shown:
        if s.stage > previous + 1:
            lines.append(f"    ... stages {previous + 1}-{s.stage - 1} not shown "
                         f"({s.stage - previous - 1} stages)")
        cells = [getattr(s.memory, c) / GiB for c in columns] + [
            s.memory.total_bytes / GiB, s.memory.allocator_reserved_bytes / GiB]
        mark = " <- peak" if s.stage == peak_stage and len(result.stages) > 1 else ""
        lines.append(f"    {s.stage:>5}" + "".join(f"{v:>{w}.1f}" for v, w in zip(cells, widths, strict=True))
                     + f" {duration(s.busy_s):>10} {duration(s.idle_s):>10}{mark}")
        previous = s.stage
    if previous < len(result.stages) - 1:
        lines.append(f"    ... stages {previous + 1}-{len(result.stages) - 1} not shown")
    return lines
