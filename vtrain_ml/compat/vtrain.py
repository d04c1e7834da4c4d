"""vTrain's Python API as a drop-in (github.com/VIA-Research/vTrain, `src/config.py`,
`src/predictor.py`, `example.py`), answered by vtrain-ml's simulator.

A vTrain script changes two import lines and keeps the rest::

    from vtrain_ml.compat.vtrain import vTrain        # was: from src.predictor import vTrain
    from vtrain_ml.compat.vtrain import vTrainConfig  # was: from src.config import vTrainConfig

    config = vTrainConfig.load_from_file("config.json")
    sim = vTrain(config)
    result, breakdown = sim()
    pred_iter_time = max(result.values()) / 1000 / 1000  # ms, as vTrain's example.py prints

`python -m vtrain_ml.compat.vtrain -c config.json` logs the predicted iteration time as vTrain's
`example.py` does.

The shapes are vTrain's (`vTrain.predict`, Algorithm 1 of the paper): `result` maps each stream
to the time its last task ends, in nanoseconds -- "Comm" (every communication task) and "GPU0"
.. "GPU{pp-1}" (one GPU per pipeline stage; its last task is the optimizer step) -- so
`max(result.values())` is the iteration time. `breakdown` maps the same streams to the summed
durations of their "compute" and "comm" tasks: the GPU streams carry compute (forward, backward,
recompute, dispatch overheads, optimizer), "Comm" carries tensor-parallel all-reduces,
data-parallel gradient reduction and the tied-embedding sync (pipeline p2p is a gap in vTrain,
in neither). `sim.simulation` is the full `SimulationResult` for everything else.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import ConfigError
from simulator.fileio import write_json_atomic
from simulator.job.catalog import read_json
from simulator.job.loaders import job_file_from_dict
from simulator.job.vtrain_config import (
    VTRAIN_KEYS,
    parse_vtrain,
    validate_vtrain,
    vtrain_to_native,
)
from simulator.report.result import SimulationResult
from simulator.simulate import simulate
from vtrain_ml.cli.common import add_common, run

log = logging.getLogger(__name__)

NS = 1e9  # vTrain's unit: nanoseconds


class vTrainConfig:
    """vTrain's `vTrainConfig`: the same keyword arguments, defaults, attributes and checks.

    `validate_config` runs in `__init__` as in vTrain: it fills in the derived num_gpus / parallel
    size and, when pipeline_parallel_size <= 1, sets micro_batch_size to
    global_batch_size // data_parallel_size (logged at INFO, where vTrain prints it). A file vTrain
    rejects raises `VTrainRejects`, which is an `AssertionError` as in vTrain."""

    def __init__(self, num_gpus: int | None = None, tensor_parallel_size: int | None = None,
                 data_parallel_size: int | None = None, pipeline_parallel_size: int | None = None,
                 gpu_name: str = "A100", global_batch_size: int = 1920,
                 micro_batch_size: int | None = None, model_arch: str = "ShardedGptModel",
                 num_layers: int = 105, hidden_size: int = 20480, num_attention_heads: int = 128,
                 max_length: int = 2048, vocab_size: int = 50257, use_gradient_bucket: bool = False,
                 use_checkpoint: bool = True, ddp_bucket_size: float | None = None,
                 inter_node_bandwidth: float = 800, intra_node_bandwidth: float = 150,
                 pipeline_scheduling: str = "1f1b", node_size: int = 8,
                 trace_path: str = "trace/") -> None:
        self.num_gpus = num_gpus
        self.gpu_name = gpu_name
        self.tensor_parallel_size = tensor_parallel_size
        self.data_parallel_size = data_parallel_size
        self.pipeline_parallel_size = pipeline_parallel_size
        self.global_batch_size = global_batch_size
        self.micro_batch_size = micro_batch_size
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.max_length = max_length
        self.vocab_size = vocab_size
        self.use_gradient_bucket = use_gradient_bucket
        self.use_checkpoint = use_checkpoint
        self.ddp_bucket_size = ddp_bucket_size
        self.pipeline_scheduling = pipeline_scheduling
        self.inter_node_bandwidth = inter_node_bandwidth
        self.intra_node_bandwidth = intra_node_bandwidth
        self.node_size = node_size
        self.trace_path = trace_path
        self.model_arch = model_arch
        self.validate_config()

    def to_dict(self) -> dict[str, Any]:
        """The vTrain keys and their current values, in vTrainConfig.__init__'s order."""
        return {key: getattr(self, key) for key in VTRAIN_KEYS}

    def validate_config(self) -> None:
        """vTrain's checks and derived values (`simulator.job.vtrain_config.validate_vtrain`)."""
        frozen, notes = validate_vtrain(parse_vtrain(self.to_dict()))
        for key in ("num_gpus", "tensor_parallel_size", "data_parallel_size",
                    "pipeline_parallel_size", "micro_batch_size"):
            setattr(self, key, getattr(frozen, key))
        for note in notes:
            log.info("[vTrainConfig] %s", note)

    def save_to_file(self, file_path: str) -> None:
        """Save the configuration as JSON (atomically)."""
        write_json_atomic(file_path, self.to_dict())

    @classmethod
    def load_from_file(cls, file_path: str | Path) -> vTrainConfig:
        """Load a configuration from a JSON file (parsed as JSON whatever its name, as vTrain)."""
        data = read_json(Path(file_path))
        if not isinstance(data, dict):
            raise ConfigError(f"{file_path} must hold a JSON object of vTrain keys, "
                              f"got {type(data).__name__}")
        parse_vtrain(data)  # unknown keys and value types: one clear line, before __init__
        return cls(**data)

    def __repr__(self) -> str:
        quoted = {"gpu_name", "model_arch", "pipeline_scheduling", "trace_path"}
        order = ("num_gpus", "gpu_name", "tensor_parallel_size", "data_parallel_size",
                 "pipeline_parallel_size", "global_batch_size", "micro_batch_size", "model_arch",
                 "num_layers", "hidden_size", "num_attention_heads", "max_length",
                 "use_gradient_bucket", "use_checkpoint", "ddp_bucket_size", "inter_node_bandwidth",
                 "intra_node_bandwidth", "pipeline_scheduling", "node_size", "trace_path")
        lines = [f"  {k}='{getattr(self, k)}'" if k in quoted else f"  {k}={getattr(self, k)}"
                 for k in order]
        return "vTrainConfig(\n" + ",\n".join(lines) + "\n)"


class vTrain:
    """vTrain's predictor: `vTrain(config)()` -> `(result, breakdown)` in vTrain's shapes and unit
    (nanoseconds). Unlike vTrain it needs no kernel traces: vtrain-ml's simulator costs the
    kernels (analytic model, or the hardware file's calibration)."""

    def __init__(self, config: vTrainConfig) -> None:
        self.config = config
        self.simulation: SimulationResult | None = None
        self.notes: tuple[str, ...] = ()

    def __call__(self) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        frozen, notes = validate_vtrain(parse_vtrain(self.config.to_dict()))
        native, more = vtrain_to_native(frozen)
        loaded = job_file_from_dict(native)
        self.notes = notes + more
        for note in self.notes:
            log.info("%s", note)
        log.info("%r", self.config)
        self.simulation = simulate(loaded.job)
        return vtrain_result(self.simulation), vtrain_breakdown(self.simulation)

    def show_graph(self) -> Any:
        """vTrain's timeline plot (one row per pipeline stage: forward, backward, optimizer step,
        communication) of the last call, as a matplotlib Figure. vTrain calls `plt.show()`; this
        returns the Figure (call `.savefig(...)`, or `plt.show()` yourself)."""
        if self.simulation is None:
            raise ConfigError("there is no simulated execution graph: call sim() first")
        return timeline_figure(self.simulation)


# vTrain's show_graph colours (src/graph.py): forward blues, backward greens, update reds, comm grey
_COLOURS = {"F": "lightskyblue", "B": "limegreen", "optimizer": "lightcoral"}


def timeline_figure(sim: SimulationResult) -> Any:
    """The iteration's timeline, one row per pipeline stage (milliseconds on the x axis)."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no backend, no global state
    except ImportError:
        raise ConfigError("show_graph needs matplotlib: pip install matplotlib") from None
    from simulator.report.trace import chrome_trace

    spans = [e for e in chrome_trace(sim)["traceEvents"] if e["ph"] == "X" and e["tid"] in (0, 1, 5)]
    stages = len(sim.stages)
    fig = Figure(figsize=(16, 0.6 * stages + 1))
    ax = fig.subplots()
    for e in spans:
        colour = _COLOURS.get(e["cat"], "darkgrey")
        row = stages - 1 - e["pid"]
        ax.broken_barh([(e["ts"] / 1e3, e["dur"] / 1e3)], (row + 0.1, 0.8), facecolors=colour)
    ax.set_yticks([stages - 1 - s + 0.5 for s in range(stages)], [f"GPU{s}" for s in range(stages)])
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, sim.iteration_time_s * 1e3)
    fig.tight_layout()
    return fig


def _stage_seconds(sim: SimulationResult) -> dict[str, np.ndarray]:
    """Per pipeline stage (one GPU of each): when it ends, its compute, its communication, and
    when its last communication ends (seconds)."""
    tl, tail, costs = sim.timeline, sim.tail, sim.costs
    if tl is None or tail is None or costs is None:
        raise ValueError("the simulation result carries no timeline; call simulate() again")
    m = sim.num_microbatches

    def per_stage(name: str) -> np.ndarray:
        return m * costs.parts[name].sum(axis=1)

    compute = sum(per_stage(k) for k in ("forward", "backward", "recompute", "overhead"))
    dp_total = np.asarray(tail.dp_comm_s)
    comm = per_stage("tp_comm") + dp_total + tail.embedding_sync_s
    # every stage then waits for the slowest rank (the breakdown's scale_loss)
    loss = sim.scale_loss.total_s if sim.scale_loss is not None else 0.0
    end = tl.stage_end + tail.dp_exposed_s + tail.embedding_sync_s + tail.optimizer_s + loss
    # the last collective: dp reduction / embedding sync after the pipeline, else the last
    # backward's tensor-parallel all-reduce, which ends with the stage's pipeline work
    after = (dp_total > 0) | (tail.embedding_sync_s > 0)
    comm_end = np.where(after, tl.stage_end + tail.dp_exposed_s + tail.embedding_sync_s,
                        np.where(per_stage("tp_comm") > 0, tl.stage_end, 0.0))
    return {"end": end, "compute": compute + tail.optimizer_s, "comm": comm, "comm_end": comm_end}


def vtrain_result(sim: SimulationResult) -> dict[str, float]:
    """vTrain's `result`: stream -> end of its last task (ns); max() is the iteration time."""
    s = _stage_seconds(sim)
    out = {"Comm": float(s["comm_end"].max()) * NS}
    out.update({f"GPU{i}": float(t) * NS for i, t in enumerate(s["end"])})
    return out


def vtrain_breakdown(sim: SimulationResult) -> dict[str, dict[str, float]]:
    """vTrain's `breakdown`: stream -> {"compute": ns, "comm": ns} summed over its tasks."""
    s = _stage_seconds(sim)
    out = {"Comm": {"compute": 0.0, "comm": float(s["comm"].sum()) * NS}}
    out.update({f"GPU{i}": {"compute": float(c) * NS, "comm": 0.0} for i, c in enumerate(s["compute"])})
    return out


SCRIPT = "vtrain-compat"  # pyproject.toml [project.scripts]


def parser() -> argparse.ArgumentParser:
    module = "python -m vtrain_ml.compat.vtrain"
    p = argparse.ArgumentParser(prog=SCRIPT if Path(sys.argv[0]).name == SCRIPT else module,
                                description="vTrain's example.py: predict the iteration time of a "
                                            "vTrain config file.",
                                epilog=f"Installed as the console script `{SCRIPT}` too ({module} "
                                       "works the same).")
    p.add_argument("-c", "--config", required=True, metavar="CONFIG_JSON", help="vTrain config file")
    add_common(p)
    return p


def _log_line(message: str) -> None:
    """vTrain's log format (src/predictor.py: "[%(asctime)s] (%(levelname)s) %(message)s")."""
    stamp = datetime.now().strftime("%m/%d/%Y %H:%M:%S")
    for line in message.splitlines():
        sys.stderr.write(f"[{stamp}] (INFO) {line}\n")


def _main(args: argparse.Namespace) -> int:
    config = vTrainConfig.load_from_file(args.config)
    sim = vTrain(config)
    result, _ = sim()
    for note in sim.notes:
        _log_line(f"[vTrainConfig] {note}")
    _log_line(repr(config))
    pred_iter_time = max(result.values()) / 1000 / 1000
    _log_line(f"predicted iteration time: {pred_iter_time:.3f} ms")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(_main, parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
