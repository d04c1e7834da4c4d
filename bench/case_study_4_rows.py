"""Case study 4's published layouts: which rows of data/published, and each as a job dict.

Pure (no simulation, no printing): bench/case_study_4.py simulates and prints what this module
selects, and tests/bench_tests/test_case_study_4.py checks it.

Selection (issue 25, item 3): the pre-training rows of DeepSeek-V3 and Llama 3.1 405B in the
held-out `data/published/` CSVs (checking data, never fitted to: data/published/README.md), on
the four GPUs of the case study (H100, H200, B200, GB200 NVL72). Per (source file, model, GPU,
precision and recipe) the latest release's row is kept (ties: the fewest GPUs, nearest the
case study's budget). Rows on other GPUs (GB300, B300, H800) and rows this build cannot express
are counted with their reason, never invented.

Each row becomes a job by the mappings bench/bench_moe_cp.py (MoE rows) and bench/modern_rows.py
(dense rows) already apply to the whole published set, imported rather than copied; two things
are used here (the first lives in bench_moe_cp, which applies it to every published row):
- DeepSeek-V3's 61 layers do not divide over pipeline stages. Megatron-Bridge places them with
  `set_deepseek_v3_pipeline_model_parallel_layout` (recipes/deepseek/deepseek_v3.py, layout_map:
  per virtual stage, embedding + 4 decoder layers, 14 x 4, then 1 decoder layer + MTP + loss for
  16 virtual stages; 8, 6 x 8, 5 + MTP + loss for 8). A rank holds virtual stages r, r + pp, ...;
  the per-rank totals become `first_stage_layers` / `last_stage_layers` (simulator/job/
  partition.py spreads a rank's layers over its chunks itself, shorter chunks first, so the
  per-chunk split can differ from NVIDIA's while every rank's total is theirs).
- Llama 3.1 405B's architecture in the rows equals the `llama-3-405b` preset: the job names
  the preset, so the job files read like a user's.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PUBLISHED = ROOT / "data" / "published"
if str(BENCH) not in sys.path:  # the sibling bench scripts import each other by module name
    sys.path.insert(0, str(BENCH))
import bench_moe_cp  # noqa: E402
import modern_rows  # noqa: E402
from bench_moe_cp import deepseek_stage_layers as deepseek_stage_layers  # noqa: E402

# Token budgets of the real runs. DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv
# 2412.19437), abstract and Sec. 4.2: "pre-trained on 14.8 trillion diverse and high-quality
# tokens". Llama Team 2024, "The Llama 3 Herd of Models" (arXiv 2407.21783), Sec. 1 / 3.3: the
# flagship 405B model "on 15.6T text tokens".
TRAIN_TOKENS = {"deepseek-v3": 14.8e12, "llama-3-405b": 15.6e12}
STUDY_GPUS = ("h100-sxm-80gb", "h200-141gb", "b200", "gb200")
FILES = ("nvidia_megatron_bridge_perf_summary.csv", "mlperf_training_nvidia.csv",
         "nvidia_nemo_perf_summary.csv", "nvidia_nemo_automodel_perf_summary.csv",
         "large_scale_training_reports.csv")

@dataclass(frozen=True)
class Case:
    """One selected published row: its job (None when not expressible, with `skip` saying why)."""

    key: str  # file-safe name: model-gpu-precision-source
    source: str  # the CSV's stem
    citation: str  # release and the table row, as the CSV records them
    model: str  # our preset
    gpu: str  # our hardware file
    precision: str  # e.g. fp8/mxfp8
    num_gpus: int
    published_tokens_per_s_per_gpu: float | None
    published_mfu: float | None
    published_step_time_s: float | None
    job: dict[str, Any] | None
    skip: str = ""


def release_key(release: str) -> tuple[int, ...]:
    """'NeMo container 26.06.01' -> (26, 6, 1); 'MLPerf Training v5.1' -> (5, 1): the release
    label's version, compared as numbers (empty when the label names none, as a paper's row)."""
    match = re.search(r"(?:container |\bv)(\d+(?:\.\d+)+)", release)
    return tuple(int(x) for x in match.group(1).split(".")) if match else ()


def model_of(name: str) -> str | None:
    key = "".join(ch for ch in name.lower() if ch.isalnum())
    if "deepseekv3" in key or "deepseekv3671b" in key:
        return "deepseek-v3"
    if "405b" in key and ("llama3" in key or "llama31" in key):
        return "llama-3-405b"
    return None


def gpu_of(text: str) -> str | None:
    family = modern_rows.gpu_family(text)
    return dict(modern_rows.GPUS).get(family) if family else None


def read_rows(folder: Path = PUBLISHED) -> pd.DataFrame:
    """The pre-training rows of the two models in every CSV of `folder`, with `file` added."""
    frames = [pd.read_csv(folder / f).assign(file=Path(f).stem) for f in FILES
              if (folder / f).is_file()]
    if not frames:
        return pd.DataFrame()
    rows = pd.concat(frames, ignore_index=True)
    rows["preset"] = rows.model.map(lambda m: model_of(str(m)))
    return rows[(rows.task == "pretrain") & rows.preset.notna()].reset_index(drop=True)


def precision_label(row: pd.Series, gpu: str | None) -> str:
    """'fp8/mxfp8', 'bf16', ... as the existing mappings read the row's precision text."""
    hopper = gpu in ("h100-sxm-80gb", "h200-141gb", "h800")
    text = str(row.precision).lower()
    if "fine-grained" in text or "1x128" in text:
        return "fp8/blockwise" if hopper else "fp8/mxfp8"
    read = modern_rows.precision_and_recipe(text, hopper)
    if read is None:
        return f"unread: {text[:20]}"
    return read[0] if read[1] is None else f"{read[0]}/{read[1]}"


def _str_row(row: pd.Series) -> dict[str, str]:
    """A pandas row as csv.DictReader gives it (bench/modern_rows.py reads strings)."""
    def text(v: Any) -> str:
        if isinstance(v, float):
            return "" if pd.isna(v) else str(int(v)) if v.is_integer() else str(v)
        return str(v)
    return {k: text(v) for k, v in row.items()}


def _llama_job(row: pd.Series) -> tuple[dict[str, Any] | None, str]:
    from simulator.job.catalog import load_model

    preset = load_model("llama-3-405b")
    fields = _str_row(row)
    # Meta's own row states the layout but not the architecture: that is the paper's Table 3,
    # which is the preset (data/models/llama-3-405b.yaml)
    for column, name in (("num_layers", "num_layers"), ("hidden", "hidden_size"),
                         ("heads", "num_attention_heads"), ("kv_heads", "num_query_groups"),
                         ("ffn_hidden", "ffn_hidden_size"), ("vocab", "vocab_size")):
        fields[column] = fields[column] or str(getattr(preset, name))
    missing = [c for c in ("micro_batch_size", "global_batch_size", "tp", "pp") if not fields[c]]
    if missing:
        return None, f"{', '.join(missing)} not stated"
    job, why = modern_rows.published_job(fields)
    if job is None:
        return None, why
    same = all(job["model"][k] == getattr(preset, k) for k in
               ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups",
                "ffn_hidden_size", "vocab_size"))
    if same:  # the row's architecture is the preset's: name it (module docstring)
        job["model"] = {"preset": "llama-3-405b", "seq_length": job["model"]["seq_length"]}
    return job, ""


def _deepseek_job(row: pd.Series) -> tuple[dict[str, Any] | None, str]:
    """bench_moe_cp's job of the row; it places DeepSeek-V3's 61 layers by Megatron-Bridge's
    layout map (bench_moe_cp.deepseek_stage_layers)."""
    return bench_moe_cp.published_job(row)


def case_of(row: pd.Series) -> Case:
    """One published row as a Case (job or the reason there is none)."""
    gpu = gpu_of(str(row.gpu))
    label = precision_label(row, gpu)
    tps, mfu, step = (None if pd.isna(row[c]) else float(row[c])
                      for c in ("tokens_per_s_per_gpu", "mfu", "step_time_s"))
    skip, job = "", None
    if gpu not in STUDY_GPUS:
        skip = f"GPU outside the case study ({modern_rows.gpu_family(str(row.gpu)) or row.gpu})"
    elif tps is None and mfu is None:
        skip = "no tokens/s/GPU or MFU stated"
    else:
        job, skip = (_deepseek_job if row.preset == "deepseek-v3" else _llama_job)(row)
    if job is not None:
        job["training"]["train_tokens"] = TRAIN_TOKENS[str(row.preset)]
    key = f"{row.preset}-{gpu or 'other'}-{label.replace('/', '-')}-{row.file.split('_')[0]}"
    cite = f"{row.file}.csv: {row.release} | {row.model} | {row.gpu} | {int(row.num_gpus)} GPUs"
    return Case(key, str(row.file), cite, str(row.preset), gpu or str(row.gpu), label,
                int(row.num_gpus), tps, mfu, step, job, skip)


def select(rows: pd.DataFrame) -> tuple[list[Case], Counter[str]]:
    """The latest release's row per (source, model, GPU, precision) as Cases, and the count of
    rows set aside as older releases of a kept group."""
    cases = [(case_of(r), release_key(str(r.release)), idx) for idx, r in rows.iterrows()]
    best: dict[tuple[str, str, str, str], tuple[Case, tuple[int, ...], int]] = {}
    for case, release, idx in cases:
        group = (case.source, case.model, case.gpu, case.precision)
        held = best.get(group)
        if held is None or (release, -case.num_gpus, -idx) > (held[1], -held[0].num_gpus, -held[2]):
            best[group] = (case, release, idx)
    kept = sorted((c for c, _, _ in best.values()), key=lambda c: (c.model, c.gpu, c.precision, c.source))
    older: Counter[str] = Counter({"older release (or more GPUs) of a kept row": len(cases) - len(kept)})
    return kept, older
