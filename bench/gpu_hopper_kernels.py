"""Measure, on one Hopper GPU, the kernels whose efficiency the MoE and at-scale models assume.

    python bench/gpu_hopper_kernels.py OUTDIR            (on the GPU; about 1 minute)
    python bench/gpu_hopper_kernels.py OUTDIR --smoke    (tiny shapes on the CPU: plumbing only)

Why: the analytic kernel model's Hopper numbers come from dense GEMMs (Vidur's H100 GEMMs,
bench/fit_kernel_defaults.py). Three things it prices were never measured on Hopper here:
1. the routed experts' grouped GEMMs as tokens per expert shrink (simulator/graph/moe/experts.py
   costs E local experts as one (E, tokens, N, K) problem): measured for the expert shapes of the
   MoE presets in four implementations -- `torch._grouped_mm` (one CUTLASS grouped kernel, what
   torchtitan runs), `torch.bmm` (equal tokens, cuBLAS batched), and one cuBLAS GEMM per expert
   on one stream and spread over 4 streams (Transformer Engine's `general_grouped_gemm`,
   `num_gemm_streams`), forward (fc1, fc2), data gradient and weight gradient;
2. fused attention (TE runs cuDNN's): SDPA's cuDNN and flash backends, causal, head dims 64 and
   128 and MLA's 192/128, forward and backward;
3. what an overlapped collective costs the compute beside it (simulator/timeline/contention.py:
   k / (num_sms - k) for a collective holding k SMs): a persistent copy kernel on k CTAs (NCCL
   runs one CTA per channel; each moves bytes with loads and stores) on a second stream while
   a GEMM or a memory-bound kernel runs, against each alone.
Every timing is the median of CUDA-graph replays of the op repeated back to back (no host gaps),
after warm-up, on random data; attention, which does not capture, is timed by its kernels' device
events (`attention_kernels`; the `attention` part's event timer also counts host latency).
Results: OUTDIR/kernels.csv (one row per timing), OUTDIR/env.txt.
"""

from __future__ import annotations

import argparse
import csv
import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# Expert shapes (hidden, moe_ffn, local experts to measure) of the presets, data/models/*.yaml;
# local experts = num_experts / ep for the ep the published layouts use.
EXPERT_SHAPES = {
    "gpt-oss-120b": (2880, 2880, (16, 4)),      # 128 experts, ep 8 / ep 32
    "deepseek-v3": (7168, 2048, (32, 4)),       # 256 experts, ep 8 / ep 64
    "qwen3-235b-a22b": (4096, 1536, (16, 4)),   # 128 experts, ep 8 / ep 32
    "qwen3-30b-a3b": (2048, 768, (16,)),        # 128 experts, ep 8
    "mixtral-8x7b": (4096, 14336, (2,)),        # 8 experts, ep 4
}
TOKENS_PER_EXPERT = (128, 512, 2048, 8192)
ATTENTION = (  # (name, heads, head_dim_qk, head_dim_v, seq)
    ("d64-gpt-oss", 64, 64, 64, 4096),
    ("d128-llama", 64, 128, 128, 4096),
    ("d128-llama-8k", 32, 128, 128, 8192),
    ("d192v128-mla", 128, 192, 128, 4096),
    ("d128-s2048", 32, 128, 128, 2048),
    ("d64-s8192", 64, 64, 64, 8192),
    ("d128-s16384", 8, 128, 128, 16384),
)

FIELDS = ["part", "variant", "case", "op", "batch", "m", "n", "k", "flops", "bytes", "median_s",
          "p10_s", "p90_s", "samples", "note"]


_GEN: dict[str, torch.Generator] = {}


def rand(*shape: int, device: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Normal random inputs from a private generator: a graph capture that fails leaves the
    default CUDA generator in capture mode, and every later `torch.randn` would fail with it."""
    if device not in _GEN:
        _GEN[device] = torch.Generator(device=device)
        _GEN[device].manual_seed(0)
    return torch.randn(*shape, device=device, dtype=dtype, generator=_GEN[device])


class Timer:
    """Median time of `fn` from CUDA-graph replays of `repeat` back-to-back calls (GPU), or wall
    clock (CPU smoke run)."""

    def __init__(self, device: str, smoke: bool) -> None:
        self.device, self.smoke = device, smoke

    def __call__(self, fn: Callable[[], Any], target_s: float = 0.02, graph: bool = True
                 ) -> tuple[float, float, float, int]:
        if self.device == "cuda" and not graph:
            return self.events(fn)
        if self.device != "cuda":
            fn()
            ts = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            ts.sort()
            return ts[1], ts[0], ts[-1], 3
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        one = max(time.perf_counter() - t0, 1e-6)
        repeat = int(min(50, max(1, 0.004 / one)))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(repeat):
                fn()
        g.replay()
        torch.cuda.synchronize()
        samples = int(min(40, max(5, target_s / (one * repeat))))
        times = []
        for _ in range(samples):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3 / repeat)
        del g
        times.sort()
        n = len(times)
        return times[n // 2], times[n // 10], times[(9 * n) // 10], n


    @staticmethod
    def events(fn: Callable[[], Any]) -> tuple[float, float, float, int]:
        """Without a graph (autograd and cuDNN's attention do not capture): events around each
        call of ms-long kernels, whose launches the host issues ahead of the GPU."""
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(15):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        times.sort()
        return times[7], times[1], times[13], 15


class Writer:
    def __init__(self, path: Path) -> None:
        self.f = path.open("w", newline="")
        self.w = csv.DictWriter(self.f, FIELDS)
        self.w.writeheader()

    def row(self, **kw: Any) -> None:
        self.w.writerow({k: kw.get(k, "") for k in FIELDS})
        self.f.flush()


Problem = tuple[tuple[int, int, int], Callable[[], Any], Callable[[], Any], list[Callable[[], Any]]]


def expert_problems(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, e: int, t: int
                    ) -> dict[str, Problem]:
    """direction -> ((m, n, k) per expert, grouped kernel, batched kernel, one GEMM per expert)
    for E experts of t tokens: x (E t, in), w (E, out, in), dy (E t, out)."""
    n_out, k_in = w.shape[1], w.shape[2]
    offs = torch.arange(t, e * t + 1, t, device=x.device, dtype=torch.int32)
    xs, dys = x.view(e, t, k_in), dy.view(e, t, n_out)
    wt = w.transpose(-2, -1)  # (E, in, out), column-major as torchtitan passes it
    # the weight gradient's (out, tokens) x (tokens, in), split along the tokens: torch's
    # 2d x 2d grouped GEMM wants A row-major and B column-major
    dyt, xk = dy.t().contiguous(), x.t().contiguous().t()
    return {
        "fwd": ((t, n_out, k_in),
                lambda: torch._grouped_mm(x, wt, offs=offs),
                lambda: torch.bmm(xs, wt),
                [lambda i=i: torch.mm(xs[i], wt[i]) for i in range(e)]),
        "dgrad": ((t, k_in, n_out),
                  lambda: torch._grouped_mm(dy, w, offs=offs),
                  lambda: torch.bmm(dys, w),
                  [lambda i=i: torch.mm(dys[i], w[i]) for i in range(e)]),
        "wgrad": ((n_out, k_in, t),
                  lambda: torch._grouped_mm(dyt, xk, offs=offs),
                  lambda: torch.bmm(dys.transpose(1, 2), xs),
                  [lambda i=i: torch.mm(dys[i].t(), xs[i]) for i in range(e)]),
    }


def implementations(problem: Problem, streams: list[torch.cuda.Stream]
                    ) -> dict[str, Callable[[], Any]]:
    """The four ways to run one problem: one grouped kernel, one batched kernel, one GEMM per
    expert on one stream, and the same spread over `streams` (none on a CPU)."""
    _, grouped, bmm, each = problem

    def loop() -> None:
        for fn in each:
            fn()

    def multi() -> None:
        cur = torch.cuda.current_stream()
        for s in streams:
            s.wait_stream(cur)
        for i, fn in enumerate(each):
            with torch.cuda.stream(streams[i % len(streams)]):
                fn()
        for s in streams:
            cur.wait_stream(s)

    variants = {"grouped_mm": grouped, "bmm": bmm, "loop": loop}
    if streams:
        variants["streams4"] = multi
    return variants


def grouped_check(problem: Problem) -> str:
    """The grouped kernel computes what the batched one does (relative error)."""
    _, grouped, bmm, _ = problem
    try:
        ref = bmm().float()
        got = grouped().float().reshape(ref.shape)
        return f"rel err vs bmm {float((got - ref).norm() / ref.norm()):.1e}"
    except Exception as exc:
        return f"check failed: {type(exc).__name__}"


def grouped_part(out: Writer, timer: Timer, dev: str, smoke: bool) -> None:
    """fc1 / fc2 of E local experts: forward, data gradient, weight gradient."""
    dt = torch.bfloat16
    shapes = {"tiny": (64, 32, (4,))} if smoke else EXPERT_SHAPES
    tokens = (8, 32) if smoke else TOKENS_PER_EXPERT
    streams = [torch.cuda.Stream() for _ in range(4)] if dev == "cuda" else []
    for case, (h, f, experts) in shapes.items():
        for e in experts:
            for t in tokens:
                for op, (n_out, k_in) in (("fc1", (2 * f, h)), ("fc2", (h, f))):
                    x = rand(e * t, k_in, device=dev, dtype=dt)
                    w = rand(e, n_out, k_in, device=dev, dtype=dt) * 0.02  # (E, out, in)
                    dy = rand(e * t, n_out, device=dev, dtype=dt)
                    for direction, problem in expert_problems(x, w, dy, e, t).items():
                        m, n, k = problem[0]
                        flops = 2.0 * e * m * n * k
                        nbytes = 2.0 * e * (m * k + k * n + m * n)
                        check = grouped_check(problem)
                        for variant, fn in implementations(problem, streams).items():
                            try:
                                med, p10, p90, nsm = timer(fn)
                                note = check if variant == "grouped_mm" else ""
                            except Exception as exc:
                                med = p10 = p90 = float("nan")
                                nsm, note = 0, f"{type(exc).__name__}: {str(exc)[:120]}"
                            out.row(part="grouped_gemm", variant=variant, case=case,
                                    op=f"{op}.{direction}", batch=e, m=m, n=n, k=k, flops=flops,
                                    bytes=nbytes, median_s=med, p10_s=p10, p90_s=p90,
                                    samples=nsm, note=note)


def dense_part(out: Writer, timer: Timer, dev: str, smoke: bool) -> None:
    """Reference GEMMs in bf16 and per-tensor FP8 (`torch._scaled_mm`, e4m3, what TE's current
    scaling runs on Hopper)."""
    sizes = [(64, 64, 64)] if smoke else [(8192, 8192, 8192), (16384, 5760, 2880),
                                          (16384, 2880, 2880), (8192, 28672, 8192),
                                          (8192, 8192, 28672), (4096, 4096, 4096)]
    for m, n, k in sizes:
        a = rand(m, k, device=dev, dtype=torch.bfloat16)
        b = rand(n, k, device=dev, dtype=torch.bfloat16).t()
        med, p10, p90, ns = timer(lambda a=a, b=b: torch.mm(a, b))
        out.row(part="dense_gemm", variant="bf16", case=f"{m}x{n}x{k}", op="gemm", batch=1, m=m,
                n=n, k=k, flops=2.0 * m * n * k, bytes=2.0 * (m * k + k * n + m * n),
                median_s=med, p10_s=p10, p90_s=p90, samples=ns)
        if dev != "cuda":
            continue
        try:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = rand(n, k, device=dev).to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=dev)
            med, p10, p90, ns = timer(lambda a8=a8, b8=b8, one=one: torch._scaled_mm(
                a8, b8, scale_a=one, scale_b=one,
                                                               out_dtype=torch.bfloat16))
            note = ""
        except Exception as exc:
            med = p10 = p90 = float("nan")
            ns, note = 0, f"{type(exc).__name__}: {str(exc)[:120]}"
        out.row(part="dense_gemm", variant="fp8_tensor", case=f"{m}x{n}x{k}", op="gemm", batch=1,
                m=m, n=n, k=k, flops=2.0 * m * n * k, bytes=m * k + k * n + 2.0 * m * n,
                median_s=med, p10_s=p10, p90_s=p90, samples=ns, note=note)


def attention_part(out: Writer, timer: Timer, dev: str, smoke: bool) -> None:
    """Causal fused attention, batch 1 (a micro-batch of one sequence), K/V expanded to the query
    heads (GQA reads fewer K/V bytes; the kernels are compute-bound at these lengths). Timed with
    events around each call, which also counts the host's launch latency (3-34% of these
    kernels): good for comparing backends, not for fitting -- `attention_kernels` times the
    kernels themselves."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    cases = [("tiny", 2, 16, 16, 64)] if smoke else ATTENTION
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    if dev != "cuda":
        backends = {"math": SDPBackend.MATH}
    for case, heads, dqk, dv, s in cases:
        q = rand(1, heads, s, dqk, device=dev, dtype=torch.bfloat16).requires_grad_()
        k = rand(1, heads, s, dqk, device=dev, dtype=torch.bfloat16).requires_grad_()
        v = rand(1, heads, s, dv, device=dev, dtype=torch.bfloat16).requires_grad_()
        pairs = s * s / 2
        fwd_flops = 2.0 * heads * pairs * (dqk + dv)
        for name, backend in backends.items():
            for direction in ("fwd", "fwd+bwd"):
                try:
                    with sdpa_kernel([backend]):
                        o = sdpa(q, k, v, is_causal=True)
                        do = rand(*o.shape, device=dev, dtype=o.dtype)
                        if direction == "fwd":
                            def fn(q=q, k=k, v=v) -> None:
                                with torch.no_grad():
                                    sdpa(q, k, v, is_causal=True)
                        else:
                            def fn(q=q, k=k, v=v, do=do) -> None:
                                torch.autograd.grad(sdpa(q, k, v, is_causal=True), (q, k, v), do)
                        med, p10, p90, ns = timer(fn, graph=False)
                    note = ""
                except Exception as exc:
                    med = p10 = p90 = float("nan")
                    ns, note = 0, f"{type(exc).__name__}: {str(exc)[:160]}"
                flops = fwd_flops * (1 if direction == "fwd" else 3.5)
                out.row(part="attention", variant=name, case=case, op=direction, batch=heads,
                        m=s, n=dv, k=dqk, flops=flops, bytes="", median_s=med, p10_s=p10,
                        p90_s=p90, samples=ns, note=note)


# Small attention problems (micro-batch b, heads, tokens; head size 128), the regime where the
# H100 traces' attention kernels are faster in the model than measured: a check set, not fitted.
ATTENTION_CHECK = ((1, 16, 2048), (2, 16, 2048), (4, 16, 2048), (1, 32, 2048), (2, 32, 2048),
                   (1, 8, 4096), (1, 32, 4096), (1, 64, 1024), (4, 32, 1024), (1, 8, 8192),
                   (1, 16, 8192), (8, 8, 2048))


def kernel_seconds(fn: Callable[[], Any], reps: int = 10) -> float:
    """GPU kernel time of one call of `fn`, from the profiler's device events (CUPTI): no host
    launch latency, which the event timer of a lone call includes (it waits for the GPU after
    each call, so a short kernel starts only once the host has launched it)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    total_us = sum(getattr(e, "self_device_time_total", 0.0) or getattr(e, "self_cuda_time_total", 0.0)
                   for e in prof.key_averages())
    return total_us * 1e-6 / reps


def attention_kernels_part(out: Writer, dev: str, smoke: bool) -> None:
    """cuDNN's attention kernels alone (`kernel_seconds`) on the fitted shapes (`ATTENTION`) and
    the small ones (`ATTENTION_CHECK`), with the event timer's time of the same call beside."""
    if dev != "cuda" or smoke:
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    shapes = [(case, 1, heads, dqk, dv, s) for case, heads, dqk, dv, s in ATTENTION]
    shapes += [(f"b{b}-h{h}-s{s}", b, h, 128, 128, s) for b, h, s in ATTENTION_CHECK]
    for case, b, heads, dqk, dv, s in shapes:
        q, k = (rand(b, heads, s, dqk, device=dev, dtype=torch.bfloat16).requires_grad_() for _ in range(2))
        v = rand(b, heads, s, dv, device=dev, dtype=torch.bfloat16).requires_grad_()
        do = rand(b, heads, s, dv, device=dev, dtype=torch.bfloat16)
        fwd_flops = 2.0 * b * heads * (s * s / 2) * (dqk + dv)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            def fwd(q=q, k=k, v=v) -> None:
                with torch.no_grad():
                    sdpa(q, k, v, is_causal=True)

            def both(q=q, k=k, v=v, do=do) -> None:
                torch.autograd.grad(sdpa(q, k, v, is_causal=True), (q, k, v), do)

            for direction, fn in (("fwd", fwd), ("fwd+bwd", both)):
                try:
                    kernels = kernel_seconds(fn)
                    events = Timer.events(fn)[0]
                    note = f"b={b}; events {events:.4e}"
                except Exception as exc:
                    kernels = events = float("nan")
                    note = f"b={b}; {type(exc).__name__}: {str(exc)[:160]}"
                out.row(part="attention_kernels", variant="cudnn", case=case, op=direction,
                        batch=heads, m=s, n=dv, k=dqk,
                        flops=fwd_flops * (1 if direction == "fwd" else 3.5), bytes="",
                        median_s=kernels, samples=10, note=note)
                print(f"{case:16s} {direction:8s} kernels {kernels * 1e6:8.1f} us, events "
                      f"{events * 1e6:8.1f} us", flush=True)


def heavy_copy(src: torch.Tensor, dst: torch.Tensor, side: torch.cuda.Stream
               ) -> Callable[[int, int], None]:
    """A copy kernel that holds its SMs as an NCCL kernel does: NCCL's CTAs (512-640 threads,
    `__launch_bounds__(NCCL_MAX_NTHREADS, 1)`) take most of an SM's registers, so no GEMM CTA
    shares the SM. Here 200 KiB of shared memory per CTA has the same effect; the light Triton
    copy leaves room beside it (a GEMM CTA then runs on the same SM)."""
    import cupy

    code = r"""
    extern "C" __global__ void __launch_bounds__(512, 1)
    copy_heavy(const int4* __restrict__ s, int4* __restrict__ d, long long n) {
      extern __shared__ int4 buf[];
      long long stride = (long long)gridDim.x * blockDim.x;
      for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        d[i] = s[i];
      if (n < 0) d[0] = buf[threadIdx.x];
    }"""
    kernel = cupy.RawKernel(code, "copy_heavy")
    smem = 200 * 1024
    kernel.max_dynamic_shared_size_bytes = smem
    s32, d32 = cupy.asarray(src.view(torch.int32)), cupy.asarray(dst.view(torch.int32))
    stream = cupy.cuda.ExternalStream(side.cuda_stream)

    def launch(ctas: int, n_bf16: int) -> None:
        with stream:
            kernel((ctas,), (512,), (s32, d32, cupy.int64(n_bf16 // 8)), shared_mem=smem)

    return launch


def contention_part(out: Writer, dev: str, smoke: bool, heavy_only: bool = False) -> None:
    """A GEMM stream (and a memory-bound stream) alone, then beside a persistent copy kernel on
    `ctas` CTAs of 512 threads in a second stream, as an NCCL collective holds one CTA per
    channel. Times with events around the victim's stream; the copy is sized to outlast it."""
    if dev != "cuda" or smoke:
        return
    import triton
    import triton.language as tl

    @triton.jit
    def copy_kernel(src, dst, n, BLOCK: tl.constexpr, NPROG: tl.constexpr):
        pid = tl.program_id(0)
        for start in range(pid * BLOCK, n, NPROG * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)

    n_elems = 1 << 30  # 2 GiB of bf16 each way
    src = rand(n_elems, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    a = rand(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = rand(8192, 8192, device=dev, dtype=torch.bfloat16)
    big = rand(1 << 29, device=dev, dtype=torch.bfloat16)  # 1 GiB, memory-bound victim
    xe = rand(16384, 2880, device=dev, dtype=torch.bfloat16)  # an expert-sized GEMM
    we = rand(2880, 5760, device=dev, dtype=torch.bfloat16)
    side = torch.cuda.Stream()

    def copy(ctas: int, n: int) -> None:
        if heavy is not None:
            heavy(ctas, n)
        else:
            copy_kernel[(ctas,)](src, dst, n, BLOCK=4096, NPROG=ctas, num_warps=16)

    def run_victim(kind: str, reps: int) -> float:
        a_ev, b_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a_ev.record()
        for _ in range(reps):
            if kind == "gemm":
                torch.mm(a, b)
            elif kind == "gemm_expert":
                torch.mm(xe, we)
            else:
                big.mul_(1.0001)
        b_ev.record()
        b_ev.synchronize()
        return a_ev.elapsed_time(b_ev) / 1e3 / reps

    heavy = heavy_copy(src, dst, side) if heavy_only else None
    for kind in ("gemm", "memory") if not heavy_only else ("gemm", "gemm_expert", "memory"):
        run_victim(kind, 5)
        reps = 30
        alone = sorted(run_victim(kind, reps) for _ in range(5))[2]
        flops = {"gemm": 2.0 * 8192 ** 3, "gemm_expert": 2.0 * 16384 * 2880 * 5760}.get(kind, 0.0)
        nbytes = 2.0 * big.numel() * 2 if kind == "memory" else 0.0
        tag = "heavy_" if heavy is not None else ""
        out.row(part="contention", variant=f"{tag}alone", case=kind, op=kind, batch=0, flops=flops,
                bytes=nbytes, median_s=alone, samples=5)
        for ctas in (8, 16, 24, 32, 48) if heavy is None else (8, 16, 24, 32, 66):
            # copy alone: its bandwidth on `ctas` CTAs, and the size that outlasts the victim
            copy(ctas, 1 << 24)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            copy(ctas, 1 << 28)
            torch.cuda.synchronize()
            copy_s = time.perf_counter() - t0
            bw = 2.0 * 2 * (1 << 28) / copy_s
            full_s = copy_s * n_elems / (1 << 28)
            launches = math.ceil(2.0 * alone * reps / full_s) + 1  # back to back, outlasting
            beside, spans = [], []
            for _ in range(3):
                torch.cuda.synchronize()
                c0 = time.perf_counter()
                with torch.cuda.stream(side):
                    for _ in range(launches):
                        copy(ctas, n_elems)
                beside.append(run_victim(kind, reps))
                side.synchronize()
                spans.append(time.perf_counter() - c0)
                torch.cuda.synchronize()
            med = sorted(beside)[1]
            outlasts = min(spans) > 1.2 * max(beside) * reps
            out.row(part="contention", variant=f"{tag}ctas{ctas}", case=kind, op=kind, batch=ctas,
                    flops=flops, bytes=nbytes, median_s=med, samples=3,
                    note=f"slowdown {med / alone - 1:.4f}; copy alone {bw / 1e9:.0f} GB/s;"
                         f" copy outlasts victim: {outlasts}")
            print(f"contention {tag}{kind} ctas {ctas}: {med / alone - 1:+.1%} "
                  f"(copy {bw / 1e9:.0f} GB/s)", flush=True)


def environment(outdir: Path, dev: str) -> None:
    lines = [f"torch {torch.__version__}", f"python {sys.version.split()[0]}"]
    if dev == "cuda":
        p = torch.cuda.get_device_properties(0)
        lines += [f"device {p.name}", f"sms {p.multi_processor_count}",
                  f"memory_GiB {p.total_memory / 2**30:.1f}",
                  f"cuda {torch.version.cuda}", f"cudnn {torch.backends.cudnn.version()}"]
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,"
                                  "clocks.max.sm,power.limit", "--format=csv"],
                                 capture_output=True, text=True, timeout=20).stdout
            lines.append(smi.strip())
        except Exception as exc:
            lines.append(f"nvidia-smi: {exc}")
    (outdir / "env.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    ap.add_argument("--parts", default="dense,contention,heavy,grouped,attention,attention_kernels")
    args = ap.parse_args()
    dev = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    args.outdir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    environment(args.outdir, dev)
    out = Writer(args.outdir / "kernels.csv")
    timer = Timer(dev, args.smoke)
    parts = {"dense": lambda: dense_part(out, timer, dev, args.smoke),
             "attention": lambda: attention_part(out, timer, dev, args.smoke),
             "attention_kernels": lambda: attention_kernels_part(out, dev, args.smoke),
             "contention": lambda: contention_part(out, dev, args.smoke),
             "heavy": lambda: contention_part(out, dev, args.smoke, heavy_only=True),
             "grouped": lambda: grouped_part(out, timer, dev, args.smoke)}
    for name in args.parts.split(","):
        t0 = time.perf_counter()
        try:
            parts[name]()
            status = "ok"
        except Exception as exc:
            status = f"FAILED {type(exc).__name__}: {exc}"
        print(f"part {name}: {status} in {time.perf_counter() - t0:.1f} s", flush=True)
        if dev == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
