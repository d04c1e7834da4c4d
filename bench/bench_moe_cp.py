"""Mixture of experts and context parallelism against measured runs of others (issue 23).

Checks only, never fits (data/published/README.md, ../shared/data/modern/README.md): every number
below comes from the shipped defaults and hardware files.

1. SimuMax's B200 rows (`../shared/data/modern/simumax_b200_measured.csv`): real Megatron-LM runs
   on 8 B200 of DeepSeek-V2/V3-style MoE (EP 4-8, MLA, capacity 1 with padding) and of Llama 3
   with a2a context parallelism at 32K-128K tokens, with SimuMax's own prediction beside each:
   step time and peak allocated memory, our error and SimuMax's on the same rows. (The dense
   rows of the file are issue 22's; they are printed apart, for context.)
2. torchtitan's CP rows (`torchtitan_benchmarks.csv`, Tables 2 and 6): FSDP + float8 +
   torch.compile on 500 W 96 GB H100s, none of which this simulator models; the check is the
   one their stack cancels out of: tokens/s/GPU relative to the same table's CP 1 row as the
   sequence and CP grow together (Megatron-LM semantics, bf16, ZeRO-1 and all_gather CP stand in).
3. Published MoE pre-training runs (`data/published/`, held out; read at run time, skipped when
   absent, `--published DIR` elsewhere): tokens/s/GPU of every row this build can express
   (its GPU has a hardware file, its precision and recipe exist here -- bf16, the fp8 recipes,
   nvfp4 --, Megatron-Core without FSDP (refused with experts), the
   NVLink domain no larger than a node unless the cluster models one); the others are counted
   by reason. What a row leaves out takes the recipes' DistributedDataParallelConfig, as the
   dense rows do (bench/modern_rows.py): distributed optimizer, overlapped gradient reduction
   and parameter gather, unless the row's `other_overlaps` states otherwise.
4. Llama 3 405B's 128K-token stage (TP 8, CP 16, PP 16, DP 8 on 16,384 H100s; Llama 3 paper
   Table 4): whether it simulates, its time, memory and MFU (published MFU beside it when
   `data/published/` holds the row).

Run: PYTHONPATH=. python bench/bench_moe_cp.py [--published DIR]   (a few seconds)
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from modern_rows import precision_and_recipe as modern_precision  # noqa: E402
from modern_rows import recipe_training_settings, stated_dp_overlaps  # noqa: E402

from simulator import job_from_dict, simulate  # noqa: E402
from simulator.errors import VTrainError  # noqa: E402
from simulator.job.catalog import data_dir, hardware_names, load_model, resolve_hardware  # noqa: E402
from simulator.job.enums import GpuArchitecture, Precision  # noqa: E402
from simulator.job.specs import ClusterSpec, GiB  # noqa: E402
from vtrain_ml.planner.dimensions import uneven_split  # noqa: E402

MODERN = ROOT.parent / "shared" / "data" / "modern"
LLAMA = dict(norm="rmsnorm", use_bias=False, gated_mlp=True, position_embedding="rope",
             tied_embeddings=False, hidden_dropout=0.0, attention_dropout=0.0)


def _int(x: Any) -> int | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else int(x)


def simumax_job(r: pd.Series) -> dict[str, Any]:
    """A job of one SimuMax row: the run's truncated depth, its launcher's settings (module
    docstring of the data's README: bf16, distributed optimizer, no recompute, TE attention,
    DeepSeek rows with capacity 1 + padding and the alltoall dispatcher; `_cef` cases with TE's fused
    cross-entropy, per SimuMax's docs/strategy.md)."""
    layers = int(r.num_layers_run)
    model: dict[str, Any] = dict(
        LLAMA, name=r.model, num_layers=layers, hidden_size=int(r.hidden),
        num_attention_heads=int(r.heads), num_query_groups=int(r.kv_heads),
        ffn_hidden_size=int(r.ffn_hidden), vocab_size=int(r.vocab), seq_length=int(r.seq_len))
    if int(r.head_dim) * int(r.heads) != int(r.hidden):
        model["kv_channels"] = int(r.head_dim)
    training: dict[str, Any] = dict(global_batch_size=int(r.gbs), micro_batch_size=int(r.mbs),
                                    precision="bf16", flash_attention=True)
    if str(r.case).endswith("_cef"):  # --cross-entropy-loss-fusion --cross-entropy-fusion-impl te
        training["cross_entropy_fusion"] = "te"
    parallel: dict[str, Any] = dict(
        tp=int(r.tp), pp=int(r.pp), dp=int(r.dp), cp=int(r.cp),
        sequence_parallel=int(r.tp) > 1, distributed_optimizer=True)
    if int(r.vp) > 1:
        parallel.update(virtual_stages=int(r.vp), schedule="interleaved_1f1b")
    if int(r.cp) > 1:
        parallel["cp_comm_type"] = str(r.cp_comm_type)
    if _int(r.moe_num_experts):
        dense = _int(r.moe_dense_layers_in_run) or 0
        model.update(num_experts=int(r.moe_num_experts), moe_router_topk=int(r.moe_topk),
                     moe_ffn_hidden_size=int(r.moe_expert_ffn),
                     moe_shared_expert_intermediate_size=_int(r.moe_shared_expert_ffn_total),
                     moe_layer_freq=[0] * dense + [1] * (layers - dense))
        if _int(r.mla_kv_lora_rank):
            model.update(multi_latent_attention=True, q_lora_rank=_int(r.mla_q_lora_rank),
                         kv_lora_rank=int(r.mla_kv_lora_rank), qk_head_dim=int(r.mla_qk_head_dim),
                         qk_pos_emb_head_dim=int(r.mla_qk_pos_emb_head_dim),
                         v_head_dim=int(r.mla_v_head_dim))
        training.update(moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)
        parallel.update(ep=int(r.ep), expert_tp=_int(r.expert_tp) or 1)
    return {"model": model, "training": training, "parallel": parallel,
            "cluster": {"gpu": "b200", "num_gpus": int(r.num_gpus)}}


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:+.1%}"


def _mape(errors: list[float]) -> float:
    values = [abs(e) for e in errors if not math.isnan(e)]
    return sum(values) / len(values) if values else float("nan")


def simumax_section() -> None:
    rows = pd.read_csv(MODERN / "simumax_b200_measured.csv")
    rows = rows[rows.measured_step_ms.notna()]
    groups = {"MoE (EP, MLA)": rows[rows.moe_num_experts.notna()],
              "CP (a2a, 32K-128K)": rows[rows.cp > 1],
              "dense (context; issue 22's scope)": rows[rows.moe_num_experts.isna() & (rows.cp == 1)]}
    print("## 1. SimuMax's B200 rows: step time and peak allocated memory, error vs measured")
    for label, part in groups.items():
        print(f"\n### {label}: {len(part)} rows")
        print(f"{'case':<52}{'meas ms':>9}{'ours':>9}{'err':>8}{'SimuMax':>8}"
              f"{'meas GiB':>9}{'ours':>7}{'err':>8}{'SimuMax':>8}")
        errs: dict[str, list[float]] = {k: [] for k in ("t", "st", "m", "sm")}
        for _, r in part.iterrows():
            _simumax_row(r, errs)
        print(f"{'MAPE':<52}{'':>9}{'':>9}{_mape(errs['t']):>8.1%}{_mape(errs['st']):>8.1%}"
              f"{'':>9}{'':>7}{_mape(errs['m']):>8.1%}{_mape(errs['sm']):>8.1%}")
        better_t = _mape(errs["t"]) < _mape(errs["st"])
        better_m = _mape(errs["m"]) < _mape(errs["sm"])
        print(f"ours better than SimuMax: time {'yes' if better_t else 'NO'}, "
              f"memory {'yes' if better_m else 'NO'}")


def _simumax_row(r: pd.Series, errs: dict[str, list[float]]) -> None:
    try:
        res = simulate(job_from_dict(simumax_job(r)))
    except VTrainError as exc:
        print(f"{r.case:<52} ERROR {exc}")
        return
    ms = res.iteration_time_s * 1e3
    t_err = ms / r.measured_step_ms - 1
    st_err = r.simumax_pred_ms / r.measured_step_ms - 1
    gib = res.peak_allocated_bytes / GiB
    m_err = gib / r.measured_alloc_gib - 1 if not math.isnan(r.measured_alloc_gib) else math.nan
    sm_err = (r.simumax_pred_alloc_gib / r.measured_alloc_gib - 1
              if not math.isnan(r.measured_alloc_gib) else math.nan)
    errs["t"].append(t_err)
    errs["st"].append(st_err)
    errs["m"].append(m_err)
    errs["sm"].append(sm_err)
    print(f"{r.case[:51]:<52}{r.measured_step_ms:>9.1f}{ms:>9.1f}{_pct(t_err):>8}{_pct(st_err):>8}"
          f"{r.measured_alloc_gib:>9.1f}{gib:>7.1f}{_pct(m_err):>8}{_pct(sm_err):>8}")


def torchtitan_job(r: pd.Series) -> dict[str, Any]:
    """A stand-in job for one torchtitan CP row (see the module docstring)."""
    gpus = int(r.num_gpus)
    return {"model": dict(LLAMA, name=r.model, num_layers=int(r.layers), hidden_size=int(r.hidden),
                          num_attention_heads=int(r.heads), num_query_groups=int(r.kv_heads),
                          ffn_hidden_size=int(r.ffn_hidden), vocab_size=int(r.vocab),
                          seq_length=int(r.seq_len)),
            "training": dict(global_batch_size=int(r.local_batch_size) * int(r.fsdp),
                             micro_batch_size=int(r.local_batch_size), precision="bf16",
                             flash_attention=True, recompute="full"),
            "parallel": dict(tp=int(r.tp), pp=int(r.pp), cp=int(r.cp), cp_comm_type="all_gather",
                             distributed_optimizer=True, sequence_parallel=int(r.tp) > 1,
                             first_stage_layers=_uneven(int(r.layers), int(r.pp)),
                             last_stage_layers=_uneven(int(r.layers), int(r.pp))),
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": gpus}}


def _uneven(layers: int, pp: int) -> int | None:
    """First/last stage layers when `layers` do not split evenly (126 over 8: Llama 3's layout)."""
    if pp == 1 or layers % pp == 0:
        return None
    middle = math.ceil(layers / pp)
    rest = layers - middle * (pp - 2)
    return rest // 2 if rest % 2 == 0 else None


def torchtitan_section() -> None:
    rows = pd.read_csv(MODERN / "torchtitan_benchmarks.csv")
    cp_tables = rows[rows.table.isin(["Table 2", "Table 6"])]
    print("\n## 2. torchtitan's CP rows: tokens/s/GPU relative to the table's CP 1 row")
    print(f"{'table':<9}{'row':<16}{'seq':>8}{'meas rel':>10}{'ours rel':>10}{'err':>8}"
          f"{'ours tok/s/GPU':>16}{'meas':>8}")
    errs = []
    for table, part in cp_tables.groupby("table"):
        base_meas = base_ours = None
        for _, r in part.sort_values("cp").iterrows():
            try:
                res = simulate(job_from_dict(torchtitan_job(r)))
            except VTrainError as exc:
                print(f"{table:<9}{r.row_label:<16} ERROR {exc}")
                continue
            ours = res.tokens_per_s / int(r.num_gpus)
            if int(r.cp) == 1:
                base_meas, base_ours = r.tokens_per_s_per_gpu, ours
            if base_meas is None or base_ours is None:
                continue
            rel_m, rel_o = r.tokens_per_s_per_gpu / base_meas, ours / base_ours
            if int(r.cp) > 1:
                errs.append(rel_o / rel_m - 1)
            print(f"{table:<9}{r.row_label:<16}{int(r.seq_len):>8}{rel_m:>10.3f}{rel_o:>10.3f}"
                  f"{_pct(rel_o / rel_m - 1):>8}{ours:>16.0f}{r.tokens_per_s_per_gpu:>8.0f}")
    print(f"relative-throughput MAPE over the CP > 1 rows: {_mape(errs):.1%} ({len(errs)} rows; "
          f"absolute tokens/s/GPU not comparable: float8, torch.compile, FSDP, 500 W)")


# a published model name (letters and digits only, lower case) contains these -> our preset
PRESETS = (("deepseekv3", "deepseek-v3"), ("qwen3moe30b", "qwen3-30b-a3b"),
           ("qwen330ba3b", "qwen3-30b-a3b"), ("qwen3235ba22b", "qwen3-235b-a22b"),
           ("gptoss120b", "gpt-oss-120b"), ("gptoss20b", "gpt-oss-20b"), ("kimik2", "kimi-k2"),
           ("mixtral8x7b", "mixtral-8x7b"), ("mixtral8x22b", "mixtral-8x22b"))
GPUS = {"h100": "h100-sxm-80gb", "h200": "h200-141gb", "gb200": "gb200", "gb300": "gb300",
        "b200": "b200", "b300": "b300", "a100": "a100-80gb", "h800": "h800"}


def _preset(model: str) -> str | None:
    key = "".join(ch for ch in model.lower().split(" (")[0] if ch.isalnum())
    return next((preset for name, preset in PRESETS if name in key), None)


def _gpu(text: str) -> str | None:
    first = text.split()[0].lower()
    return GPUS.get(first)


def _precision(text: str, gpu: str) -> tuple[str, str | None] | None:
    """(training.precision, its recipe) of a published precision, as bench/modern_rows.py reads
    the dense rows (DeepSeek-V3's 1x128 / 128x128 "fine-grained" FP8 is the blockwise recipe)."""
    hopper = resolve_hardware(gpu).architecture is GpuArchitecture.HOPPER
    t = text.lower()
    if "fine-grained" in t or "1x128" in t:
        return ("fp8", "blockwise") if hopper else ("fp8", "mxfp8")
    read = modern_precision(text, hopper)
    if read is None or read[0] not in {p.value for p in Precision}:
        return None
    return read


def published_job(r: pd.Series) -> tuple[dict[str, Any] | None, str]:
    """The job of one published MoE row, or None and why this build cannot express it."""
    preset, gpu = _preset(str(r.model)), _gpu(str(r.gpu))
    if preset is None:
        return None, f"no preset for {r.model}"
    if gpu is None or gpu not in hardware_names():
        return None, f"no hardware file for {str(r.gpu).split()[0]}"
    precision = _precision(str(r.precision), gpu)
    if precision is None:
        return None, f"precision {str(r.precision).split(' (')[0][:24]} not in this build"
    if not pd.isna(r.fsdp) and float(r.fsdp) > 0:
        return None, "FSDP with experts not modelled together (refused)"
    domain = _int(r.nvlink_domain) or 0
    if domain > (_int(r.gpus_per_node) or 8) and "nvlink_domain" not in ClusterSpec.model_fields:
        return None, "NVLink domain beyond a node (NVL72) not in this build"
    if isinstance(r.cpu_offload, str) and r.cpu_offload.strip():
        return None, "activation offload not modelled"
    if _int(r.micro_batch_size) is None or _int(r.global_batch_size) is None:
        return None, "batch sizes not stated"
    text = f"{r.recipe_overrides} {r.other_overlaps} {r.model}".lower()
    helper = any(name in text for name in A2A_OVERLAP_HELPERS)  # flex dispatcher and overlap
    model: dict[str, Any] = {"preset": preset, "seq_length": int(r.seq_len)}
    if "w/o mtp" in text:
        model["mtp_num_layers"] = 0
    training: dict[str, Any] = {
        "global_batch_size": int(r.global_batch_size), "micro_batch_size": int(r.micro_batch_size),
        "precision": precision[0], "flash_attention": True, "recompute": _recompute(r.recompute),
        "moe_token_dispatcher": "flex" if helper or any(x in text for x in ("hybridep", "deepep"))
        else "alltoall",
        "moe_overlap_ep_comm": helper or "moe_a2a_overlap=true" in text}
    training.update(recipe_training_settings(str(r.source), str(r.model), str(r.recompute),
                                             str(r.recipe_overrides)))
    if precision[1] is not None and precision[0] == "fp8":
        training["fp8_recipe"] = precision[1]
    if "tokendrop" in text:
        training.update(moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True)
    tp, vp = int(r.tp), _int(r.vp) or 1
    parallel: dict[str, Any] = {"tp": tp, "pp": int(r.pp), "cp": _int(r.cp) or 1, "ep": _int(r.ep) or 1,
                                "expert_tp": _int(r.expert_tp) or 1, "sequence_parallel": tp > 1,
                                "distributed_optimizer": True, "overlap_grad_reduce": True,
                                "overlap_param_gather": True}
    parallel.update(stated_dp_overlaps(str(r.other_overlaps) if isinstance(r.other_overlaps, str) else ""))
    if vp > 1:
        parallel.update(virtual_stages=vp, schedule="interleaved_1f1b")
    cluster: dict[str, Any] = {"gpu": gpu, "num_gpus": int(r.num_gpus),
                               "gpus_per_node": _int(r.gpus_per_node) or 8}
    if domain and "nvlink_domain" in ClusterSpec.model_fields:
        cluster["nvlink_domain"] = domain
    if preset in ACCOUNTS_FOR_EMBEDDING_AND_LOSS and int(r.pp) > 1:
        split = uneven_split(load_model(preset, {k: v for k, v in model.items() if k != "preset"}),
                             int(r.pp), vp)
        if split is not None:
            parallel.update(first_stage_layers=split[0], last_stage_layers=split[1])
    if preset == "deepseek-v3" and int(r.pp) > 1:
        split = deepseek_stage_layers(int(r.pp), vp)
        if split is None:
            return None, (f"Megatron-Bridge's DeepSeek-V3 pipeline layout has no entry for "
                          f"pp={int(r.pp)} x vp={vp} (not stated; not invented)")
        first, last = split
        rest, middle = 61 - first - last, int(r.pp) - 2
        if middle and rest // middle == first:  # an even first rank: only the last is short
            parallel["last_stage_layers"] = last
        else:
            parallel.update(first_stage_layers=first, last_stage_layers=last)
    return {"model": model, "training": training, "parallel": parallel, "cluster": cluster}, ""


# Helpers of Megatron-Bridge's perf_recipes that the 26.08 rows name ("helper calls:" in
# recipe_overrides; tag v0.6.0, 51885cf): each sets moe_token_dispatcher_type="flex" with
# moe_flex_dispatcher_backend="hybridep" and comm_overlap.overlap_moe_expert_parallel_comm=True
# (Megatron's --overlap-moe-expert-parallel-comm, the moe_a2a_overlap of the older tables):
# src/megatron/bridge/perf_recipes/{qwen,deepseek,gpt_oss}/common.py.
A2A_OVERLAP_HELPERS = ("_enable_hybridep_full_iteration_mxfp8", "_enable_deepseek_full_iteration_mxfp8",
                       "_apply_gpt_oss_120b_full_iter_fp8mx_configs")

# Megatron-Bridge's Qwen3-235B-A22B recipe counts the embedding and the loss as pipeline layers
# (`account_for_embedding_in_pipeline_split` / `account_for_loss_in_pipeline_split` in
# recipes/qwen/qwen3_moe.py, qwen3_235b_a22b_pretrain_config): 94 + 2 over pp x vp virtual stages,
# the first and last rank one decoder layer short (vtrain_ml.planner.dimensions.uneven_split).
ACCOUNTS_FOR_EMBEDDING_AND_LOSS = ("qwen3-235b-a22b",)

# Megatron-Bridge's DeepSeek-V3 pipeline placement, `set_deepseek_v3_pipeline_model_parallel_layout`
# (recipes/deepseek/deepseek_v3.py, layout_map): decoder layers per virtual stage -- embedding + 4
# decoder layers, 14 x 4, then 1 decoder layer + MTP + loss for 16 virtual stages; 8, 6 x 8, 5 +
# MTP + loss for 8. A rank holds virtual stages r, r + pp, ...; the per-rank totals become
# `first_stage_layers` / `last_stage_layers` (simulator/job/partition.py spreads a rank's layers
# over its chunks itself, shorter chunks first, so the per-chunk split can differ from NVIDIA's
# while every rank's total is theirs).
_DEEPSEEK_VIRTUAL = {16: [4] + [4] * 14 + [1], 8: [8] + [8] * 6 + [5]}
_DEEPSEEK_PLAIN = {(4, 1): [16, 16, 16, 13]}


def deepseek_stage_layers(pp: int, vp: int) -> tuple[int, int] | None:
    """(first, last) rank's decoder layers of Megatron-Bridge's DeepSeek-V3 layout for (pp, vp),
    or None when the layout map has no entry."""
    if (pp, vp) in _DEEPSEEK_PLAIN:
        per_rank = _DEEPSEEK_PLAIN[(pp, vp)]
        return per_rank[0], per_rank[-1]
    virtual = _DEEPSEEK_VIRTUAL.get(pp * vp)
    if virtual is None or pp == 1:
        return None
    ranks = [sum(virtual[r::pp]) for r in range(pp)]
    return ranks[0], ranks[-1]


def _recompute(text: Any) -> str:
    t = str(text).lower()
    return "full" if "granularity=full" in t else "selective" if "core_attn" in t else "none"


def _published_rows(folder: Path) -> pd.DataFrame:
    frames = [pd.read_csv(f) for f in sorted(folder.glob("*.csv"))]
    rows = pd.concat(frames, ignore_index=True)
    moe = rows.num_experts.notna() | rows.model.map(lambda m: _preset(str(m)) is not None)
    return rows[(rows.task == "pretrain") & moe & rows.tokens_per_s_per_gpu.notna()]


def published_section(folder: Path) -> None:
    print(f"\n## 3. Published MoE pre-training runs ({folder}): tokens/s/GPU")
    if not folder.is_dir():
        print("skipped: no data/published folder in this checkout (it is merged separately); "
              "give --published DIR")
        return
    rows = _published_rows(folder)
    skipped: Counter[str] = Counter()
    errs: list[float] = []
    print(f"{'source':<10}{'release':<24}{'model':<22}{'gpu':<7}{'gpus':>5} {'layout':<22}"
          f"{'prec':<6}{'meas':>8}{'ours':>8}{'err':>8}")
    for _, r in rows.iterrows():
        job, why = published_job(r)
        if job is None:
            skipped[why] += 1
            continue
        try:
            res = simulate(job_from_dict(job))
        except VTrainError as exc:
            skipped[f"rejected: {str(exc)[:80]}"] += 1
            continue
        ours = res.tokens_per_s / int(r.num_gpus)
        err = ours / r.tokens_per_s_per_gpu - 1
        errs.append(err)
        p = job["parallel"]
        layout = f"tp{p['tp']} pp{p['pp']} ep{p['ep']} mb{job['training']['micro_batch_size']}"
        print(f"{str(r.source)[:9]:<10}{str(r.release)[-23:]:<24}{str(r.model)[:21]:<22}"
              f"{job['cluster']['gpu'][:6]:<7}{int(r.num_gpus):>5} {layout:<22}"
              f"{job['training']['precision']:<6}{r.tokens_per_s_per_gpu:>8.0f}{ours:>8.0f}"
              f"{_pct(err):>8}")
    print(f"tokens/s/GPU MAPE: {_mape(errs):.1%} over {len(errs)} rows (target 20%, goal 10%); "
          f"{sum(skipped.values())} of {len(rows)} MoE rows not expressible in this build:")
    for why, n in skipped.most_common():
        print(f"  {n:4d}  {why}")


def llama_128k_job(row: pd.Series | None) -> dict[str, Any]:
    """Llama 3 405B's long-context stage: TP 8, CP 16 (all-gather), PP 16, DP 8 on 16,384 GPUs,
    16 sequences of 131,072 tokens (Llama 3 paper Table 4, Sec. 3.3.2); 126 layers over 16
    stages with one layer fewer on the first and last (the paper's layout)."""
    gbs = int(row.global_batch_size) if row is not None and not pd.isna(row.global_batch_size) else 16
    return {"model": {"preset": "llama-3-405b", "seq_length": 131072},
            "training": {"global_batch_size": gbs, "micro_batch_size": 1, "precision": "bf16",
                         "flash_attention": True},
            "parallel": {"tp": 8, "cp": 16, "pp": 16, "dp": 8, "cp_comm_type": "all_gather",
                         "sequence_parallel": True, "distributed_optimizer": True,
                         "first_stage_layers": 7, "last_stage_layers": 7},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16384}}


def llama_section(folder: Path) -> None:
    print("\n## 4. Llama 3 405B, 128K-token stage (CP 16)")
    row = None
    reports = folder / "large_scale_training_reports.csv"
    if reports.is_file():
        table = pd.read_csv(reports)
        hits = table[table.model.str.contains("405B") & (table.cp == 16)]
        row = hits.iloc[0] if len(hits) else None
    for recompute in ("none", "selective", "full"):
        job = llama_128k_job(row)
        job["training"]["recompute"] = recompute
        try:
            res = simulate(job_from_dict(job))
        except VTrainError as exc:
            print(f"recompute {recompute}: does not simulate: {exc}")
            continue
        published = "" if row is None or pd.isna(row.mfu) else f" (published MFU {row.mfu:.0%})"
        print(f"recompute {recompute:<9}: simulates: iteration {res.iteration_time_s:.2f} s, "
              f"MFU {res.mfu:.1%}{published}, peak {res.peak_memory_bytes / GiB:.1f} GiB of "
              f"{res.memory_capacity_bytes / GiB:.0f} ({'fits' if res.fits_in_memory else 'DOES NOT FIT'}), "
              f"cp_comm {res.breakdown.get('cp_comm', 0.0):.2f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--published", type=Path, default=data_dir() / "published",
                    help="folder of the held-out published runs")
    args = ap.parse_args()
    pd.set_option("display.width", 200)
    simumax_section()
    torchtitan_section()
    published_section(args.published)
    llama_section(args.published)
    return 0


if __name__ == "__main__":
    sys.exit(main())
