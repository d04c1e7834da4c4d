"""Rows of measured runs of today's stacks -> job dicts (for bench/bench_modern.py).

Checking data only: `../shared/data/modern` (SimuMax's B200 runs, torchtitan's benchmarks) and
the held-out `data/published` (read at run time, absent until merged). Nothing here is fitted:
each row becomes a job from what the source states, and the few settings a source leaves out
take ONE stated default for all rows of that source (the stack's documented default), listed in
`ASSUMED`. A row that needs something the simulator does not model becomes a skip with its
reason (SimuMax's and torchtitan's MoE and context-parallel rows are bench/bench_moe_cp.py's;
hybrid-sharded FSDP; CPU offload; ...). The held-out published dense rows with context
parallelism are simulated here (TE's default p2p exchange).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODERN = ROOT.parent / "shared" / "data" / "modern"
PUBLISHED = ROOT / "data" / "published"

ASSUMED = {
    "simumax": "as its launchers state: Megatron-LM, bf16, distributed optimizer, no recompute, "
               "flash attention, no overlaps, TE's fused cross-entropy on the _cef cases; the model "
               "truncated to num_layers_run",
    "torchtitan": "framework torchtitan is not modelled: simulated with Megatron-Core's layer "
                  "under FSDP ZeRO-3 (optim_grads_params), float8 = TE tensorwise",
    "published": "settings the tables leave out take the Megatron perf recipes' defaults: "
                 "sequence parallelism and tp_comm_overlap when tp > 1, distributed optimizer, "
                 "overlapped gradient reduction and parameter gather (the recipes' "
                 "DistributedDataParallelConfig), no recompute unless stated; Megatron-Bridge rows "
                 "of Llama 3, DeepSeek-V3, Qwen3 and GPT-OSS a 16-bit gradient buffer "
                 "(grad_reduce_in_fp32=False, set by every performance script of those families)",
}


@dataclass
class Row:
    source: str
    label: str
    gpu_family: str
    job: dict[str, Any] | None
    measured: dict[str, float]  # time_s / tokens_per_s_per_gpu / alloc_gib / reserved_gib
    peer: dict[str, float] = field(default_factory=dict)  # SimuMax's predictions
    skip: str = ""


def llama(layers: int, hidden: int, heads: int, groups: int, ffn: int, vocab: int, seq: int
          ) -> dict[str, Any]:
    return {"name": "llama", "num_layers": layers, "hidden_size": hidden,
            "num_attention_heads": heads, "num_query_groups": groups, "ffn_hidden_size": ffn,
            "vocab_size": vocab, "seq_length": seq, "gated_mlp": True, "norm": "rmsnorm",
            "use_bias": False, "position_embedding": "rope", "tied_embeddings": False,
            "hidden_dropout": 0.0, "attention_dropout": 0.0}


def gpt(layers: int, hidden: int, heads: int, ffn: int, vocab: int, seq: int) -> dict[str, Any]:
    return {"name": "gpt", "num_layers": layers, "hidden_size": hidden,
            "num_attention_heads": heads, "ffn_hidden_size": ffn, "vocab_size": vocab,
            "seq_length": seq, "hidden_dropout": 0.0, "attention_dropout": 0.0}


def _int(x: str) -> int | None:
    try:
        return int(float(x))
    except ValueError:
        return None


def simumax() -> list[Row]:
    """SimuMax's measured B200 Megatron-LM runs: the dense ones without context parallelism."""
    rows = []
    for r in csv.DictReader((MODERN / "simumax_b200_measured.csv").open()):
        dense = not r["moe_num_experts"]
        model = llama(int(r["num_layers_run"]), int(r["hidden"]), int(r["heads"]),
                      int(r["kv_heads"]), int(r["ffn_hidden"]), int(r["vocab"]), int(r["seq_len"]))
        tp, pp, vp = int(r["tp"]), int(r["pp"]), int(r["vp"] or 1)
        job = {"model": model,
               "training": {"global_batch_size": int(r["gbs"]), "micro_batch_size": int(r["mbs"]),
                            "precision": "bf16", "recompute": "none", "flash_attention": True,
                            # `_cef`: --cross-entropy-loss-fusion --cross-entropy-fusion-impl te
                            **({"cross_entropy_fusion": "te"} if r["case"].endswith("_cef") else {})},
               "parallel": {"tp": tp, "pp": pp, "dp": int(r["dp"]), "sequence_parallel": tp > 1,
                            "distributed_optimizer": True,
                            **({"virtual_stages": vp, "schedule": "interleaved_1f1b"} if vp > 1 else {})},
               "cluster": {"gpu": "b200", "num_gpus": int(r["num_gpus"])}}
        skip = "" if dense and r["cp"] == "1" else (
            "MoE (bench/bench_moe_cp.py section 1)" if not dense
            else "context parallelism (bench/bench_moe_cp.py section 1)")
        measured = {"time_s": float(r["measured_step_ms"]) / 1e3}
        if r["measured_alloc_gib"]:
            measured["alloc_gib"] = float(r["measured_alloc_gib"])
        peer = {"time_s": float(r["simumax_pred_ms"]) / 1e3}
        if r["simumax_pred_alloc_gib"]:
            peer["alloc_gib"] = float(r["simumax_pred_alloc_gib"])
        rows.append(Row("simumax", r["case"], "B200", None if skip else job, measured, peer, skip))
    return rows


TITAN_PRECISION = {"bf16": ("bf16", None), "mxfp8": ("fp8", "mxfp8"), "mxfp8_cublas": ("fp8", "mxfp8"),
                   "float8 tensorwise": ("fp8", "tensorwise"),
                   "float8 (recipe not stated)": ("fp8", "tensorwise")}


def _titan_hardware(gpu: str) -> str | dict[str, Any] | None:
    """torchtitan's GPUs: Meta's H100s are 96 GB / 2.4 TB/s parts (a variant of the H100 file,
    peak unchanged although they run at 500 W); B200; H200."""
    if gpu.startswith("H100"):
        return "h100-96gb"
    if gpu.startswith("B200"):
        return "b200"
    if gpu.startswith("H200"):
        return "h200-141gb"
    return None


def torchtitan() -> list[Row]:
    rows = []
    for r in csv.DictReader((MODERN / "torchtitan_benchmarks.csv").open()):
        label = f"{r['table']} | {r['row_label']} | {r['model']} | {r['num_gpus']} GPUs"
        gpu = _titan_hardware(r["gpu"])
        converter = r["precision"].startswith("float8 (converter")  # torchao float8: tensorwise
        prec = TITAN_PRECISION.get(r["precision"].split(" (converter")[0].strip(),
                                   ("fp8", "tensorwise") if converter else None)
        skip = ("MoE (not compared)" if r["ep"] else
                "context parallelism (bench/bench_moe_cp.py section 2)" if r["cp"] not in ("", "1")
                else "GPU not stated" if gpu is None else f"precision {r['precision'][:30]} not a TE recipe"
                if prec is None else "")
        job = None
        if not skip:
            job = _titan_job(r, gpu, prec)
        measured = {"tokens_per_s_per_gpu": float(r["tokens_per_s_per_gpu"])}
        if r["memory_gib"]:
            measured["reserved_gib"] = float(r["memory_gib"])
        rows.append(Row("torchtitan", label, r["gpu"].split(" ")[0], job, measured, skip=skip))
    return rows


def _titan_job(r: dict[str, str], gpu: Any, prec: tuple[str, str | None]) -> dict[str, Any]:
    tp, pp, gpus = int(r["tp"] or 1), int(r["pp"] or 1), int(r["num_gpus"])
    dp = gpus // (tp * pp)
    local = int(r["local_batch_size"])
    recompute = {"full": "full", "none": "none"}.get(r["activation_checkpointing"], "selective")
    training: dict[str, Any] = {"global_batch_size": local * dp, "micro_batch_size": 1 if pp > 1 else local,
                                "precision": prec[0], "recompute": recompute, "flash_attention": True}
    if prec[1]:
        training["fp8_recipe"] = prec[1]
    model = llama(int(r["layers"]), int(r["hidden"]), int(r["heads"]), int(r["kv_heads"]),
                  int(r["ffn_hidden"]), int(r["vocab"]), int(r["seq_len"]))
    parallel = {"tp": tp, "pp": pp, "dp": dp, "sequence_parallel": tp > 1,
                "tp_comm_overlap": r["async_tp"] == "y" and tp > 1,
                "data_parallel_sharding": "optim_grads_params" if dp > 1 else "optim",
                **uneven_split(int(r["layers"]), pp, 1)}
    if pp > 1:
        parallel["schedule"] = "1f1b"
    return {"model": model, "training": training, "parallel": parallel,
            "cluster": {"gpu": gpu, "num_gpus": gpus}}


def uneven_split(layers: int, pp: int, vp: int) -> dict[str, int]:
    """Llama 3.1 405B's 126 layers on 8 or 16 stages: Megatron's recipes count the embedding
    and the loss as a layer each (`--account-for-embedding-in-pipeline-split`,
    `--account-for-loss-in-pipeline-split`): the first and last stage hold one layer fewer."""
    if pp == 1 or layers % (pp * vp) == 0 or (layers + 2) % (pp * vp):
        return {}
    per_stage = (layers + 2) // pp
    return {"first_stage_layers": per_stage - 1, "last_stage_layers": per_stage - 1}


def published(folder: Path = PUBLISHED) -> list[Row]:
    """Every dense pre-training row of data/published (empty when the folder is absent)."""
    if not folder.is_dir():
        return []
    rows = []
    for path in sorted(folder.glob("*.csv")):
        for r in csv.DictReader(path.open()):
            if r["task"] != "pretrain":
                continue
            label = f"{r['model']} | {r['gpu'][:28]} | {r['num_gpus']} GPUs | {r['release'][:20]}"
            job, skip = published_job(r)
            tps = r["tokens_per_s_per_gpu"]
            if not tps and not skip:
                job, skip = None, "no tokens/s/GPU stated"
            rows.append(Row(path.stem, label, gpu_family(r["gpu"]) or "other", job,
                            {"tokens_per_s_per_gpu": float(tps)} if tps else {}, skip=skip))
    return rows


GPUS = (("GB300", "gb300"), ("GB200", "gb200"), ("B300", "b300"), ("B200", "b200"),
        ("H800", "h800"), ("H200", "h200-141gb"), ("H100", "h100-sxm-80gb"), ("A100", "a100-80gb"))


def gpu_family(text: str) -> str | None:
    return next((k for k, _ in GPUS if k in text), None)


def precision_and_recipe(text: str, hopper: bool) -> tuple[str, str | None] | None:
    t = text.lower()
    if "nvfp4" in t:
        return "fp4", "nvfp4"
    if "mxfp8" in t or "fp8-mx" in t or "finer quantization" in t:
        return "fp8", "blockwise" if hopper else "mxfp8"
    if "tensorwise" in t or "current scaling" in t or "fp8_cs" in t or "fp8-cs" in t:
        return "fp8", "tensorwise"
    if "delayed" in t or "24.07 = te delayed" in t:
        return "fp8", "delayed"
    if "fp8" in t:
        return "fp8", None
    if "bf16" in t:
        return "bf16", None
    if "fp16" in t or "mixed precision" in t:
        return "fp16", None
    return None


def published_job(r: dict[str, str]) -> tuple[dict[str, Any] | None, str]:
    """One data/published row as a job, or why it cannot be expressed."""
    family = gpu_family(r["gpu"])
    need = ("num_layers", "hidden", "heads", "seq_len", "tp", "pp", "micro_batch_size",
            "global_batch_size", "num_gpus")
    reason = ("MoE (bench/bench_moe_cp.py)" if r["num_experts"] else
              "GPU not in the catalog" if family is None else
              "CPU offload not modelled" if r["cpu_offload"] not in ("", "None", "0") else
              "architecture not stated" if any(not r[k] for k in need) else
              "Nemotron (squared-ReLU / hybrid) not modelled" if "nemotron" in r["model"].lower() else "")
    if reason:
        return None, reason
    precision = precision_and_recipe(r["precision"], family in ("H100", "H800", "H200"))
    if precision is None:
        return None, f"precision '{r['precision'][:30]}' not understood"
    name = r["model"].lower()
    layers, hidden, heads = int(r["num_layers"]), int(r["hidden"]), int(r["heads"])
    ffn = _int(r["ffn_hidden"]) or 4 * hidden
    if "llama" in name:
        vocab = _int(r["vocab"]) or (128256 if "3" in name else 32000)
        model = llama(layers, hidden, heads, _int(r["kv_heads"]) or heads, ffn, vocab, int(r["seq_len"]))
    elif "gpt" in name:
        model = gpt(layers, hidden, heads, ffn, _int(r["vocab"]) or 50257, int(r["seq_len"]))
    else:
        return None, f"model family of '{r['model']}' not mapped"
    return _published_layout(r, model, precision, family)


def _published_layout(r: dict[str, str], model: dict[str, Any], precision: tuple[str, str | None],
                      family: str | None) -> tuple[dict[str, Any] | None, str]:
    tp, pp, vp = int(r["tp"]), int(r["pp"]), _int(r["vp"]) or 1
    cp = _int(r["cp"]) or 1  # NVIDIA's recipes: TE's default p2p exchange (cp_comm_type)
    gpus = int(r["num_gpus"])
    dp = gpus // (tp * pp * cp)
    fsdp = _int(r["fsdp"]) or 0
    if fsdp and fsdp != dp:
        return None, "hybrid-sharded FSDP (shard group < dp) not modelled"
    training: dict[str, Any] = {"global_batch_size": int(r["global_batch_size"]),
                                "micro_batch_size": int(r["micro_batch_size"]),
                                "precision": precision[0], "flash_attention": True,
                                "recompute": "full" if "full" in r["recompute"].lower() else
                                "selective" if "selective" in r["recompute"].lower() else "none"}
    training.update(recipe_training_settings(r["source"], r["model"], r["recompute"], r["recipe_overrides"]))
    if precision[1] and precision[0] == "fp8":
        training["fp8_recipe"] = precision[1]
    if "param-gather=True" in r["precision"]:
        training["fp8_param_gather"] = True
    if "DPA recipe Float8" in r["precision"] or "FP8_DPA=True" in r["precision"]:
        training["fp8_dot_product_attention"] = True
    graphs = r["cuda_graphs"].lower()
    if graphs and graphs not in ("none", "false", "[]"):
        training["cuda_graphs"] = "full_iteration" if "full_iteration" in graphs else "per_layer"
    # gradient buckets: the framework's default, Megatron-Core's (simulator.job.buckets)
    parallel: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "sequence_parallel": tp > 1,
                                "tp_comm_overlap": tp > 1, "overlap_grad_reduce": True,
                                "distributed_optimizer": not fsdp, "overlap_param_gather": not fsdp}
    parallel.update(stated_dp_overlaps(r.get("other_overlaps") or ""))
    if fsdp:
        parallel["data_parallel_sharding"] = "optim_grads_params"
    if vp > 1:
        parallel.update(virtual_stages=vp, schedule="interleaved_1f1b")
    parallel.update(uneven_split(model["num_layers"], pp, vp))
    hw = dict(GPUS)[family] if family else ""
    return {"model": model, "training": training, "parallel": parallel,
            "cluster": {"gpu": hw, "num_gpus": gpus}}, ""


_DP_OVERLAPS = {"overlap_grad_reduce": "overlap_grad_reduce", "overlap_param_gather": "overlap_param_gather"}


def stated_dp_overlaps(text: str) -> dict[str, bool]:
    """The data-parallel overlaps a row's `other_overlaps` states (MLPerf's OVERLAP_GRAD_REDUCE /
    OVERLAP_PARAM_GATHER, Megatron-Bridge's overlap_grad_reduce / overlap_param_gather), which
    override the recipe defaults. OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP (the gather started
    inside the optimizer step) is not modelled: such rows are simulated with the plain overlap."""
    out: dict[str, bool] = {}
    for name, field_name in _DP_OVERLAPS.items():
        found = set(re.findall(rf"\b{name}=(True|False)\b", text, flags=re.IGNORECASE))
        if len(found) == 1:
            out[field_name] = found.pop().lower() == "true"
    if out.get("overlap_grad_reduce") is False:
        out["overlap_param_gather"] = False  # Megatron refuses the one without the other
    return out


# What every Megatron-Bridge performance script of these model families sets and the summary tables
# never print: `cfg.mixed_precision.grad_reduce_in_fp32 = False; cfg.ddp.grad_reduce_in_fp32 =
# False` in set_llama3_common_configs, set_llama31_common_configs, set_deepseek_v3_common_configs,
# set_qwen3_common_configs and set_gpt_oss_common_configs (NVIDIA-NeMo/Megatron-Bridge
# scripts/performance/configs/{llama,llama3,llama31,deepseek,qwen,qwen3,gpt_oss}/*_llm_pretrain.py,
# read in their current and older layouts on 2026-11-27). A row that states the setting overrides it.
BRIDGE_SCRIPT_SETTINGS: dict[str, Any] = {"grad_reduce_in_fp32": False}
BRIDGE_SCRIPT_FAMILIES = ("llama3", "deepseekv3", "qwen3", "gptoss")


def bridge_script_settings(source: str, model: str) -> dict[str, Any]:
    """The settings above for a Megatron-Bridge performance-summary row of those families."""
    family = re.sub(r"[^a-z0-9]", "", model.lower())
    if source.startswith("NVIDIA-NeMo/Megatron-Bridge") and family.startswith(BRIDGE_SCRIPT_FAMILIES):
        return dict(BRIDGE_SCRIPT_SETTINGS)
    return {}


def recipe_training_settings(source: str, model: str, recompute: str, overrides: str) -> dict[str, Any]:
    """A published row's memory settings: its recipe family's script defaults, overridden by
    what the row's own columns state."""
    return {**bridge_script_settings(source, model), **recipe_memory_settings(recompute, overrides)}


_MODULES = re.compile(r"recompute_modules=\[([^\]]*)\]")
_DTYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16",
           "torch.uint8": "fp8"}


def recipe_memory_settings(recompute: str, overrides: str) -> dict[str, Any]:
    """Training fields a row's recipe columns state (never inferred): the selective recompute
    modules of the `recompute` column (Megatron-Bridge's presets set them under selective
    granularity: `set_deepseek_v3_common_configs`; an empty list recomputes nothing), and from
    `recipe_overrides` `grad_reduce_in_fp32=False` and the precision-aware optimizer's dtypes.
    A row that names several variants of one setting states none of them."""
    out: dict[str, Any] = {}
    modules = _MODULES.findall(recompute)
    if len(set(modules)) == 1 and "granularity=full" not in recompute:
        names = [m.strip().strip("'\"") for m in modules[0].split(",") if m.strip()]
        out.update(recompute="selective" if names else "none")
        if names:
            out["recompute_modules"] = names
    grad = set(re.findall(r"grad_reduce_in_fp32=(True|False)", overrides))
    if len(grad) == 1:
        out["grad_reduce_in_fp32"] = grad.pop() == "True"
    for name in ("exp_avg_dtype", "exp_avg_sq_dtype", "main_params_dtype"):
        found = set(re.findall(rf"optimizer\.{name}=<expr:(torch\.[a-z0-9]+)>", overrides))
        if len(found) == 1 and (dtype := _DTYPES.get(found.pop())):
            out[name] = dtype
    return out
