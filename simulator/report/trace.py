"""The Chrome/Perfetto trace of one simulated iteration: every task the simulator timed.

One process per pipeline stage (one GPU of it), one thread per kind of work:

- tid 0 `compute`: each micro-batch's forward and backward task (F3, B3; `.cN` for interleaved
  chunks) with its FLOPs, HBM bytes, kernel launches and tensor-parallel traffic in `args`;
- tid 1 `dp-comm`: the data-parallel gradient reduction (the part overlapped with the backward
  pass, when gradients are bucketed, and the exposed part after it), and with
  `overlap_param_gather` the parameter all-gather each chunk's first forward waits for;
- tid 2 `compute parts`: each task split into what the simulator added up for it, in execution
  order -- forward compute, recompute, backward compute, their tensor-parallel collectives, the
  exposed MoE token dispatch/combine and context-parallel K/V exchanges (with their bytes), and
  the host/framework overhead -- with the layer's GEMM shapes (batch, M, N, K) in `args`;
- tid 3 / 4 `pp recv`: point-to-point transfers of activations / gradients from the neighbour
  stage (bytes in `args`), from the producer's end to the arrival;
- tid 5 `step`: the tied-embedding gradient all-reduce and the optimizer step;
- tid 6 `stragglers`: the breakdown's `scale_loss` after each stage's last task: the expected
  wait for the slowest rank (simulator.timeline.stragglers), persistent and transient parts in
  `args`.

The last task of the critical stage ends at the iteration time. Times are microseconds
(Chrome's trace event format, "ph": "X"); pid = stage, tid = stream, as STYLE.md asks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.graph.ops import OpKind
from simulator.graph.params import padded_vocab
from simulator.job.specs import Job
from simulator.memory.states import grad_bytes_per_param, stage_param_counts
from simulator.report.result import SimulationResult
from simulator.timeline.lowering import chunk_totals
from simulator.timeline.param_gather import first_forward_ops
from simulator.timeline.tail import grad_buffer_op, optimizer_op

US = 1e6
THREADS = ("compute", "dp-comm", "compute parts", "pp recv activations", "pp recv gradients", "step",
           "stragglers")
_PART_NAMES = {"forward": "forward compute", "backward": "backward compute", "recompute": "recompute",
               "tp_comm": "tp all-reduce", "recompute_tp_comm": "recompute tp all-reduce",
               "ep_comm": "MoE token dispatch/combine (ep all-to-all)",
               "cp_comm": "context-parallel K/V exchange",
               "fsdp_comm": "FSDP all-gather / reduce-scatter (exposed)",
               "overhead": "host/framework overhead"}


def chrome_trace(result: SimulationResult, job: Job | None = None) -> dict[str, Any]:
    """Chrome trace JSON (opens in ui.perfetto.dev) of every task of the iteration. With the
    `job`, the optimizer and embedding-sync tasks also carry their parameter and byte counts."""
    if result.timeline is None:
        raise ValueError("result has no timeline")
    events = _metadata(len(result.stages))
    events += _pipeline_tasks(result)
    events += _p2p_transfers(result)
    events += _tail_tasks(result, job)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _metadata(stages: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for s in range(stages):
        events.append({"ph": "M", "name": "process_name", "pid": s, "args": {"name": f"stage {s}"}})
        for tid, name in enumerate(THREADS):
            events.append({"ph": "M", "name": "thread_name", "pid": s, "tid": tid, "args": {"name": name}})
    return events


def _gemm_shapes(ops: tuple[Any, ...]) -> str:
    return "; ".join(f"{op.name} {tuple(op.shape)}" for op in ops
                     if op.kind in (OpKind.GEMM, OpKind.BMM, OpKind.FLASH_ATTENTION))


def _pipeline_tasks(result: SimulationResult) -> list[dict[str, Any]]:
    tl, costs, graph = result.timeline, result.costs, result.graph
    assert tl is not None
    plan = tl.plan
    chunked = bool(plan.chunk.max()) if plan.chunk.size else False
    totals = chunk_totals(graph, costs.forward_s.shape) if costs is not None and graph is not None else {}
    shapes = ({"forward": _gemm_shapes(graph.layer.forward), "backward": _gemm_shapes(graph.layer.backward),
               "recompute": _gemm_shapes(graph.layer.recompute)} if graph is not None else {})
    waits = result.param_gather_wait_s
    p, v = len(result.stages), int(plan.chunk.max()) + 1 if plan.chunk.size else 1
    waiting = ({int(op): float(w) for op, w in zip(first_forward_ops(plan, p, v).ravel(),
                                                   waits.ravel(), strict=True) if w > 0}
               if waits is not None else {})
    events: list[dict[str, Any]] = []
    for i in range(plan.stage.size):
        s, c, j, bwd = int(plan.stage[i]), int(plan.chunk[i]), int(plan.microbatch[i]), bool(plan.backward[i])
        kind = "B" if bwd else "F"
        name = f"{kind}{j}" + (f".c{c}" if chunked else "")
        start, duration = float(tl.start[i]), float(tl.duration[i])
        if i in waiting:  # the chunk's first forward waits for its parameters
            wait = waiting[i]
            events.append(_span(s, 1, "dp_comm", "dp parameter all-gather (the first forward "
                                "waits; overlap_param_gather)", start, wait,
                                {"chunk": c, "exposed_s": wait}))
            start, duration = start + wait, duration - wait
        args: dict[str, Any] = {"micro_batch": j, "chunk": c}
        directions = ("recompute", "backward") if bwd else ("forward",)
        for key in ("flops", "hbm_bytes", "kernels", "tp_comm_bytes", "tp_comm_calls"):
            if totals:
                args[key] = float(sum(totals[f"{d}_{key}"][s, c] for d in directions))
        events.append({"ph": "X", "pid": s, "tid": 0, "cat": kind, "name": name,
                       "ts": start * US, "dur": duration * US, "args": args})
        parts = None if costs is None else (costs.backward_parts if bwd else costs.forward_parts)
        for part, grid in (parts or {}).items():
            seconds = float(grid[s, c])
            if seconds <= 0:
                continue
            events.append({"ph": "X", "pid": s, "tid": 2, "cat": part, "name": _PART_NAMES.get(part, part),
                           "ts": start * US, "dur": seconds * US,
                           "args": _part_args(part, bwd, totals, shapes, (s, c, j))})
            start += seconds
    return events


def _part_args(part: str, backward: bool, totals: dict[str, np.ndarray], shapes: dict[str, str],
               where: tuple[int, int, int]) -> dict[str, Any]:
    s, c, j = where
    args: dict[str, Any] = {"micro_batch": j}
    if not totals:
        return args
    if part in ("forward", "backward", "recompute"):
        args.update({"flops": float(totals[f"{part}_flops"][s, c]),
                     "hbm_bytes": float(totals[f"{part}_hbm_bytes"][s, c]),
                     "kernels": int(totals[f"{part}_kernels"][s, c]),
                     "layer_gemms (batch, M, N, K)": shapes.get(part, "")})
    elif part.endswith("tp_comm"):
        direction = ("recompute" if part.startswith("recompute") else
                     "backward" if backward else "forward")
        calls = float(totals[f"{direction}_tp_comm_calls"][s, c])
        args.update({"calls": int(calls), "bytes_per_gpu": float(totals[f"{direction}_tp_comm_bytes"][s, c])})
    elif part in ("ep_comm", "cp_comm", "fsdp_comm"):  # the exposed part of their time
        group = {"fsdp_comm": "dp"}.get(part, part.removesuffix("_comm"))
        directions = ("recompute", "backward") if backward else ("forward",)
        args["bytes_per_gpu"] = float(sum(totals[f"{d}_{group}_comm_bytes"][s, c]
                                          for d in directions if f"{d}_{group}_comm_bytes" in totals))
    return args


def _p2p_transfers(result: SimulationResult) -> list[dict[str, Any]]:
    tl = result.timeline
    assert tl is not None
    plan = tl.plan
    delays = np.asarray(result.p2p_s) if result.p2p_s else np.zeros(0)
    if delays.size == 0 or not delays.any():
        return []
    nbytes = float(result.graph.p2p_bytes) if result.graph is not None else None
    events: list[dict[str, Any]] = []
    for i in np.flatnonzero((plan.edge >= 0) & (plan.dep < plan.stage.size)):
        dur = float(delays[plan.edge[i]])
        if dur <= 0:
            continue
        bwd = bool(plan.backward[i])
        dep = int(plan.dep[i])
        args: dict[str, Any] = {"micro_batch": int(plan.microbatch[i]), "from_stage": int(plan.stage[dep])}
        if nbytes is not None:
            args["bytes"] = nbytes
        events.append({"ph": "X", "pid": int(plan.stage[i]), "tid": 4 if bwd else 3, "cat": "pp_comm",
                       "name": "recv gradient" if bwd else "recv activation",
                       "ts": float(tl.end[dep]) * US, "dur": dur * US, "args": args})
    return events


def _tail_tasks(result: SimulationResult, job: Job | None) -> list[dict[str, Any]]:
    """dp reduction, embedding sync and optimizer step after each stage's pipeline work, in the
    order the simulator adds them (simulator.timeline.tail); the optimizer ends the stage."""
    tl, tail = result.timeline, result.tail
    assert tl is not None
    p = len(result.stages)
    dp_total = np.asarray(result.dp_comm_s) if result.dp_comm_s else np.zeros(p)
    exposed = tail.dp_exposed_s if tail is not None else dp_total
    embedding = tail.embedding_sync_s if tail is not None else np.zeros(p)
    optimizer = tail.optimizer_s if tail is not None else np.zeros(p)
    sharding = result.job.get("data_parallel_sharding") or (
        "optim" if result.job.get("distributed_optimizer") else "no_shard")
    dp_name = {"no_shard": "dp gradient all-reduce",
               "optim": "dp reduce-scatter + all-gather (ZeRO-1)",
               "optim_grads": "dp reduce-scatter of non-FSDP-unit gradients + all-gather (ZeRO-2)",
               "optim_grads_params": "dp reduce-scatter + all-gather of non-FSDP-unit "
                                     "parameters (ZeRO-3)"}.get(sharding, "dp gradient reduction")
    params = stage_param_counts(job) if job is not None else None
    events: list[dict[str, Any]] = []
    for s in range(p):
        t = float(tl.stage_end[s])
        grads = result.stages[s].memory.to_dict().get("gradients_bytes")
        dp_args: dict[str, Any] = {"bytes_per_gpu": grads, "dp": result.job.get("dp")}
        dp_args.update((k, result.job[k]) for k in ("grad_bucket_mb", "bucketed_chunks")
                       if k in result.job)
        hidden = float(dp_total[s] - exposed[s])
        if hidden > 0:
            events.append(_span(s, 1, "dp_comm", f"{dp_name} (bucketed, overlapped with backward)",
                                t - hidden, hidden, {**dp_args, "placement": "approximate: buckets "
                                                     "overlap the last backward"}))
        for tid, cat, name, seconds, args in (
            (1, "dp_comm", dp_name, float(exposed[s]), dp_args),
            (5, "embedding_sync", "embedding gradient all-reduce (first and last stage)",
             float(embedding[s]), _embedding_args(job)),
            (5, "optimizer", "optimizer step (Adam)", float(optimizer[s]), _optimizer_args(job, params, s)),
        ):
            if seconds > 0:
                events.append(_span(s, tid, cat, name, t, seconds, args))
                t += seconds
        loss = result.scale_loss
        if loss is not None and loss.total_s > 0:
            events.append(_span(s, 6, "scale_loss", "scale loss (waiting for the slowest rank)", t,
                                loss.total_s, loss.to_dict()))
    return events


def _span(pid: int, tid: int, cat: str, name: str, start_s: float, dur_s: float,
          args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "pid": pid, "tid": tid, "cat": cat, "name": name, "ts": start_s * US,
            "dur": dur_s * US, "args": args}


def _embedding_args(job: Job | None) -> dict[str, Any]:
    if job is None:
        return {}
    m, tp = job.model, job.parallel.tp
    grad = grad_bytes_per_param(job.training.precision)
    return {"bytes_per_gpu": padded_vocab(m, tp) * m.hidden_size / tp * grad}


def _optimizer_args(job: Job | None, params: np.ndarray | None, s: int) -> dict[str, Any]:
    if job is None or params is None:
        return {}
    shard = job.dp if job.shards_optimizer else 1
    op = optimizer_op(float(params[s]) / shard, job)
    args = {"parameters": int(op.shape[0]), "flops": op.flops, "hbm_bytes": op.bytes}
    passes = grad_buffer_op(float(params[s]), job)
    if passes is not None:  # the span's time includes them (simulator.timeline.tail)
        args["grad_buffer_passes_hbm_bytes"] = passes.bytes
    return args
