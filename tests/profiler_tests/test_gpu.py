"""GPU-only paths (CUDA-event timing, device metadata); skipped without CUDA, never faked."""

import pytest
import torch

from profiler.device import catalog_hardware, device_info
from profiler.kernels import Inputs, make_kernel
from profiler.timing import TimingConfig, time_cuda
from simulator.graph.ops import Op, OpKind, Phase

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_cuda_event_timing_of_a_gemm_is_positive_and_sane():
    dev = torch.device("cuda")
    op = Op("g", OpKind.GEMM, Phase.FORWARD, (1, 4096, 4096, 4096), 2, 2 * 4096**3, 3 * 2 * 4096**2)
    stats = time_cuda(make_kernel(op, 0, Inputs(dev, torch.bfloat16, 0)), TimingConfig())
    assert 0 < stats.median_s < 0.1
    assert op.flops / stats.median_s < 5e15  # below any GPU's peak: events bracket the kernel


def test_device_metadata_names_the_gpu():
    info = device_info(torch.device("cuda"))
    assert info.kind == "cuda" and info.memory_bytes > 0 and info.cuda
    assert catalog_hardware(info.name) is not None or "H" not in info.name
