"""Published large training runs -> (job dict, published metric): the inputs of bench_large_runs.

Reads `data/published/` (held out: never fitted to; skipped with a line when absent) and the
Megatron-LM H100 weak-scaling table of `../shared/data/modern/` (check only). Each family's
layout comes from its publication; what a publication does not state is filled by one documented
assumption per family (`ASSUMPTIONS`), the same for every row of the family, chosen from the
publication's text or its stack's defaults, never from the published numbers. A row the
simulator cannot represent (FP8/FP4, context parallelism, MoE, FSDP-only, a "peak" number) is
returned as skipped with the reason.

Published metrics are compared as published: an iteration time when the source gives one, else
MFU (PaLM's definition, as our model FLOPs: Chowdhery et al. 2022, App. B), else throughput per
GPU in the source's own FLOP count converted to an iteration time with the source's formula
(Narayanan et al. 2021, eq. 3).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "data" / "published"
MODERN = ROOT.parent / "shared" / "data" / "modern"

# Published network topologies (cluster.topology), from the operators' own descriptions.
META_ROCE = {  # Llama Team 2024, Sec. 3.3.1: 400 Gbps RoCE per GPU, 16 GPUs per ToR, pods of 3,072
    # GPUs at full bisection; traffic leaving a pod through the aggregation layer 1:7
    "nic_bandwidth_Gbps": 400,
    "tiers": [{"name": "tor", "size": 16, "oversubscription": 1.0},
              {"name": "pod", "size": 3072, "oversubscription": 7.0},
              {"name": "cluster", "size": 24576, "oversubscription": 1.0}],
}
SELENE = {  # DGX A100 SuperPOD (Selene): 8 x 200 Gb/s HDR per node, rail-optimized, non-blocking
    # leaf/spine per 20-node scalable unit and a core tier (NVIDIA DGX SuperPOD reference)
    "nic_bandwidth_Gbps": 200,
    "tiers": [{"name": "leaf", "size": 160, "oversubscription": 1.0},
              {"name": "spine", "size": 1120, "oversubscription": 1.0},
              {"name": "core", "size": 4480, "oversubscription": 1.0}],
}

ASSUMPTIONS = {
    "Llama 3 405B (Meta, H100)": "Meta's Table 4 layout and Sec. 3.3.2: tp 8, pp 16, interleaved "
    "with one layer per chunk (v = 8: 'the first model chunk on the first stage has only the "
    "embedding' balances only with one-layer chunks), 7 layers on the first and last stage, "
    "micro-batch 1, no recompute, sequence parallel, flash attention, bf16, FSDP as Megatron's "
    "distributed optimizer with overlapped reduction; Meta's RoCE topology (Sec. 3.3.1)",
    "MT-NLG 530B (A100)": "Megatron-DeepSpeed, fp16, tp 8, pp 35, 1F1B, micro-batch 1, global "
    "batch 1920, full recompute (Smith et al. 2022), Selene's topology",
    "Narayanan 2021 Table 1 (A100)": "Megatron-LM 2021: fp16, full recompute; micro-batch, "
    "interleaved chunks and DDP per row from the authors' own launcher (Megatron-LM examples/"
    "academic_paper_scripts/sc21/run_table_1.sh: micro-batch 16 to 1, 5 / 5 / 3 / 1 layers per "
    "virtual stage for 76B / 145B / 310B / 530B, torch DDP (reduction overlapped) for pp = 1, "
    "Megatron's local DDP after the backward for pp > 1); throughput converted with eq. 3; "
    "Selene's topology",
    "Korthikanti 2022 (A100)": "Table 3 layouts (dp 1; 22B micro-batch 4, others 1; interleave "
    "3 for 175B/530B), fp16; baseline = full recompute, 'present work' = sequence parallel + "
    "selective recompute; Selene's topology",
    "BLOOM 176B (A100, Jean Zay)": "Megatron-DeepSpeed, bf16, tp 4, pp 12, dp 8, micro-batch 2, "
    "full recompute, 1F1B; 70 layers as DeepSpeed's uniform partition (5 on the first and last "
    "stage, 6 on the others); ALiBi and the embedding norm approximated by a GPT layer; 4 x 100 "
    "Gb/s Omni-Path per node",
    "Megatron-LM H100 weak scaling (check only)": "Megatron-Core r0.8 README: bf16, micro-batch "
    "1, no recompute, sequence parallel when tp > 1, distributed optimizer; the overlaps the "
    "table's note names (--overlap-grad-reduce --overlap-param-gather --tp-comm-overlap, and "
    "PP's, which Megatron keeps only under the interleaved schedule), so pp > 1 interleaved with "
    "one layer per virtual stage (the only chunk size that divides the 23 and 7 layers per stage "
    "of the 119B and 462B rows), GPT layer with 4h GeLU MLP and r0.8's default dropout (0.1)",
}


@dataclass(frozen=True)
class Run:
    family: str
    label: str
    job: dict[str, Any] | None  # None: skipped
    metric: str = ""  # "time_s" or "mfu"
    published: float = math.nan
    note: str = ""
    skip: str = ""
    extras: dict[str, Any] = field(default_factory=dict)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _num(row: dict[str, str], key: str) -> float | None:
    value = (row.get(key) or "").strip()
    try:
        return float(value)
    except ValueError:
        return None


def _int(row: dict[str, str], key: str) -> int | None:
    value = _num(row, key)
    return None if value is None else int(value)


def _gpt(name: str, layers: int, hidden: int, heads: int, vocab: int, seq: int) -> dict[str, Any]:
    return {"name": name, "num_layers": layers, "hidden_size": hidden,
            "num_attention_heads": heads, "vocab_size": vocab, "seq_length": seq}


# Narayanan et al. 2021 Table 1 as its authors launched it (NVIDIA/Megatron-LM
# examples/academic_paper_scripts/sc21/run_table_1.sh @ d98e8a64): (layers, hidden) ->
# (micro-batch, layers per virtual pipeline stage or None, DDP implementation). "torch" is
# PyTorch's DDP (bucketed all-reduce overlapped with the backward); "local" is Megatron's own,
# which all-reduces after the last backward.
SC21_TABLE_1: dict[tuple[int, int], tuple[int, int | None, str]] = {
    (24, 2304): (16, None, "torch"), (30, 3072): (16, None, "torch"),
    (36, 4096): (16, None, "torch"), (40, 6144): (8, None, "torch"),
    (48, 8192): (4, None, "local"), (60, 10240): (2, 5, "local"), (80, 12288): (2, 5, "local"),
    (96, 16384): (1, 3, "local"), (105, 20480): (1, 1, "local"), (128, 25600): (1, None, "local"),
}


def narayanan_eq3_flops(b: int, s: int, layers: int, h: int, vocab: int) -> float:
    """Narayanan et al. 2021, eq. 3: FLOPs per iteration with activation recomputation."""
    return 96.0 * b * s * layers * h * h * (1 + s / (6.0 * h) + vocab / (16.0 * layers * h))


def large_scale_reports(root: Path) -> list[Run]:
    runs: list[Run] = []
    for row in _rows(root / "large_scale_training_reports.csv"):
        model = row["model"]
        gpus = _int(row, "num_gpus") or 0
        if model.startswith("Llama 3 405B"):
            runs.append(_llama3(row, gpus))
        elif model.startswith("MT-NLG"):
            runs.append(_mtnlg(row, gpus))
        elif model.startswith("BLOOM"):
            runs.append(_bloom(row, gpus))
        else:
            runs.append(Run("other", f"{model} on {gpus}", None, skip=_other_skip(model)))
    return runs


def _other_skip(model: str) -> str:
    if model.startswith("OPT"):
        return "a peak ('up to') throughput with FSDP + TP, no step time"
    if model.startswith("DeepSeek"):
        return "MoE with FP8 and DualPipe (not modelled here)"
    return "not modelled"


def _llama3(row: dict[str, str], gpus: int) -> Run:
    family = "Llama 3 405B (Meta, H100)"
    label = f"Llama 3 405B {gpus} GPUs seq {row['seq_len']}"
    cp = _int(row, "cp") or 1
    # the long-context stage: CP 16 with K/V all-gathered (Llama 3 paper Sec. 3.3.2)
    model: Any = ({"preset": "llama-3-405b", "seq_length": _int(row, "seq_len")} if cp > 1
                  else "llama-3-405b")
    parallel: dict[str, Any] = {"tp": 8, "pp": 16, "dp": _int(row, "dp"), "cp": cp,
                                "schedule": "interleaved_1f1b", "virtual_stages": 8,
                                "sequence_parallel": True, "distributed_optimizer": True,
                                "overlap_grad_reduce": True, "first_stage_layers": 7,
                                "last_stage_layers": 7}
    if cp > 1:
        parallel["cp_comm_type"] = "all_gather"
    job = {"model": model,
           "training": {"global_batch_size": _int(row, "global_batch_size"), "micro_batch_size": 1,
                        "precision": "bf16", "recompute": "none", "flash_attention": True},
           "parallel": parallel,
           "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": gpus, "gpus_per_node": 8,
                       "topology": META_ROCE}}
    return Run(family, label, job, "mfu", float(row["mfu"]),
               note=f"published {row['model_tflops_per_gpu']} TFLOP/s per GPU")


def _mtnlg(row: dict[str, str], gpus: int) -> Run:
    job = {"model": "mt-nlg-530b",
           "training": {"global_batch_size": 1920, "micro_batch_size": 1, "precision": "fp16",
                        "recompute": "full", "framework": "megatron-deepspeed"},
           "parallel": {"tp": 8, "pp": 35, "dp": _int(row, "dp"), "schedule": "1f1b"},
           "cluster": {"gpu": "a100-80gb", "num_gpus": gpus, "gpus_per_node": 8,
                       "inter_node_bandwidth_Gbps": 1600, "topology": SELENE}}
    return Run("MT-NLG 530B (A100)", f"MT-NLG 530B {gpus} GPUs", job, "time_s",
               float(row["step_time_s"]), note="secondary source (llm-analysis quoting the paper)")


def _bloom(row: dict[str, str], gpus: int) -> Run:
    job = {"model": {**_gpt("bloom-176b", 70, 14336, 112, 250680, 2048),
                     "position_embedding": "rope", "tied_embeddings": True},
           "training": {"global_batch_size": 2048, "micro_batch_size": 2, "precision": "bf16",
                        "recompute": "full", "framework": "megatron-deepspeed"},
           "parallel": {"tp": 4, "pp": 12, "dp": 8, "schedule": "1f1b",
                        "first_stage_layers": 5, "last_stage_layers": 5},
           "cluster": {"gpu": "a100-80gb", "num_gpus": gpus, "gpus_per_node": 8,
                       "inter_node_bandwidth_Gbps": 400,
                       "topology": {"nic_bandwidth_Gbps": 100, "nics_per_node": 4}}}
    return Run("BLOOM 176B (A100, Jean Zay)", f"BLOOM 176B {gpus} GPUs ({row['step_time_s']} s)",
               job, "time_s", float(row["step_time_s"]), note="one logged iteration")


def megatron_papers(root: Path) -> list[Run]:
    runs: list[Run] = []
    for row in _rows(root / "megatron_lm_papers_a100.csv"):
        source = row["source"]
        if "Table 1" in source:
            runs.append(_narayanan(row))
        elif "Korthikanti" in source:
            runs.append(_korthikanti(row))
        else:
            runs.append(Run("Narayanan 2021 Table 2", row["model"], None,
                            skip="ZeRO-3 / PTD-P rows without tp x pp split"))
    return runs


def _narayanan(row: dict[str, str]) -> Run:
    layers, h, heads = _int(row, "num_layers"), _int(row, "hidden"), _int(row, "heads")
    tp, pp, gpus = _int(row, "tp") or 1, _int(row, "pp") or 1, _int(row, "num_gpus") or 0
    b, s, vocab = _int(row, "global_batch_size") or 0, 2048, 51200
    assert layers and h and heads
    if (layers, h) not in SC21_TABLE_1:
        raise ValueError(f"Narayanan Table 1 row {row['model']!r} (num_layers={layers}, "
                         f"hidden={h}) is not in run_table_1.sh's cases; add its launcher settings "
                         "to SC21_TABLE_1")
    micro, chunk, ddp = SC21_TABLE_1[layers, h]
    parallel: dict[str, Any] = {"tp": tp, "pp": pp, "dp": gpus // (tp * pp),
                                "overlap_grad_reduce": ddp == "torch"}
    if chunk is not None:
        parallel |= {"schedule": "interleaved_1f1b", "virtual_stages": layers // pp // chunk}
    job = {"model": _gpt(row["model"], layers, h, heads, vocab, s),
           "training": {"global_batch_size": b, "micro_batch_size": micro, "precision": "fp16",
                        "recompute": "full"},
           "parallel": parallel,
           "cluster": {"gpu": "a100-80gb", "num_gpus": gpus, "gpus_per_node": 8,
                       "inter_node_bandwidth_Gbps": 1600, "topology": SELENE}}
    tflops = float(row["hardware_tflops_per_gpu"])
    time_s = narayanan_eq3_flops(b, s, layers, h, vocab) / (gpus * tflops * 1e12)
    return Run("Narayanan 2021 Table 1 (A100)", f"{row['model']} {gpus} GPUs", job, "time_s",
               time_s, note=f"{tflops:.0f} TFLOP/s per GPU by eq. 3")


def _korthikanti(row: dict[str, str]) -> Run:
    layers, h, heads = _int(row, "num_layers"), _int(row, "hidden"), _int(row, "heads")
    tp, pp, gpus = _int(row, "tp") or 1, _int(row, "pp") or 1, _int(row, "num_gpus") or 0
    assert layers and h and heads
    present = "selective" in row["recompute"]
    parallel: dict[str, Any] = {"tp": tp, "pp": pp, "dp": _int(row, "dp") or 1,
                                "sequence_parallel": present}
    vp = _int(row, "vp")
    if vp and vp > 1:
        parallel |= {"schedule": "interleaved_1f1b", "virtual_stages": vp}
    job = {"model": _gpt(row["model"], layers, h, heads, 51200, 2048),
           "training": {"global_batch_size": _int(row, "global_batch_size"),
                        "micro_batch_size": _int(row, "micro_batch_size") or 1,
                        "precision": "fp16", "recompute": "selective" if present else "full"},
           "parallel": parallel,
           "cluster": {"gpu": "a100-80gb", "num_gpus": gpus, "gpus_per_node": 8,
                       "inter_node_bandwidth_Gbps": 1600, "topology": SELENE}}
    kind = "SP + selective" if present else "full recompute"
    return Run("Korthikanti 2022 (A100)", f"{row['model']} {gpus} GPUs {kind}", job, "time_s",
               float(row["step_time_s"]))


def _one_layer_chunks(layers: int, pp: int) -> dict[str, Any]:
    """The weak-scaling table's pipeline schedule. Its note says PP's communication overlap was
    on ("enabled by default"), and Megatron-Core r0.8 turns `overlap_p2p_comm` off unless the
    schedule is interleaved (megatron/training/arguments.py: "Overlap P2P communication is
    disabled if not using the interleaved schedule"); interleaving needs the layers per stage
    divisible by `--num-layers-per-virtual-pipeline-stage`, which for the 119B (92 / 4 = 23) and
    462B (112 / 16 = 7) rows leaves one layer. Every row's micro-batch count is 4 pp, the
    multiple of pp that r0.8's interleaved schedule requires."""
    if pp == 1:
        return {}
    return {"schedule": "interleaved_1f1b", "virtual_stages": layers // pp}


def megatron_weak_scaling(root: Path) -> list[Run]:
    runs = []
    for row in _rows(root / "megatron_lm_h100_weak_scaling.csv"):
        tp, pp, dp = _int(row, "tp") or 1, _int(row, "pp") or 1, _int(row, "dp") or 1
        layers, h, heads = _int(row, "num_layers"), _int(row, "hidden_size"), _int(row, "attention_heads")
        assert layers and h and heads
        job = {"model": _gpt(f"gpt-{row['model_size']}", layers, h, heads, 131072, 4096),
               "training": {"global_batch_size": _int(row, "global_batch_size"),
                            "micro_batch_size": 1, "precision": "bf16", "recompute": "none",
                            "flash_attention": True},
               "parallel": {"tp": tp, "pp": pp, "dp": dp, "sequence_parallel": tp > 1,
                            "distributed_optimizer": True, "overlap_grad_reduce": True,
                            "overlap_param_gather": True, "tp_comm_overlap": tp > 1,
                            **_one_layer_chunks(layers, pp)},
               "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": tp * pp * dp, "gpus_per_node": 8}}
        mfu = float(row["tflops_per_gpu"]) / 989.4
        runs.append(Run("Megatron-LM H100 weak scaling (check only)",
                        f"{row['model_size']} {tp * pp * dp} GPUs", job, "mfu", mfu,
                        note=f"{row['tflops_per_gpu']} TFLOP/s per GPU (+/- 1%, read from an image)"))
    return runs


def published_runs(published: Path = PUBLISHED, modern: Path = MODERN) -> tuple[list[Run], list[str]]:
    """Every run of every family, and one line per missing source."""
    runs: list[Run] = []
    missing: list[str] = []
    for folder, files, reader in ((published, ("large_scale_training_reports.csv",), large_scale_reports),
                                  (published, ("megatron_lm_papers_a100.csv",), megatron_papers),
                                  (modern, ("megatron_lm_h100_weak_scaling.csv",), megatron_weak_scaling)):
        if all((folder / f).is_file() for f in files):
            runs += reader(folder)
        else:
            missing.append(f"{folder / files[0]} is absent: its rows are skipped")
    return runs, missing
