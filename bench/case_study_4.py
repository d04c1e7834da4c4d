"""Case study 4: DeepSeek-V3 and Llama 3.1 405B -- which GPU, layout and precision for a budget?

Part A (always): the layouts NVIDIA (and MLPerf, Meta, DeepSeek) publish for the two models on
H100, H200, B200 and GB200 NVL72 (bench/case_study_4_rows.py selects them from the held-out
data/published/), each simulated exactly as published: iteration time, tokens/s/GPU against the
published number, MFU, peak memory, the breakdown of the iteration, cost per million tokens and
time and cost to train the real runs' token budgets (14.8T / 15.6T tokens). Prices are the
hardware files' `price_per_gpu_hour_usd` (their comments cite the source; GB200 has no public
on-demand list price and uses B200's). Checks only: nothing is tuned to the published numbers.

Part B (`--search`): the search recipes examples/case_study_4_deepseek_v3.yaml and
examples/case_study_4_llama31_405b.yaml (GPU type as a knob, a fixed GPU count, Pareto time vs
cost) through `vtrain_ml.planner`; per GPU type the fastest plan found against the published
layout on that GPU (both simulated exactly here), and the Pareto front plotted with the
published layouts marked. A recipe the planner of this build cannot read is reported in one
line (the search space's new fields are issue 25 item 1's).

Run: PYTHONPATH=. python bench/case_study_4.py [--search] [--write-jobs] [--published DIR]
"""

from __future__ import annotations

import argparse
import datetime
import math
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [p for p in (str(ROOT), str(BENCH)) if p not in sys.path]
import case_study_4_rows as rows  # noqa: E402

from simulator import job_from_dict, simulate  # noqa: E402
from simulator.errors import VTrainError  # noqa: E402
from simulator.fileio import write_text_atomic  # noqa: E402
from simulator.job.specs import GiB  # noqa: E402
from simulator.report.result import SimulationResult  # noqa: E402

JOBS = ROOT / "examples" / "case_study_4"
RECIPES = (ROOT / "examples" / "case_study_4_deepseek_v3.yaml",
           ROOT / "examples" / "case_study_4_llama31_405b.yaml")
FIGURES = {"published": ROOT / "docs" / "case_study_4_published.png",
           "pareto": ROOT / "docs" / "case_study_4_pareto.png"}
COMPUTE = ("forward", "backward", "recompute")
DAY_S = 86400.0


@dataclass(frozen=True)
class Simulated:
    """One published layout as the simulator sees it (units in the names)."""

    case: rows.Case
    result: SimulationResult

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.result.tokens_per_s / self.case.num_gpus

    @property
    def usd_per_million_tokens(self) -> float:
        return usd_per_million_tokens(self.result)

    @property
    def error(self) -> float:
        """Ours over published tokens/s/GPU - 1 (MFU ratio where only MFU is published)."""
        c = self.case
        if c.published_tokens_per_s_per_gpu:
            return self.tokens_per_s_per_gpu / c.published_tokens_per_s_per_gpu - 1
        return self.result.mfu / c.published_mfu - 1 if c.published_mfu else math.nan


def usd_per_million_tokens(result: SimulationResult) -> float:
    """Dollars per 10^6 trained tokens: one iteration's cost over its tokens."""
    tokens = result.tokens_per_s * result.iteration_time_s
    return result.cost_per_iteration_usd / tokens * 1e6


def breakdown_shares(breakdown: dict[str, float]) -> dict[str, float]:
    """The iteration's breakdown as fractions of its sum, compute (forward + backward +
    recompute) folded into one term, zero terms dropped, largest first."""
    total = sum(breakdown.values()) or 1.0
    shares = {"compute": sum(breakdown.get(k, 0.0) for k in COMPUTE) / total}
    shares.update({k: v / total for k, v in breakdown.items() if k not in COMPUTE and v > 0})
    return dict(sorted(shares.items(), key=lambda kv: -kv[1]))


def simulate_cases(cases: list[rows.Case]) -> tuple[list[Simulated], Counter[str]]:
    done: list[Simulated] = []
    skipped: Counter[str] = Counter()
    for case in cases:
        if case.job is None:
            skipped[case.skip] += 1
            continue
        try:
            done.append(Simulated(case, simulate(job_from_dict(case.job))))
        except VTrainError as exc:
            skipped[f"rejected by validation: {str(exc)[:90]}"] += 1
    return done, skipped


def _layout(job: dict[str, Any]) -> str:
    p, t = job["parallel"], job["training"]
    parts = [f"tp{p['tp']}", f"pp{p['pp']}"]
    parts += [f"vp{p['virtual_stages']}"] if p.get("virtual_stages", 1) > 1 else []
    parts += [f"{k}{p[k]}" for k in ("cp", "ep") if p.get(k, 1) > 1]
    return " ".join([*parts, f"mb{t['micro_batch_size']}", f"gbs{t['global_batch_size']}"])


def print_part_a(done: list[Simulated], skipped: Counter[str], older: Counter[str]) -> None:
    print("## Part A: published layouts, simulated exactly as published\n")
    print("| model | GPU | GPUs | precision | layout | published tok/s/GPU | ours | ours vs "
          "published | MFU | peak GiB / capacity | $/M tokens | days to train | $M to train | source |")
    print("|---|---|---:|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|")
    for s in done:
        c, r = s.case, s.result
        pub = (f"{c.published_tokens_per_s_per_gpu:.0f}" if c.published_tokens_per_s_per_gpu
               else f"MFU {c.published_mfu:.0%}" if c.published_mfu else "-")
        fits = "" if r.fits_in_memory else " OOM"
        print(f"| {c.model} | {c.gpu} | {c.num_gpus} | {c.precision} | {_layout(c.job or {})} | "
              f"{pub} | {s.tokens_per_s_per_gpu:.0f} | {s.error:+.1%} | {r.mfu:.1%} | "
              f"{r.peak_memory_bytes / GiB:.0f} / {r.memory_capacity_bytes / GiB:.0f}{fits} | "
              f"{s.usd_per_million_tokens:.2f} | {(r.time_to_train_s or 0) / DAY_S:.0f} | "
              f"{(r.cost_to_train_usd or 0) / 1e6:.1f} | {c.citation} |")
    print("\nRows not simulated (counted, never invented):")
    for why, n in (skipped + older).most_common():
        print(f"  {n:3d}  {why}")


def print_breakdowns(done: list[Simulated]) -> None:
    print("\n## Part A: where the iteration goes (share of the critical stage's iteration)\n")
    print("| model | GPU | GPUs | precision | iteration s | breakdown | busy s: first / 2nd / last stage |")
    print("|---|---|---:|---|---:|---|---|")
    for s in done:
        shares = ", ".join(f"{k} {v:.0%}" for k, v in breakdown_shares(s.result.breakdown).items()
                           if v >= 0.005)
        st = s.result.stages
        busy = " / ".join(f"{x.busy_s:.2f}" for x in (st[0], st[min(1, len(st) - 1)], st[-1]))
        print(f"| {s.case.model} | {s.case.gpu} | {s.case.num_gpus} | {s.case.precision} | "
              f"{s.result.iteration_time_s:.2f} | {shares} | {busy} |")


def job_file_text(case: rows.Case) -> str:
    """A job file of one published layout: its source cited in the header comment."""
    head = (f"# Case study 4 (docs/case_study_4.md): a published layout, as a job.\n"
            f"# Source: data/published/{case.citation}\n"
            f"# Published: {case.published_tokens_per_s_per_gpu or '-'} tokens/s/GPU"
            f"{f', MFU {case.published_mfu}' if case.published_mfu else ''}\n"
            f"# Generated by bench/case_study_4.py --write-jobs (bench/case_study_4_rows.py "
            f"says how a row becomes a job).\n"
            f"#   python -m vtrain_ml.simulate examples/case_study_4/{case.key}.yaml\n")
    return head + yaml.safe_dump(case.job, sort_keys=False)


def write_jobs(cases: list[rows.Case]) -> None:
    for case in cases:
        if case.job is not None:
            write_text_atomic(JOBS / f"{case.key}.yaml", job_file_text(case))
    print(f"\nwrote {sum(c.job is not None for c in cases)} job files to {JOBS.relative_to(ROOT)}/")


def plot_published(done: list[Simulated], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, model in zip(axes, rows.TRAIN_TOKENS, strict=True):
        for s in (s for s in done if s.case.model == model):
            r = s.result
            ax.scatter((r.time_to_train_s or 0) / DAY_S, (r.cost_to_train_usd or 0) / 1e6,
                       marker="o" if r.fits_in_memory else "x")
            ax.annotate(f"{s.case.gpu} {s.case.precision} x{s.case.num_gpus}",
                        ((r.time_to_train_s or 0) / DAY_S, (r.cost_to_train_usd or 0) / 1e6),
                        fontsize=7)
        ax.set(title=f"{model}: published layouts (x: OOM by our model)", xscale="log",
               xlabel="days to train (simulated)", ylabel="$M to train (simulated)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"\nplot: {path.relative_to(ROOT)}")


def provenance() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                capture_output=True, check=False).stdout.strip()
    except OSError:
        commit = "unknown"
    return f"{datetime.date.today().isoformat()}, commit {commit or 'unknown'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--published", type=Path, default=rows.PUBLISHED, help="held-out published runs")
    ap.add_argument("--search", action="store_true", help="also run Part B (the two search recipes)")
    ap.add_argument("--write-jobs", action="store_true", help="(re)write examples/case_study_4/*.yaml")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNGs")
    args = ap.parse_args(argv)
    print(f"# Case study 4 ({provenance()})\n")
    table = rows.read_rows(args.published)
    if table.empty:
        print(f"no published rows under {args.published}: Part A needs data/published/")
        return 1
    cases, older = rows.select(table)
    done, skipped = simulate_cases(cases)
    print_part_a(done, skipped, older)
    print_breakdowns(done)
    if args.write_jobs:
        write_jobs(cases)
    if not args.no_plot:
        plot_published(done, FIGURES["published"])
    if args.search:
        import case_study_4_search

        return case_study_4_search.run(RECIPES, done, None if args.no_plot else FIGURES["pareto"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
