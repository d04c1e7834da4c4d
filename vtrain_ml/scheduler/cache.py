"""Persisted throughput curves: one JSON file per (oracle, shape, cluster), written atomically.

The key is a content hash of everything a curve depends on -- the oracle and its settings, the
model's every field and the batch, the hardware description (`hardware_fingerprint`), the node
size, the layout space -- and of the simulator itself (its source files and NCCL tables), so an
edited simulator or hardware file never serves a stale curve. A file holds the levels found so
far, per GPU count (``null`` = does not fit), so a larger cluster only evaluates the new counts
and a killed run resumes from the shapes it finished.
"""

from __future__ import annotations

import hashlib
import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from simulator.fileio import write_json_atomic
from simulator.job.catalog import data_dir, hardware_fingerprint
from vtrain_ml.scheduler.curve import LevelPlan
from vtrain_ml.scheduler.layouts import Cluster, LayoutSpace, Shape

log = logging.getLogger(__name__)

DEFAULT_CACHE = Path("runs") / "schedule_cache"
FORMAT = 1


@lru_cache(maxsize=1)
def simulator_fingerprint() -> str:
    """Hash of the simulator's source and NCCL tables: any change of the physics changes it."""
    import simulator

    digest = hashlib.sha256()
    root = Path(simulator.__file__).resolve().parent
    files = sorted(root.rglob("*.py")) + sorted((data_dir() / "nccl").rglob("*.csv"))
    for path in files:
        digest.update((str(path.relative_to(root)) if path.is_relative_to(root) else path.name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def curve_key(oracle: str, settings: dict[str, Any], shape: Shape, cluster: Cluster,
              space: LayoutSpace) -> str:
    material = {"format": FORMAT, "oracle": oracle, "settings": settings, "shape": shape.key,
                "hardware": hardware_fingerprint(cluster.hardware), "gpus_per_node": cluster.gpus_per_node,
                "space": space.to_dict(), "simulator": simulator_fingerprint()}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:24]


class CurveCache:
    """Per-count levels of curves in a folder (``None`` folder: nothing persisted)."""

    def __init__(self, folder: str | Path | None) -> None:
        self.folder = Path(folder) if folder is not None else None

    def _path(self, key: str) -> Path | None:
        return self.folder / f"{key}.json" if self.folder else None

    def load(self, key: str) -> dict[int, LevelPlan | None]:
        path = self._path(key)
        if path is None or not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text())
            levels = data["levels"].items()
            return {int(n): None if lv is None else LevelPlan.from_dict(lv) for n, lv in levels}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable curve cache %s (%s); it will be recomputed", path, exc)
            return {}

    def save(self, key: str, label: str, levels: dict[int, LevelPlan | None]) -> None:
        path = self._path(key)
        if path is None:
            return
        data = {"format": FORMAT, "label": label,
                "levels": {str(n): None if lv is None else lv.to_dict() for n, lv in sorted(levels.items())}}
        write_json_atomic(path, data)
