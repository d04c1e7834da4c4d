"""Measure real training iterations on one GPU for every job YAML in a folder.
For each job: build the PyTorch model its name prefix says (mgpt_, llama_, gpt2_), fp32 weights,
bf16 autocast, fused AdamW; run `gbs/mb` micro-batches forward+backward and one optimizer step;
2 warm-up iterations, then the median of N timed iterations (CUDA-synchronized wall clock) and the
peak allocated memory. Writes CSV rows to --out. An OOM is recorded as such."""
import argparse, csv, glob, math, os, statistics, sys, time, traceback
import torch, torch.nn as nn, torch.nn.functional as F, yaml
from torch.utils.checkpoint import checkpoint


class Layer(nn.Module):
    """Megatron GPT layer structure: LN, fused QKV, attention, proj, dropout+residual, LN, MLP(GeLU)."""
    def __init__(s, h, heads, flash):
        super().__init__()
        s.h, s.n, s.flash = h, heads, flash
        s.ln1, s.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        s.qkv, s.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        s.fc1, s.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
        s.drop = nn.Dropout(0.1)

    def attn(s, x):
        b, t, _ = x.shape
        q, k, v = s.qkv(x).view(b, t, 3, s.n, s.h // s.n).permute(2, 0, 3, 1, 4)
        if s.flash:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)
        else:
            a = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(s.h // s.n))
            mask = torch.ones(t, t, device=x.device, dtype=torch.bool).triu(1)
            a = s.drop(torch.softmax(a.masked_fill(mask, float("-inf")), -1))
            y = a @ v
        return s.proj(y.transpose(1, 2).reshape(b, t, s.h))

    def forward(s, x):
        x = x + s.drop(s.attn(s.ln1(x)))
        return x + s.drop(s.fc2(F.gelu(s.fc1(s.ln2(x)))))


class GPT(nn.Module):
    def __init__(s, m, flash, recompute):
        super().__init__()
        h, v = m["hidden_size"], m["vocab_size"]
        s.wte, s.wpe = nn.Embedding(v, h), nn.Embedding(m["seq_length"], h)
        s.layers = nn.ModuleList(Layer(h, m["num_attention_heads"], flash) for _ in range(m["num_layers"]))
        s.lnf, s.recompute, s.drop = nn.LayerNorm(h), recompute, nn.Dropout(0.1)

    def forward(s, idx):
        x = s.drop(s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device)))
        for layer in s.layers:
            x = checkpoint(layer, x, use_reentrant=False) if s.recompute else layer(x)
        logits = s.lnf(x) @ s.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), idx.view(-1))


def build(kind, m, flash, recompute):
    if kind == "mgpt":
        return GPT(m, flash, recompute), None
    import transformers
    if kind == "llama":
        cfg = transformers.LlamaConfig(hidden_size=m["hidden_size"], intermediate_size=m["ffn_hidden_size"],
              num_hidden_layers=m["num_layers"], num_attention_heads=m["num_attention_heads"],
              num_key_value_heads=m["num_query_groups"], vocab_size=m["vocab_size"],
              max_position_embeddings=m["seq_length"], tie_word_embeddings=False, attn_implementation="sdpa")
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.GPT2Config(n_embd=m["hidden_size"], n_layer=m["num_layers"], n_head=m["num_attention_heads"],
              vocab_size=m["vocab_size"], n_positions=m["seq_length"], attn_implementation="sdpa")
        model = transformers.GPT2LMHeadModel(cfg)
    if recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, "hf"



def measure(path, iters, trace_path):
    import gzip, json, shutil
    name = os.path.basename(path)[:-5]
    kind = name.split("_")[0]
    j = yaml.safe_load(open(path))
    m, t = j["model"], j["training"]
    mb, ga = t["micro_batch_size"], t["global_batch_size"] // t["micro_batch_size"]
    torch.manual_seed(0)
    model, hf = build(kind, m, t["flash_attention"], t["recompute"] == "full")
    model = model.cuda().train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    x = torch.randint(0, m["vocab_size"], (mb, m["seq_length"]), device="cuda")

    def step():
        for _ in range(ga):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss if hf else model(x)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter(); step(); torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
    peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    prof_ms = None
    if trace_path:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            t0 = time.perf_counter(); step(); torch.cuda.synchronize(); prof_ms = 1e3 * (time.perf_counter() - t0)
        raw = trace_path[:-3]
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as fi, gzip.open(trace_path, "wb", compresslevel=6) as fo:
            shutil.copyfileobj(fi, fo)
        os.remove(raw)
    return dict(job=name, kind=kind, params=params, mb=mb, ga=ga, iter_ms_median=1e3 * statistics.median(times),
                iter_ms_min=1e3 * min(times), iter_ms_max=1e3 * max(times), peak_alloc_GiB=peak / 2**30,
                peak_reserved_GiB=reserved / 2**30, profiled_iteration_ms=prof_ms, status="ok")


if __name__ == "__main__":
    import json
    path, iters, trace = sys.argv[1], int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else "")
    name = os.path.basename(path)[:-5]
    try:
        r = measure(path, iters, trace)
    except torch.cuda.OutOfMemoryError:
        r = dict(job=name, status="oom", peak_reserved_GiB=torch.cuda.max_memory_reserved() / 2**30)
    print("RESULT " + json.dumps(r), flush=True)
