"""Every output path a command will write, checked before the command does any work.

A search, a calibration or a sample generation can run for minutes; an output path that cannot
be written must fail in the first second, in one line naming the option and the fix, not after
the work (its result lost). What is checked:

- a file output is not an existing folder, and a folder output is not an existing file;
- no part of the path above it is a file (``results.csv/x.csv``);
- the nearest folder that exists above it accepts a new file: a probe file is created and
  removed there (``os.access`` says yes for root on read-only or virtual file systems such as
  ``/proc``, where creating a file still fails);
- a file output's suffix is one the command writes, when the command names its suffixes.

Missing folders in between are fine: the writers create them (`simulator.fileio`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

from simulator.errors import ConfigError


def _existing_ancestor(path: Path) -> Path:
    """The nearest path at or above `path` that exists (a file or a folder)."""
    here = path.absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    return here


def probe_folder(flag: str, shown: str, folder: Path) -> None:
    """A file can be created in `folder` (error naming `flag` otherwise)."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".vtrain-write-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"cannot write {flag} {shown}: no new file can be created in {folder} "
                          f"({reason}); choose a writable path") from None


def _above(flag: str, shown: str, path: Path) -> Path:
    """The existing folder the output will be created under (error if a file is in the way)."""
    ancestor = _existing_ancestor(path.parent if path.parent != path else path)
    if not ancestor.is_dir():
        raise ConfigError(f"cannot write {flag} {shown}: {ancestor} is a file, not a folder; choose "
                          "a path in a folder")
    return ancestor


def check_file_output(flag: str, path: str | Path | None, suffixes: Iterable[str] = (),
                      example: str = "results.csv") -> None:
    """Refuse a file output that cannot be written (see the module docstring); None: not given."""
    if path is None or str(path) == "":
        return
    shown, target = str(path), Path(path)
    if target.is_dir():
        raise ConfigError(f"{flag} {shown} is a directory; give a file name, e.g. {target / example}")
    allowed = tuple(s.lower() for s in suffixes)
    if allowed and target.suffix.lower() not in allowed:
        raise ConfigError(f"{flag} {shown}: give a file ending in {' or '.join(allowed)} "
                          f"(e.g. {Path(example).name})")
    probe_folder(flag, shown, _above(flag, shown, target))


def check_dir_output(flag: str, path: str | Path | None) -> None:
    """Refuse a folder output that cannot be created or written; None: not given."""
    if path is None or str(path) == "":
        return
    shown, target = str(path), Path(path)
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{flag} {shown} is a file; give a folder (created if missing)")
    folder = target if target.is_dir() else _above(flag, shown, target)
    probe_folder(flag, shown, folder)
