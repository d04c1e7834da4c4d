"""Atomic file writes: a killed process never leaves a half-written file behind."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from simulator.errors import VTrainError


def write_text_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=False) + "\n")


def read_json_file(path: Path, error: type[VTrainError], missing: str, remedy: str) -> Any:
    """Parse a JSON file our tools wrote; a missing or unreadable file is one `error` line.

    missing: the sentence for an absent file; remedy: what to do when it does not parse.
    """
    if not path.is_file():
        raise error(missing)
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path} is not readable JSON ({exc}); {remedy}") from None
