"""The device to profile on: validation, and the metadata a profile records about it."""

from __future__ import annotations

import datetime
import platform
import socket
import subprocess
from typing import Any

from simulator.costs.profile_format import DeviceInfo
from simulator.errors import ConfigError

DEVICES = ("cuda", "cpu")

# Substrings of torch.cuda.get_device_name -> catalog id (data/hardware); first match wins.
CATALOG_BY_NAME: tuple[tuple[tuple[str, ...], str], ...] = (
    (("H200",), "h200-141gb"),
    (("H100",), "h100-sxm-80gb"),
    (("A100", "80GB"), "a100-80gb"),
    (("A100",), "a100-40gb"),
    (("V100",), "v100-32gb"),
)


def resolve_device(name: str) -> Any:
    """`torch.device` for 'cuda' or 'cpu', with one clear error for the unknown or unavailable."""
    import torch

    if name not in DEVICES:
        raise ConfigError(f"--device={name!r} is not a device this profiler knows; use one of "
                          f"{', '.join(DEVICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device=cuda but PyTorch sees no CUDA GPU here (torch "
                          f"{torch.__version__}); run on a GPU machine or use --device cpu")
    return torch.device(name)


def catalog_hardware(device_name: str) -> str | None:
    """The data/hardware id of a GPU by its CUDA name (None when the catalog has no match)."""
    upper = device_name.upper()
    for needles, hw in CATALOG_BY_NAME:
        if all(n in upper for n in needles):
            return hw
    return None


def _driver() -> str:  # pragma: no cover - GPU only
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""


def device_info(device: Any) -> DeviceInfo:
    import torch

    host = socket.gethostname()
    if device.type == "cuda":  # pragma: no cover - GPU only
        props = torch.cuda.get_device_properties(device)
        return DeviceInfo(kind="cuda", name=props.name, memory_bytes=float(props.total_memory),
                          driver=_driver(), cuda=str(torch.version.cuda), torch=torch.__version__,
                          host=host)
    name = platform.processor() or platform.machine()
    return DeviceInfo(kind="cpu", name=f"cpu {name} x{torch.get_num_threads()} threads",
                      torch=torch.__version__, host=host)


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
