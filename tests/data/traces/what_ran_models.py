"""The models the shared H100 runs measured, copied verbatim from the script that ran them.

Source: ``../shared/data/traces/h100/what_ran.py`` (the team's measurement script, 2026-11-23:
classes ``Layer`` and ``GPT`` and function ``build``; only the imports are gathered here and the
argument parsing and timing loop left out). tests/profiler_tests/test_trace_fidelity.py checks
that this project's stacks run exactly the operators these models run.
"""
# ruff: noqa
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
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


def make_step(model, hf, opt, x, ga, device="cuda"):
    """what_ran.py's timed iteration (the `step` closure in `measure`), the device a parameter."""
    def step():
        for _ in range(ga):
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss if hf else model(x)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step
