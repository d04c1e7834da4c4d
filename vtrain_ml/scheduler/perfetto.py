"""The schedule as a Chrome/Perfetto trace: one track (thread) per job, one slice per allocation.

Trace Event Format (the JSON Perfetto and chrome://tracing open): ``"ph": "X"`` complete events
in microseconds, ``"M"`` metadata naming the tracks, ``"i"`` instant events for deadlines and
rejections, and a ``"C"`` counter track of the GPUs allocated in the cluster.
"""

from __future__ import annotations

import itertools
from typing import Any

from vtrain_ml.scheduler.plots import allocation_grid
from vtrain_ml.scheduler.result import Outcome, ScheduleResult

US = 1e6
PID = 0


def schedule_trace(result: ScheduleResult) -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PID,
         "args": {"name": f"{result.num_gpus} x {result.gpu}: {result.policy} policy, "
                          f"{result.oracle} oracle"}}]
    for tid, job in enumerate(result.jobs, start=1):
        events.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid,
                       "args": {"name": f"{job.name} ({job.outcome.value})"}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": tid,
                       "args": {"sort_index": tid}})
        for a, b in itertools.pairwise(job.history):
            if a.gpus > 0 and b.time_s > a.time_s:
                events.append({"ph": "X", "pid": PID, "tid": tid, "cat": "allocation",
                               "name": f"{a.gpus} GPUs", "ts": a.time_s * US,
                               "dur": (b.time_s - a.time_s) * US,
                               "args": {"gpus": a.gpus, "plan": a.plan}})
        mark = "rejected" if job.outcome is Outcome.REJECTED else "deadline"
        when = job.arrival_s if job.outcome is Outcome.REJECTED else job.deadline_s
        events.append({"ph": "i", "pid": PID, "tid": tid, "s": "t", "name": mark, "ts": when * US})
    times, grid = allocation_grid(result)
    for t, used in zip(times, grid.sum(axis=0), strict=True):
        events.append({"ph": "C", "pid": PID, "name": "GPUs allocated", "ts": float(t) * US,
                       "args": {"gpus": float(used)}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
