"""The streaming trace reader: whole events across chunk boundaries, both file forms, and one
clear error for files that are not traces."""

from __future__ import annotations

import gzip
import json

import pytest

from profiler.trace import reader
from profiler.trace.events import read_trace
from profiler.trace.reader import TraceFormatError, iter_trace


def _events(n: int) -> list[dict]:
    return [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1,
             "ts": 10.0 * i, "dur": 1.5, "args": {"Sequence number": i, "Input Dims": [[i, 3]]}}
            for i in range(n)]


def test_events_are_streamed_whole_across_chunk_boundaries(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "CHUNK_CHARS", 37)  # far smaller than one event
    data = {"schemaVersion": 1, "deviceProperties": [{"name": "GPU X"}], "traceEvents": _events(50),
            "traceName": "after the events"}
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data, indent=2).encode()))
    items = list(iter_trace(path))
    events = [v for k, v in items if k == "event"]
    meta = dict(v for k, v in items if k == "meta")
    assert events == data["traceEvents"]
    assert meta["traceName"] == "after the events" and meta["deviceProperties"][0]["name"] == "GPU X"


def test_a_bare_event_array_is_a_trace_too(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_events(3)))
    assert len([1 for k, _ in iter_trace(path) if k == "event"]) == 3


@pytest.mark.parametrize("text, words", [
    ('{"traceEvents": [{"ph": "X", "name": "a"', "truncated"),
    ("hello", "not a Chrome trace"),
    ('{"traceEvents": [{"ph": "X", "name": }]}', "malformed"),
])
def test_broken_files_get_one_clear_error(tmp_path, text, words):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=words):
        list(iter_trace(path))


def test_a_trace_without_cpu_operators_is_refused(tmp_path):
    path = tmp_path / "gpu_only.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1,
                                                 "dur": 1, "args": {"correlation": 1}}]}))
    with pytest.raises(TraceFormatError, match=r"ProfilerActivity\.CPU"):
        read_trace(path)
