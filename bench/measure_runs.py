"""Measure real training iterations on one GPU, one fresh process per job, into a runs file.

For every job file in a folder: build the stack the job describes, run 2 warm-up and N timed
iterations (CUDA-synchronized wall clock), and record the median, min and max iteration time, the
peak allocated memory (`torch.cuda.max_memory_allocated`) and the peak reserved by the caching
allocator (`torch.cuda.max_memory_reserved`) over the timed iterations, or `oom: true` when the
job raises `torch.cuda.OutOfMemoryError`. Each job runs in a FRESH PROCESS: a process that ran
other jobs keeps allocator state and compiled-kernel caches that change both peak memory and time
(the issue-12 measurements showed it).

The stacks are those of the team's H100 measurements (`../shared/data/traces/h100/what_ran.py`):
- `mgpt`: plain PyTorch GPT with Megatron-LM's layer structure (LayerNorm, fused QKV, attention as
  `scaled_dot_product_attention` when `flash_attention`, else bmm + masked softmax + dropout + bmm,
  output projection, dropout + residual, LayerNorm, 4h GeLU MLP, learned positions), loss on fp32
  logits; full recompute = `torch.utils.checkpoint(use_reentrant=False)` per layer;
- `llama`: `transformers.LlamaForCausalLM` from a config (sdpa; eager without flash attention);
- `gpt2`: `transformers.GPT2LMHeadModel` from a config.
The stack is the file name's prefix (`mgpt_`, `llama_`, `gpt2_`), or else follows from the model
(RMSNorm or a gated MLP: llama; otherwise mgpt). All: fp32 weights under `torch.autocast`
(bf16, or fp16 with a gradient scaler), fused AdamW, `global_batch_size / micro_batch_size`
micro-batches of forward + backward, then one optimizer step; random tokens; seed 0.

The output is a runs file (`python -m vtrain_ml.validate OUT`): job (relative to the runs file),
iteration_ms (median), iteration_ms_min, iteration_ms_max, peak_memory_GiB, reserved_GiB, oom, tag
(the stack). It is rewritten atomically after every job; a killed run resumes where it stopped
(jobs already in it are skipped). `OUT.meta.json` holds the device, versions and every attempt,
errors included (a job that failed with an error is retried only with --retry-errors).

Needs only Python, PyTorch, PyYAML (and transformers for llama/gpt2): never this project's
packages, so it runs on a bare GPU machine.

Run: python bench/measure_runs.py --jobs data/measured/h100/oom_candidates \
         --out data/measured/h100/oom_candidates/runs.csv [--iters 6] [--budget-s 540]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FIELDS = ["job", "iteration_ms", "iteration_ms_min", "iteration_ms_max", "peak_memory_GiB", "reserved_GiB",
          "oom", "tag"]
STACKS = ("mgpt", "llama", "gpt2")
RESULT = "RESULT "  # prefix of the child's one result line on stdout
GiB = 2**30


# ---------------------------------------------------------------- the parent: one process per job


def job_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in {".yaml", ".yml"} and p.is_file())


def read_done(out: Path) -> dict[str, dict[str, str]]:
    """Rows already in the runs file, by job path (resume)."""
    if not out.is_file():
        return {}
    with out.open(newline="") as handle:
        return {row["job"]: row for row in csv.DictReader(handle)}


def read_meta(out: Path) -> dict[str, Any]:
    path = meta_path(out)
    if not path.is_file():
        return {"attempts": {}}
    return json.loads(path.read_text())


def meta_path(out: Path) -> Path:
    return out.with_name(out.name + ".meta.json")


def write_atomic(path: Path, text: str) -> None:
    """Write beside the target, fsync, rename: a killed run never leaves half a file."""
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


def runs_csv(rows: list[dict[str, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(sorted(rows, key=lambda r: r["job"]))
    return buffer.getvalue()


def row_of(job: str, result: dict[str, Any]) -> dict[str, str] | None:
    """A runs-file row from a child's result (None when the job failed for another reason)."""
    def num(key: str, digits: int) -> str:
        value = result.get(key)
        return "" if value is None else f"{value:.{digits}f}"

    if result["status"] == "oom":
        return {"job": job, "iteration_ms": "", "iteration_ms_min": "", "iteration_ms_max": "",
                "peak_memory_GiB": "", "reserved_GiB": "", "oom": "true", "tag": result.get("stack", "")}
    if result["status"] != "ok":
        return None
    return {"job": job, "iteration_ms": num("iteration_ms", 2),
            "iteration_ms_min": num("iteration_ms_min", 2), "iteration_ms_max": num("iteration_ms_max", 2),
            "peak_memory_GiB": num("peak_allocated_GiB", 3),
            "reserved_GiB": num("peak_reserved_GiB", 3), "oom": "", "tag": result.get("stack", "")}


def run_child(job: Path, iters: int, device: str, timeout_s: float) -> dict[str, Any]:
    """Measure `job` in a fresh Python process; its last RESULT line is the result."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(job), "--iters", str(iters),
               "--device", device]
    start = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "error", "error": f"timed out after {timeout_s:.0f} s", "wall_s": timeout_s}
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if lines:
        result = json.loads(lines[-1][len(RESULT):])
    else:
        tail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        result = {"status": "error", "error": f"child died without a result: {tail}"}
    result["wall_s"] = round(time.monotonic() - start, 2)
    return result


def measure_all(jobs_dir: Path, out: Path, iters: int, device: str, timeout_s: float,
                budget_s: float | None, retry_errors: bool, child: Any = run_child) -> dict[str, Any]:
    """Measure every job of `jobs_dir` not yet in `out`; returns the meta record."""
    rows = read_done(out)
    meta = read_meta(out)
    start = time.monotonic()
    for path in job_files(jobs_dir):
        job = Path(os.path.relpath(path.resolve(), out.resolve().parent)).as_posix()
        failed_before = meta["attempts"].get(job, {}).get("status") == "error"
        if job in rows or (failed_before and not retry_errors):
            continue
        if budget_s is not None and time.monotonic() - start > budget_s:
            log(f"budget of {budget_s:.0f} s spent: stopping; rerun the same command to continue")
            break
        result = child(path, iters, device, timeout_s)
        meta["attempts"][job] = result
        row = row_of(job, result)
        if row is not None:
            rows[job] = row
        for key in ("torch", "device_name", "transformers", "python"):
            if result.get(key):
                meta.setdefault("environment", {})[key] = result[key]
        write_atomic(out, runs_csv(list(rows.values())))
        write_atomic(meta_path(out), json.dumps(meta, indent=1, sort_keys=True) + "\n")
        log(f"{job}: {describe(result)}")
    return meta


def describe(result: dict[str, Any]) -> str:
    if result["status"] == "ok":
        return (f"{result['iteration_ms']:.1f} ms (min {result['iteration_ms_min']:.1f}, max "
                f"{result['iteration_ms_max']:.1f}), peak {fmt(result.get('peak_allocated_GiB'))} GiB "
                "allocated, "
                f"{fmt(result.get('peak_reserved_GiB'))} GiB reserved, {result['wall_s']} s")
    if result["status"] == "oom":
        return f"out of memory ({result.get('where', '')}), {result['wall_s']} s"
    return f"error: {result.get('error')}"


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the child: one job, then exit


def stack_of(path: Path, job: dict[str, Any]) -> str:
    prefix = path.name.split("_")[0]
    if prefix in STACKS:
        return prefix
    model = job["model"]
    return "llama" if model.get("norm") == "rmsnorm" or model.get("gated_mlp") else "mgpt"


def check_single_gpu(job: dict[str, Any]) -> str | None:
    parallel, cluster = job.get("parallel") or {}, job.get("cluster") or {}
    layout = [parallel.get(k) or 1 for k in ("tp", "pp", "dp")] + [cluster.get("num_gpus", 1)]
    if layout != [1, 1, 1, 1]:
        return "this script measures one GPU: tp = pp = dp = num_gpus = 1"
    if not isinstance(job.get("model"), dict):
        return "model must be a full spec (layers, hidden, heads, vocab, seq), not a preset name"
    if (job.get("training") or {}).get("recompute", "none") not in ("none", "full"):
        return "recompute must be none or full (no selective recompute in these stacks)"
    return None


def build_mgpt(m: dict[str, Any], flash: bool, recompute: bool) -> Any:
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    h, heads, bias = m["hidden_size"], m["num_attention_heads"], m.get("use_bias", True)
    ffn = m.get("ffn_hidden_size") or 4 * h
    p_hidden, p_attn = m.get("hidden_dropout", 0.1), m.get("attention_dropout", 0.1)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.proj = nn.Linear(h, 3 * h, bias=bias), nn.Linear(h, h, bias=bias)
            self.fc1, self.fc2 = nn.Linear(h, ffn, bias=bias), nn.Linear(ffn, h, bias=bias)
            self.drop, self.attn_drop = nn.Dropout(p_hidden), nn.Dropout(p_attn)

        def attn(self, x: Any) -> Any:
            b, t, _ = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, heads, h // heads).permute(2, 0, 3, 1, 4)
            if flash:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=p_attn if self.training else 0.0,
                                                   is_causal=True)
            else:
                a = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(h // heads))
                mask = torch.ones(t, t, device=x.device, dtype=torch.bool).triu(1)
                y = self.attn_drop(torch.softmax(a.masked_fill(mask, float("-inf")), -1)) @ v
            return self.proj(y.transpose(1, 2).reshape(b, t, h))

        def forward(self, x: Any) -> Any:
            x = x + self.drop(self.attn(self.ln1(x)))
            return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(m["vocab_size"], h), nn.Embedding(m["seq_length"], h)
            self.layers = nn.ModuleList(Layer() for _ in range(m["num_layers"]))
            self.lnf, self.drop = nn.LayerNorm(h), nn.Dropout(p_hidden)
            self.head = None if m.get("tied_embeddings", True) else nn.Linear(h, m["vocab_size"], bias=False)

        def forward(self, idx: Any) -> Any:
            x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)))
            for layer in self.layers:
                x = checkpoint(layer, x, use_reentrant=False) if recompute else layer(x)
            x = self.lnf(x)
            logits = self.head(x) if self.head is not None else x @ self.wte.weight.t()
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), idx.view(-1))

    return GPT()


def build_hf(stack: str, m: dict[str, Any], flash: bool, recompute: bool) -> Any:
    import transformers

    attn = "sdpa" if flash else "eager"
    if stack == "llama":
        cfg = transformers.LlamaConfig(
            hidden_size=m["hidden_size"], intermediate_size=m.get("ffn_hidden_size") or 4 * m["hidden_size"],
            num_hidden_layers=m["num_layers"], num_attention_heads=m["num_attention_heads"],
            num_key_value_heads=m.get("num_query_groups") or m["num_attention_heads"],
            vocab_size=m["vocab_size"], max_position_embeddings=m["seq_length"],
            tie_word_embeddings=m.get("tied_embeddings", False),
            attention_dropout=m.get("attention_dropout", 0.0),
            attn_implementation=attn)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        p_hidden = m.get("hidden_dropout", 0.1)
        cfg = transformers.GPT2Config(
            n_embd=m["hidden_size"], n_layer=m["num_layers"], n_head=m["num_attention_heads"],
            n_inner=m.get("ffn_hidden_size"), vocab_size=m["vocab_size"], n_positions=m["seq_length"],
            resid_pdrop=p_hidden, embd_pdrop=p_hidden, attn_pdrop=m.get("attention_dropout", 0.1),
            tie_word_embeddings=m.get("tied_embeddings", True), attn_implementation=attn)
        model = transformers.GPT2LMHeadModel(cfg)
    if recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def measure(path: Path, iters: int, device: str) -> dict[str, Any]:
    """Build, warm up and time one job in this process (the child)."""
    import torch
    import yaml

    job = yaml.safe_load(path.read_text())
    problem = check_single_gpu(job)
    if problem:
        return {"status": "error", "error": problem}
    m, t = job["model"], job.get("training") or {}
    stack = stack_of(path, job)
    mb = t.get("micro_batch_size", 1)
    steps = t["global_batch_size"] // mb
    dtype = torch.float16 if t.get("precision", "bf16") == "fp16" else torch.bfloat16
    flash, recompute = bool(t.get("flash_attention", False)), t.get("recompute", "none") == "full"
    cuda = device == "cuda"
    info: dict[str, Any] = {"stack": stack, "torch": torch.__version__, "python": sys.version.split()[0],
                            "device_name": torch.cuda.get_device_name() if cuda else "cpu"}
    where = "building the model"
    try:
        torch.manual_seed(0)
        hf = stack != "mgpt"
        if hf:
            import transformers

            info["transformers"] = transformers.__version__
        with torch.device(device):  # weights created on the GPU: no host-side init of billions
            model = build_hf(stack, m, flash, recompute) if hf else build_mgpt(m, flash, recompute)
        model = model.to(device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
        scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)
        tokens = torch.randint(0, m["vocab_size"], (mb, m["seq_length"]), device=device)

        def step() -> None:
            for _ in range(steps):
                with torch.autocast(device, dtype=dtype):
                    loss = model(input_ids=tokens, labels=tokens).loss if hf else model(tokens)
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)

        def sync() -> None:
            if cuda:
                torch.cuda.synchronize()

        where = "warm-up"
        for _ in range(2):
            step()
        sync()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        where, times = "timed iterations", []
        for _ in range(iters):
            start = time.perf_counter()
            step()
            sync()
            times.append((time.perf_counter() - start) * 1e3)
    except torch.cuda.OutOfMemoryError:
        peak = torch.cuda.max_memory_allocated() / GiB if cuda else None
        return {**info, "status": "oom", "where": where, "peak_allocated_GiB_until_oom": peak}
    return {**info, "status": "ok", "micro_batches": steps, "iteration_ms": statistics.median(times),
            "iteration_ms_min": min(times), "iteration_ms_max": max(times), "times_ms": times,
            "parameters": sum(p.numel() for p in model.parameters()),
            "peak_allocated_GiB": torch.cuda.max_memory_allocated() / GiB if cuda else None,
            "peak_reserved_GiB": torch.cuda.max_memory_reserved() / GiB if cuda else None}


def child_main(path: Path, iters: int, device: str) -> int:
    try:
        result = measure(path, iters, device)
    except Exception as exc:  # the parent records it; the next job still runs
        result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:500]}
    print(RESULT + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------- command line


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=Path, help="folder of job files (*.yaml)")
    p.add_argument("--out", type=Path, help="runs file to write (resumed when it exists)")
    p.add_argument("--iters", type=int, default=6, help="timed iterations per job (after 2 warm-ups)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu only tests the script (no memory figures; times are not a GPU's)")
    p.add_argument("--timeout-s", type=float, default=240.0, help="per job, then recorded as an error")
    p.add_argument("--budget-s", type=float, help="start no new job after this many seconds")
    p.add_argument("--retry-errors", action="store_true", help="measure again jobs that failed with an error")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.child:
        return child_main(args.child, args.iters, args.device)
    if args.jobs is None or args.out is None:
        print("error: give --jobs FOLDER and --out RUNS.csv", file=sys.stderr)
        return 2
    if not args.jobs.is_dir():
        print(f"error: --jobs {args.jobs} is not a folder of job files", file=sys.stderr)
        return 2
    if args.iters < 1:
        print(f"error: --iters {args.iters}: at least 1", file=sys.stderr)
        return 2
    if not job_files(args.jobs):
        print(f"error: no *.yaml job file in {args.jobs}", file=sys.stderr)
        return 2
    meta = measure_all(args.jobs, args.out, args.iters, args.device, args.timeout_s, args.budget_s,
                       args.retry_errors)
    errors = [job for job, r in meta["attempts"].items() if r["status"] == "error"]
    log(f"wrote {args.out} ({len(read_done(args.out))} rows)" +
        (f"; {len(errors)} job(s) failed, see {meta_path(args.out)}" if errors else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
