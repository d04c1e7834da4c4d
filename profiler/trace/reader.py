"""A streaming reader of Chrome / Kineto trace files (``.json`` or ``.json.gz``).

Traces of real training iterations reach hundreds of MB, so the file is never parsed whole: the
top-level object is scanned key by key from a chunked text stream, small values (device
properties, base time) are decoded as they come, and the ``traceEvents`` array is yielded one
event at a time (`json.JSONDecoder.raw_decode` on a sliding buffer, C speed). Memory is one
chunk plus the events the caller keeps. The format is the Trace Event Format
(https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU) as written by
Kineto's ChromeTraceLogger (pytorch/kineto, libkineto/src/output_json.cpp).
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from simulator.errors import DataError

CHUNK_CHARS = 1 << 20
MAX_EVENT_CHARS = 64 << 20  # one event larger than this is a corrupt file, not a big trace
EVENTS_KEY = "traceEvents"
_SPACE = re.compile(r"[\s,]*")
_DECODER = json.JSONDecoder()


class TraceFormatError(DataError):
    """A trace file that is not a Chrome trace JSON object."""


def open_text(path: Path) -> TextIO:
    """The file as text, gunzipped when it starts with the gzip magic bytes."""
    with path.open("rb") as handle:
        magic = handle.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return path.open(encoding="utf-8")


class _Scanner:
    """A window over a text stream: decode JSON values at the cursor, refilling as needed."""

    def __init__(self, stream: TextIO, path: Path) -> None:
        self.stream, self.path = stream, path
        self.buf, self.pos, self.eof = "", 0, False

    def _fill(self) -> bool:
        if self.eof:
            return False
        try:
            chunk = self.stream.read(CHUNK_CHARS)
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise TraceFormatError(f"{self.path}: cannot read the trace ({exc}); is the file "
                                   f"complete? re-export it from torch.profiler") from None
        if not chunk:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0
        return True

    def skip(self) -> str:
        """Skip whitespace and commas; the next character ('' at the end of the file)."""
        while True:
            self.pos = _SPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def expect(self, char: str, what: str) -> None:
        if self.skip() != char:
            found = self.buf[self.pos:self.pos + 20] or "the end of the file"
            raise TraceFormatError(f"{self.path}: expected {what} ('{char}'), found {found!r}; "
                                   f"not a Chrome trace (torch.profiler export_chrome_trace)")
        self.pos += 1

    def value(self) -> Any:
        """Decode one JSON value at the cursor (reading more of the file until it is whole)."""
        self.skip()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if len(self.buf) - self.pos < MAX_EVENT_CHARS and self._fill():
                    continue
                raise TraceFormatError(f"{self.path}: malformed JSON near character "
                                       f"{exc.pos} of the last chunk ({exc.msg}); the trace is "
                                       f"truncated or corrupt: re-export it") from None
            # a number or literal cut at the chunk end decodes short: make sure it was whole
            if end == len(self.buf) and not self.eof and self._fill():
                continue
            self.pos = end
            return value


def iter_trace(path: str | Path) -> Iterator[tuple[str, Any]]:
    """Yield ``("meta", (key, value))`` for top-level keys and ``("event", dict)`` per event."""
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(f"trace file {path} does not exist; give the .json or .json.gz "
                               f"that torch.profiler wrote")
    with open_text(path) as stream:
        scan = _Scanner(stream, path)
        first = scan.skip()
        if first == "[":  # the bare-array form of the format: a list of events
            scan.pos += 1
            yield from _events(scan)
            return
        scan.expect("{", "a JSON object")
        while scan.skip() not in ("}", ""):
            key = scan.value()
            scan.expect(":", f"':' after key {key!r}")
            if key == EVENTS_KEY:
                scan.expect("[", f"a list of events under {EVENTS_KEY!r}")
                yield from _events(scan)
            else:
                yield "meta", (key, scan.value())
        scan.expect("}", "the end of the trace object")


def _events(scan: _Scanner) -> Iterator[tuple[str, Any]]:
    while True:
        char = scan.skip()
        if char == "]":
            scan.pos += 1
            return
        if char == "":
            raise TraceFormatError(f"{scan.path}: the event list is not closed; the trace is "
                                   f"truncated (was the profiler stopped before export finished?)")
        event = scan.value()
        if isinstance(event, dict):
            yield "event", event
