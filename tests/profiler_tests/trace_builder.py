"""A synthetic Kineto trace of one training iteration, built event by event.

Shaped like what torch.profiler writes for an eager PyTorch training step (CPU ops with
sequence numbers on the main thread, autograd nodes as ``evaluate_function`` ops on a device
thread, runtime launch calls with correlation ids, kernels on a stream), with every kernel named
after the phase it belongs to, so that tests know the right answer without the importer.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAIN, AUTOGRAD, STREAM = 100, 200, 7
LAYER_OPS = ("aten::layer_norm", "aten::linear", "aten::gelu", "aten::linear", "aten::add")
EVAL = "autograd::engine::evaluate_function: "


@dataclass
class Builder:
    layers: int = 3
    micro_batches: int = 2
    recompute: bool = False
    kernel_us: float = 20.0  # every kernel's duration
    gap_us: float = 5.0  # host time between ops
    events: list[dict[str, Any]] = field(default_factory=list)
    expected: dict[str, str] = field(default_factory=dict)  # kernel name -> phase label
    t: float = 1000.0
    gpu_t: float = 1000.0
    corr: int = 1
    seq: int = 500
    kernels: int = 0

    def op(self, name: str, tid: int, dur: float, seq: int | None = None,
           dims: Any = None) -> dict[str, Any]:
        args: dict[str, Any] = {"External id": self.corr}
        if seq is not None:
            args["Sequence number"] = seq
        if dims is not None:
            args["Input Dims"] = dims
        ev = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": self.t,
              "dur": dur, "args": args}
        self.events.append(ev)
        return ev

    def launch(self, tid: int, label: str, linked: bool = True) -> None:
        """A launch call at the current time and its kernel (queued behind earlier ones)."""
        corr = self.corr
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                            "tid": tid, "ts": self.t + 1, "dur": 3.0,
                            "args": {"correlation": corr if linked else corr + 10**6}})
        self.kernels += 1
        name = f"void k{self.kernels}_{label}"
        start = max(self.gpu_t, self.t + 5)
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": STREAM,
                            "ts": start, "dur": self.kernel_us,
                            "args": {"correlation": corr, "stream": STREAM, "device": 0}})
        self.gpu_t = start + self.kernel_us + 1.0
        self.expected[name] = label

    def leaf(self, name: str, tid: int, label: str, seq: int | None, dims: Any = None) -> None:
        """An op that launches one kernel."""
        self.op(name, tid, 10.0, seq, dims)
        self.launch(tid, label)
        self.t += 10.0 + self.gap_us

    def forward(self, mb: int) -> dict[int, str]:
        """One micro-batch's forward; returns sequence number -> backward label."""
        seqs: dict[int, str] = {}

        def fwd(name: str, label: str, back: str) -> None:
            self.seq += 1
            seqs[self.seq] = back
            self.leaf(name, MAIN, label, self.seq, [[2, 8, 16]])

        fwd("aten::embedding", f"embedding_forward/{mb}/-1", f"embedding_backward/{mb}/-1")
        for layer in range(self.layers):
            for name in LAYER_OPS:
                fwd(name, f"layer_forward/{mb}/{layer}", f"layer_backward/{mb}/{layer}")
        fwd("aten::layer_norm", f"head_forward/{mb}/-1", f"head_backward/{mb}/-1")
        fwd("aten::matmul", f"head_forward/{mb}/-1", f"head_backward/{mb}/-1")
        fwd("aten::cross_entropy_loss", f"head_forward/{mb}/-1", f"head_backward/{mb}/-1")
        return seqs

    def backward(self, mb: int, seqs: dict[int, str]) -> None:
        """Autograd nodes in reverse order on the engine's thread; AccumulateGrad after each
        linear's node; with recompute, the layer's forward re-runs inside its first node."""
        seen_layers: set[str] = set()
        for seq in sorted(seqs, reverse=True):
            label = seqs[seq]
            node = f"Node{seq}Backward0"
            start = self.t
            outer = self.op(EVAL + node, AUTOGRAD, 0.0, seq)
            inner = self.op(node, AUTOGRAD, 0.0, seq)
            self.t += 1
            if self.recompute and label.startswith("layer") and label not in seen_layers:
                seen_layers.add(label)
                rec = label.replace("layer_backward", "layer_recompute")
                for name in LAYER_OPS:
                    self.seq += 1
                    self.leaf(name, AUTOGRAD, rec, 10**5 + self.seq)
            self.op("aten::mul", AUTOGRAD, 10.0)  # the node's own (grad-mode-off) work
            self.launch(AUTOGRAD, label)
            self.t += 10.0
            inner["dur"] = outer["dur"] = self.t - start
            self.t += self.gap_us
            if "linear" in node or seq % 5 == 2:
                self.op(EVAL + "torch::autograd::AccumulateGrad", AUTOGRAD, 12.0)
                self.op("torch::autograd::AccumulateGrad", AUTOGRAD, 11.0, None, [[16, 16]])
                self.launch(AUTOGRAD, label)
                self.t += 12.0 + self.gap_us

    def build(self, steps: bool = False, iterations: int = 1,
              stall_us: float = 0.0) -> dict[str, Any]:
        """`iterations` training iterations (ProfilerStep annotations when `steps` or several);
        the first one's host pauses `stall_us` longer between ops (a stalled iteration)."""
        normal = self.gap_us
        for it in range(iterations):
            self.gap_us = normal + (stall_us if it == 0 else 0.0)
            self._iteration(steps or iterations > 1, it)
        self.gap_us = normal
        orphan = self.gpu_t + 5  # a kernel no launch call links to
        self.events.append({"ph": "X", "cat": "kernel", "name": "void orphan_unattributed",
                            "pid": 0, "tid": STREAM, "ts": orphan, "dur": 7.0,
                            "args": {"correlation": 987654321, "stream": STREAM}})
        self.expected["void orphan_unattributed"] = "unattributed"
        return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3",
                                                          "totalGlobalMem": 85017493504}],
                "traceEvents": self.events, "displayTimeUnit": "ms"}

    def _iteration(self, steps: bool, it: int) -> None:
        start = self.t
        for mb in range(self.micro_batches):
            seqs = self.forward(mb)
            self.t += 30.0
            self.backward(mb, seqs)
            self.t += 30.0
        self.events.append({"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#AdamW.step",
                            "pid": 1, "tid": MAIN, "ts": self.t, "dur": 40.0, "args": {}})
        self.t += 2
        self.leaf("aten::_fused_adamw_", MAIN, "optimizer/-1/-1", None)
        self.t += 100
        if steps:
            self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{7 + it}",
                                "pid": 1, "tid": MAIN, "ts": start - 1, "dur": self.t - start + 2,
                                "args": {}})
        self.t = max(self.t, self.gpu_t) + 50.0  # the step ends synchronized


def write(trace: dict[str, Any], path: Path) -> Path:
    data = json.dumps(trace).encode()
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)
    return path
