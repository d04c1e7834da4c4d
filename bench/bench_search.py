"""Benchmark of `python -m vtrain_ml.search` against brute force, side by side in one run.

    .venv/bin/python bench/bench_search.py [--random 20000] [--seeds 0 1 2] [--skip-large]
    .venv/bin/python bench/bench_search.py --storage-only [--rounds 3]

1. Case study 1 (MT-NLG 530B, up to 3,360 A100s; examples/case_study_1_mtnlg.yaml): exhaustive
   exact evaluation of every valid plan (2 processes) against the search (the recipe as a user
   runs it, default journal storage): answer, exact evaluations, wall time and their ratio, the
   strategy the search chose and why; the cheapest plan and the Pareto front.
2. Case study 3 (architecture and layout together, 2.5 million combinations): the search
   against random exact sampling (2 processes, plans drawn uniformly from those that pass the
   static memory bound, in chunks): the wall time random sampling needs to first reach the
   search's answer (or its best after `--random` evaluations). That is one draw (seed 12345):
   only a handful of the ~900,000 plans reach the answer, so it also prints random sampling's
   expectation, counted exactly: every plan of the answer's architecture (the only one of its
   size: the parameters follow from the architecture) simulated, k of the N plans meeting the
   budget, N / (k + 1) evaluations on average to the first, at the draw's measured seconds per
   evaluation.
3. A published layout as `baseline:`: Llama 3 70B on 64 H100s, global batch 128, sequence 8,192,
   NVIDIA's Megatron-Bridge layout (performance summary, DGX-H100, LLAMA3_70B: TP 4, PP 8, VP 5,
   MBS 1; Megatron-Bridge docs/performance-summary.md) in FP8 current scaling, as published; the
   search's plan against the baseline by the exact simulator, the fraction of the space it
   simulated, and the exhaustive optimum for reference.
4. (--storage-only) What the study's storage costs: the case-study-1 Optuna search run side by
   side, in alternating order, on memory, SQLite, the journal file with an fsync per append and
   the journal file with batched fsync (the default); best wall time of each, as ratios to memory.
5. (--exact-only) The exact evaluations on 2 worker processes: the whole job pickled per call
   against the base job sent once per worker plus per-job deltas (the current one).
6. (also --modern-only) Published layouts of modern models at a fixed GPU count and global batch
   as `baseline:` (issue 25), with screening's optimality gap 0 and 1% (`tolerance`): Llama 3.1
   405B FP8 on 256 GB200 and on 256 GB300, DeepSeek-V3 MXFP8 on 256 GB200 (NVIDIA Megatron-Bridge
   performance summary, data/published): the search over a space around each (ep, cp, precision
   recipe, tp comm overlap, dispatcher, ...), its plan's exact time against the baseline's, the
   fraction of the space simulated, wall time.
Prints numbers; asserts nothing (wall times depend on the machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from simulator.job.specs import GiB, Job
from simulator.simulate import clear_caches
from vtrain_ml.planner import rules
from vtrain_ml.planner.config import Objective, SearchConfig, config_from_dict, load_config
from vtrain_ml.planner.evaluation import Evaluation, evaluate_exact, evaluate_exact_many, stop_workers
from vtrain_ml.planner.exhaustive import plan_order, run_exhaustive
from vtrain_ml.planner.objective import constraint_values
from vtrain_ml.planner.report import SearchReport
from vtrain_ml.planner.runner import run_search
from vtrain_ml.planner.space import SearchSpace
from vtrain_ml.planner.table import SpaceTable

ROOT = Path(__file__).resolve().parents[1]
CASE1 = ROOT / "examples" / "case_study_1_mtnlg.yaml"
CASE3 = ROOT / "examples" / "case_study_3_compute_optimal.yaml"
# NVIDIA Megatron-Bridge performance summary (docs/performance-summary.md, DGX-H100, LLAMA3_70B):
# 64 GPUs, GBS 128, MBS 1, sequence 8192, TP 4, PP 8, CP 1, VP 5, FP8-CS (per-tensor current
# scaling: our `tensorwise`; NeMo container 25.11 row of data/published, 1,602 tokens/s/GPU).
# Until 2026-11-27 it ran in bf16 (the space had no FP8 then); in bf16 the layout needs 80.09 of
# the H100's 80 GiB by the simulator, so it is simulated as published.
LLAMA3_70B: dict[str, Any] = {
    "model": "llama-3-70b", "hardware": "h100-sxm-80gb", "max_gpus": 64, "global_batch": 128, "seq": 8192,
    "precision": "fp8", "fp8_recipe": "tensorwise", "objective": "time", "verify_top": 5,
    "initial_samples": 32,
    "space": {"use_all_gpus": True, "tp": [1, 2, 4, 8], "micro_batch_size": [1, 2, 4],
              "recompute": ["none", "selective", "full"], "schedule": ["1f1b", "interleaved_1f1b"],
              "virtual_stages": [2, 4, 5], "sequence_parallel": [False, True],
              "distributed_optimizer": [False, True], "overlap_grad_reduce": [False, True],
              "flash_attention": [True]},
    "baseline": {"tp": 4, "pp": 8, "micro_batch_size": 1, "recompute": "none",
                 "pipeline": "interleaved_1f1b x5", "sequence_parallel": True,
                 "distributed_optimizer": True, "overlap_grad_reduce": True},
}

# Published layouts of modern models at a fixed GPU count and global batch (data/published/
# nvidia_megatron_bridge_perf_summary.csv, NeMo container 26.06 rows), as `baseline:`, in a space
# around them. Settings the table leaves out take the perf recipes' defaults, as
# bench/modern_rows.py assumes them: sequence parallelism and tp comm overlap when tp > 1, the
# distributed optimizer, overlapped gradient reduction, no recompute unless stated; the layers
# split as Megatron's --account-for-embedding/loss-in-pipeline-split (126 + 2 over 16 x 4 chunks;
# DeepSeek-V3's 61 + 2 + 1 MTP over 4 x 4, the Bridge layout's count). Every Megatron-Bridge
# performance script of these families sets a 16-bit gradient buffer (`grad_reduce_in_fp32 =
# False` in set_*_common_configs; bench/modern_rows.bridge_script_settings): fixed here as a
# one-value list, baseline and plans alike.
LLAMA405_GB200: dict[str, Any] = {
    # LLAMA3.1_405B, DGX-GB200, 256 GPUs, FP8 (fp8_cs: per-tensor current scaling = tensorwise),
    # GBS 1536, MBS 1, seq 8192, TP 4, PP 16, VP 4, CP 1; 842 tokens/s/GPU
    "model": "llama-3-405b", "seq": 8192, "hardware": "gb200", "global_batch": 1536,
    "precision": "fp8", "fp8_recipe": "tensorwise", "objective": "time", "verify_top": 5,
    "initial_samples": 32,
    "space": {"num_gpus": [256], "tp": [2, 4, 8], "pp": [4, 8, 16], "cp": [1, 2, 4],
              "micro_batch_size": [1, 2], "recompute": ["none", "selective", "full"],
              "schedule": ["1f1b", "interleaved_1f1b"], "virtual_stages": [2, 4, 8],
              "precision": ["fp8/tensorwise", "fp8/mxfp8"], "sequence_parallel": [True],
              "distributed_optimizer": [True], "overlap_grad_reduce": [True],
              "tp_comm_overlap": [False, True], "flash_attention": [True],
              "account_for_embedding_and_loss": True, "grad_reduce_in_fp32": [False]},
    "baseline": {"hardware": "gb200", "num_gpus": 256, "tp": 4, "pp": 16, "cp": 1,
                 "schedule": "interleaved_1f1b", "virtual_stages": 4, "precision": "fp8/tensorwise",
                 "micro_batch_size": 1, "recompute": "none", "sequence_parallel": True,
                 "distributed_optimizer": True, "overlap_grad_reduce": True, "tp_comm_overlap": True},
}
DSV3_GB200: dict[str, Any] = {
    # DeepSeekV3, DGX-GB200, 256 GPUs, MXFP8, GBS 4096, MBS 1, seq 4096, TP 1, PP 4, VP 4, CP 1,
    # EP 64; 4969 tokens/s/GPU (dropless, balanced routing). Its preset (Megatron-Bridge
    # v0.5.0 DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V1/V2, the csv's recipe_overrides): the
    # flex (HybridEP) dispatcher with moe_a2a_overlap, selective recompute of mla_up_proj
    "model": "deepseek-v3", "hardware": "gb200", "global_batch": 4096, "precision": "fp8",
    "fp8_recipe": "mxfp8", "objective": "time", "verify_top": 5, "initial_samples": 32,
    "space": {"num_gpus": [256], "tp": [1, 2], "pp": [2, 4, 8, 16], "ep": [8, 16, 32, 64],
              "micro_batch_size": [1, 2], "recompute": ["none", "selective", "full"],
              "schedule": ["1f1b", "interleaved_1f1b"], "virtual_stages": [2, 4, 8],
              "moe_token_dispatcher": ["alltoall", "flex"], "sequence_parallel": [False, True],
              "distributed_optimizer": [True], "overlap_grad_reduce": [True], "flash_attention": [True],
              "account_for_embedding_and_loss": True, "grad_reduce_in_fp32": [False],
              "moe_overlap_ep_comm": [False, True],
              "recompute_modules": [["core_attn"], ["mla_up_proj"]]},
    "baseline": {"hardware": "gb200", "num_gpus": 256, "tp": 1, "pp": 4, "cp": 1, "ep": 64,
                 "schedule": "interleaved_1f1b", "virtual_stages": 4, "precision": "fp8/mxfp8",
                 "micro_batch_size": 1, "recompute": "selective", "recompute_modules": ["mla_up_proj"],
                 "sequence_parallel": False, "moe_token_dispatcher": "flex", "moe_overlap_ep_comm": True,
                 "distributed_optimizer": True, "overlap_grad_reduce": True},
}


def plan(report: SearchReport) -> str:
    if report.best is None:
        return "none"
    p = report.best.plan
    model = f"{p['num_layers']}L/{p['hidden_size']}h " if "num_layers" in p else ""
    return f"{model}(tp, pp, dp) = ({p['tp']}, {p['pp']}, {p['dp']}), {p['num_gpus']} GPUs"


def how(report: SearchReport) -> str:
    strategy = report.surrogate.get("strategy") or {}
    return f"strategy {strategy.get('name')}: {strategy.get('reason')}"


def search(config: SearchConfig, folder: Path, tag: str, **changes: Any) -> SearchReport:
    """The search as a user runs it: a fresh study in the default storage (a journal file), the
    simulator's memo tables empty (as in a new process; a warm process simulates plans it has
    seen several times faster, which would flatter whatever runs second)."""
    url = f"journal:///{folder / f'{tag}.journal'}"
    clear_caches()
    return run_search(config.model_copy(update={"storage": url, "study": tag, **changes}))


def exhaustive_cold(config: SearchConfig) -> SearchReport:
    """Every valid plan simulated exactly on 2 processes, memo tables empty (fresh workers)."""
    clear_caches()
    stop_workers()
    return run_exhaustive(config.model_copy(update={"n_jobs": 2}))


def case_study_1(seeds: list[int], folder: Path) -> None:
    config = load_config(CASE1)
    exhaustive = exhaustive_cold(config)
    assert exhaustive.best is not None and exhaustive.baseline is not None
    space = SearchSpace(config)
    static_ok = int(rules.feasible(SpaceTable(space)).sum())
    best_t = exhaustive.best.exact.iteration_time_s
    print("== Case study 1: MT-NLG 530B on up to 3,360 A100-80GB ==")
    print(f"space: {space.size} combinations, {exhaustive.exact_evaluations} valid plans "
          f"({static_ok} pass the static memory bound, "
          f"{sum(o.exact.fits_in_memory for o in exhaustive.evaluated)} fit after simulation)")
    print(f"exhaustive: {exhaustive.exact_evaluations} exact evaluations in {exhaustive.wall_s:.2f} s "
          f"(2 processes); optimum {best_t:.2f} s/iteration at {plan(exhaustive)}")
    base = exhaustive.baseline.exact
    print(f"baseline (8, 35, 12): {base.iteration_time_s:.2f} s/iteration, ${base.cost_usd:,.0f} "
          f"to train 270B tokens; optimum {base.iteration_time_s / best_t:.3f}x faster, "
          f"${base.cost_usd - exhaustive.best.exact.cost_usd:,.0f} cheaper")
    fitting = [o for o in exhaustive.evaluated if o.exact.fits_in_memory]
    cheapest = min(fitting, key=lambda o: o.exact.cost_usd)
    print(f"cheapest (exhaustive): ${cheapest.exact.cost_usd:,.0f}, {cheapest.exact.iteration_time_s:.1f} "
          f"s/iteration, (tp, pp, dp) = ({cheapest.plan['tp']}, {cheapest.plan['pp']}, "
          f"{cheapest.plan['dp']}); Pareto front: {len(exhaustive.pareto)} plans")
    for seed in seeds:
        found = search(config, folder, f"cs1-{seed}", seed=seed)
        assert found.best is not None
        gap = found.best.exact.iteration_time_s / best_t - 1
        print(f"search seed {seed}: best {found.best.exact.iteration_time_s:.2f} s/iteration at "
              f"{plan(found)}; "
              f"gap {100 * gap:+.2f}%; {found.exact_evaluations} exact evaluations "
              f"({100 * found.exact_evaluations / exhaustive.exact_evaluations:.0f}% of exhaustive); "
              f"wall {found.wall_s:.2f} s = {found.wall_s / exhaustive.wall_s:.2f}x exhaustive's "
              f"{exhaustive.wall_s:.2f} s (target <= 1)")
        print(f"  {how(found)}")
    for objective in (Objective.COST, Objective.PARETO):
        found = search(config, folder, f"cs1-{objective.value}", objective=objective)
        front_hit = len({str(o.plan) for o in found.pareto} & {str(o.plan) for o in exhaustive.pareto})
        cost = min((o.exact.cost_usd for o in found.pareto), default=float("nan"))
        print(f"search objective={objective.value}: cheapest found ${cost:,.0f} (exhaustive cheapest "
              f"${cheapest.exact.cost_usd:,.0f}); front of {len(found.pareto)} plans, "
              f"{front_hit}/{len(exhaustive.pareto)} of the exhaustive Pareto plans found; "
              f"{found.exact_evaluations} exact evaluations; wall {found.wall_s:.2f} s "
              f"({found.wall_s / exhaustive.wall_s:.2f}x exhaustive); "
              f"{(found.surrogate.get('strategy') or {}).get('name')}")


def random_until(config: SearchConfig, target_b: float, n: int, seed: int,
                 chunk: int = 1000) -> tuple[float, int, float, float | None]:
    """Random exact sampling of the plans that pass the static memory bound, in chunks on 2
    processes: (best parameters in billions, evaluations, wall s, wall s when the best first
    reached `target_b`, or None)."""
    clear_caches()
    start = time.perf_counter()
    space = SearchSpace(config)
    table = SpaceTable(space)
    feasible = np.flatnonzero(rules.feasible(table))
    order = np.random.default_rng(seed).choice(feasible, size=min(n, len(feasible)), replace=False)
    capacity = space.hardware.memory_bytes
    best, reached, done = float("nan"), None, 0
    for i in range(0, len(order), chunk):
        candidates = sorted((table.candidate(int(p)) for p in order[i:i + chunk]), key=plan_order)
        exact = evaluate_exact_many([c.job for c in candidates if c.job is not None], n_jobs=2)
        done += len(exact)
        ok = [e.parameters / 1e9 for e in exact
              if all(v <= 0 for v in constraint_values(config, capacity, e))]
        if ok:
            best = max(ok) if best != best else max(best, max(ok))
        if reached is None and best >= target_b:
            reached = time.perf_counter() - start
            break
    return best, done, time.perf_counter() - start, reached


def large_space(n_random: int, seeds: list[int], folder: Path) -> None:
    config = load_config(CASE3)
    space = SearchSpace(config)
    print("\n== Large space: case study 3, architecture and layout together ==")
    print(f"space: {space.size:,} combinations; 1,024 A100-80GB, 30 days, 20 tokens/parameter")
    walls, found_params, answers = [], [], []
    for seed in seeds:
        found = search(config, folder, f"cs3-{seed}", seed=seed)
        assert found.best is not None and found.best.exact.time_to_train_s is not None
        found_params.append(found.best.exact.parameters / 1e9)
        answers.append(found.best.plan)
        walls.append(found.wall_s)
        err = found.surrogate["error"]
        print(f"search seed {seed}: {found_params[-1]:.2f}B parameters at {plan(found)}, "
              f"{found.best.exact.time_to_train_s / 86400:.1f} days, "
              f"{found.best.exact.iteration_time_s:.3f} s/iteration, MFU {100 * found.best.exact.mfu:.1f}%; "
              f"{found.exact_evaluations} exact evaluations, {found.surrogate.get('predictions', 0):,} "
              f"surrogate predictions, wall {found.wall_s:.1f} s; surrogate time MAPE "
              f"{err.get('time_mape_pct', float('nan')):.2f}%")
        print(f"  {how(found)}")
    target = min(found_params)
    best, n, wall, reached = random_until(config, target - 1e-9, n_random, seed=12345)
    if reached is not None:
        print(f"random, one draw (seed 12345): reached {target:.2f}B after {n:,} exact evaluations in "
              f"{reached:.1f} s (2 processes, chunks of 1,000)")
        print("search wall / that draw's wall to the same answer = "
              + ", ".join(f"{w / reached:.2f}" for w in walls) + f" (seeds {seeds}; target <= 1)")
    else:
        print(f"random, one draw (seed 12345): best {best:.2f}B after {n:,} exact evaluations in "
              f"{wall:.1f} s, never the search's {target:.2f}B; search wall / random wall = "
              + ", ".join(f"{w / wall:.2f}" for w in walls))
    answer = answers[found_params.index(target)]  # the smallest answer's architecture
    k, total = plans_reaching(config, answer["num_layers"], answer["hidden_size"])
    expected = total / (k + 1)
    per_plan = (reached if reached is not None else wall) / max(n, 1)
    expected_s = expected * per_plan
    print(f"random's expectation: {k} of the {total:,} plans that pass the static memory bound reach "
          f"{target:.2f}B within the budget (every plan of {answer['num_layers']} layers x "
          f"{answer['hidden_size']:,} simulated): {expected:,.0f} exact evaluations on average "
          f"to the first, ~{expected_s:.0f} s at the draw's {1e3 * per_plan:.1f} ms each; "
          "search wall / expected random wall = " + ", ".join(f"{w / expected_s:.3f}" for w in walls))


def plans_reaching(config: SearchConfig, layers: int, hidden: int) -> tuple[int, int]:
    """(plans of the architecture `layers` x `hidden` that meet every constraint, plans of the
    whole space that pass the static memory bound): random sampling's odds, counted exactly."""
    table = SpaceTable(SearchSpace(config))
    feasible = np.flatnonzero(rules.feasible(table))
    same = (table.flat(table.axis("num_layers"), feasible) == layers) & \
        (table.flat(table.axis("hidden_size"), feasible) == hidden)
    jobs = [c.job for c in (table.candidate(int(p)) for p in feasible[same]) if c.job is not None]
    capacity = table.space.hardware.memory_bytes
    exact = evaluate_exact_many(jobs, n_jobs=2)
    return sum(all(v <= 0 for v in constraint_values(config, capacity, e)) for e in exact), len(feasible)


def _fit_note(ev: Any) -> str:
    """Empty for a baseline that fits; else what the simulator says it needs (the search only
    returns plans that fit, so it cannot return that one)."""
    if ev.fits_in_memory or ev.memory_required_bytes is None:
        return ""
    return (f" (DOES NOT FIT by the simulator: needs {ev.memory_required_bytes / GiB:.2f} of "
            f"{ev.memory_capacity_bytes / GiB:.2f} GiB)")


def published_baseline(folder: Path, seeds: list[int], exhaustive: bool) -> None:
    config = config_from_dict(LLAMA3_70B)
    space = SearchSpace(config)
    table = SpaceTable(space)
    valid = int(rules.valid(table).sum())
    print("\n== A published layout as baseline: Llama 3 70B on 64 H100s "
          "(Megatron-Bridge TP 4, PP 8, VP 5, FP8 current scaling) ==")
    print(f"space: {space.size:,} combinations, {valid:,} valid plans, "
          f"{int(rules.feasible(table).sum()):,} pass the static memory bound")
    for seed in seeds:
        found = search(config, folder, f"llama70-{seed}", seed=seed)
        assert found.best is not None and found.baseline is not None
        best, base = found.best.exact, found.baseline.exact
        same = found.best.plan == found.baseline.plan
        print(f"search seed {seed}: {best.iteration_time_s:.3f} s/iteration at {plan(found)} "
              f"({found.best.plan['schedule']} x{found.best.plan['virtual_stages']}, mb "
              f"{found.best.plan['micro_batch_size']}, {found.best.plan['recompute']} recompute)"
              f"{' = the baseline' if same else ''}; baseline {base.iteration_time_s:.3f} s/iteration"
              f"{_fit_note(base)}; "
              f"search / baseline = {best.iteration_time_s / base.iteration_time_s:.4f} (target <= 1"
              f"{'' if base.fits_in_memory else ' among plans that fit'}); "
              f"{found.exact_evaluations} exact evaluations = "
              f"{100 * found.exact_evaluations / valid:.1f}% of the valid plans, "
              f"{100 * found.exact_evaluations / space.size:.2f}% of the combinations "
              f"(target <= 10%); wall {found.wall_s:.1f} s")
        print(f"  {how(found)}")
    unseeded = search(config.model_copy(update={"baseline": None}), folder, "llama70-nobase")
    assert unseeded.best is not None
    print(f"search without the baseline in the study: {unseeded.best.exact.iteration_time_s:.3f} "
          f"s/iteration at {plan(unseeded)}; {unseeded.exact_evaluations} exact evaluations")
    if exhaustive:
        reference = exhaustive_cold(config)
        assert reference.best is not None
        print(f"exhaustive: optimum {reference.best.exact.iteration_time_s:.3f} s/iteration at "
              f"{plan(reference)}; "
              f"{reference.exact_evaluations:,} exact evaluations in {reference.wall_s:.1f} s")


MODERN = {"Llama 3.1 405B, 256 GB200, FP8 (TP 4, PP 16, VP 4)": LLAMA405_GB200,
          "Llama 3.1 405B, 256 GB300, FP8 (TP 4, PP 8, VP 4)": {
              **LLAMA405_GB200, "hardware": "gb300",
              "baseline": {**LLAMA405_GB200["baseline"], "hardware": "gb300", "pp": 8}},
          "DeepSeek-V3, 256 GB200, MXFP8 (TP 1, PP 4, VP 4, EP 64)": DSV3_GB200}


# screening's optimality gap (`tolerance`): 0 (the exact optimum of the screened plans) and 1%
TOLERANCES = (0.0, 0.01)


def modern_baselines(folder: Path, seeds: list[int]) -> None:
    """Issue 25's 'Done when': the search against a published layout given as `baseline:`."""
    from vtrain_ml.planner.baseline import baseline_candidate
    from vtrain_ml.planner.report import describe_plan

    for number, (title, data) in enumerate(MODERN.items()):
        config = config_from_dict({**data, "storage": "memory"})
        space = SearchSpace(config)
        table = SpaceTable(space)
        feasible = int(rules.feasible(table).sum())
        print(f"\n== A published layout as baseline: {title} ==")
        print(f"space: {space.size:,} combinations ({', '.join(k.name for k in space.searched)}), "
              f"{int(rules.valid(table).sum()):,} valid, {feasible:,} pass the static memory bound")
        candidate = baseline_candidate(space)
        assert candidate is not None and candidate.job is not None
        clear_caches()
        base = evaluate_exact(candidate.job)
        capacity = candidate.job.hardware.memory_bytes / 2**30
        fits = "fits" if base.fits_in_memory else "DOES NOT FIT by the simulator"
        print(f"baseline: {base.iteration_time_s:.3f} s/iteration, peak "
              f"{base.peak_memory_bytes / 2**30:.1f} GiB of {capacity:.0f} GiB ({fits})")
        for tolerance, seed in [(t, s) for t in TOLERANCES for s in seeds]:
            found = search(config, folder, f"modern-{number}-{seed}-{tolerance}", seed=seed,
                           tolerance=tolerance)
            if found.best is None:
                print(f"search seed {seed}: no feasible plan found ({found.exact_evaluations} exact)")
                continue
            best = found.best.exact
            print(f"search seed {seed}, optimality gap {tolerance:.0%}: {best.iteration_time_s:.3f} "
                  f"s/iteration, peak "
                  f"{best.peak_memory_bytes / 2**30:.1f} GiB: {describe_plan(found.best.plan)}")
            print(f"  search / baseline = {best.iteration_time_s / base.iteration_time_s:.4f} (target <= 1); "
                  f"{found.exact_evaluations} exact evaluations = "
                  f"{100 * found.exact_evaluations / space.size:.2f}% of the combinations, "
                  f"{100 * found.exact_evaluations / max(feasible, 1):.1f}% of the plans that pass the "
                  f"static bound (target <= 10%); wall {found.wall_s:.1f} s")
            print(f"  {how(found)}")


def storage_cost(rounds: int, folder: Path) -> None:
    """Side by side, alternating order: the same search on each storage, a fresh study each time."""
    from vtrain_ml.planner import storage

    config = load_config(CASE1).model_copy(update={"strategy": "optuna"})
    kinds = ["memory", "sqlite (previous default)", "journal, fsync per append (Optuna's file backend)",
             "journal, batched fsync (default)"]
    walls: dict[str, list[float]] = {k: [] for k in kinds}
    answers = set()
    print("== Storage cost: case study 1 search (200 trials, focused surrogate) ==")
    for r in range(rounds):
        order = kinds if r % 2 == 0 else kinds[::-1]
        for kind in order:
            url = ("memory" if kind == "memory" else
                   f"sqlite:///{folder / f'round{r}.db'}" if kind.startswith("sqlite") else
                   f"journal:///{folder / f'round{r}-{kinds.index(kind)}.journal'}")
            storage.SYNC_INTERVAL_S = 0.0 if "per append" in kind else 1.0
            began = time.perf_counter()
            found = run_search(config.model_copy(update={"storage": url}))
            walls[kind].append(time.perf_counter() - began)
            assert found.best is not None
            answers.add(round(found.best.exact.iteration_time_s, 6))
    storage.SYNC_INTERVAL_S = 1.0
    base = min(walls["memory"])
    for kind in kinds:
        print(f"{kind:<52} best {min(walls[kind]):6.1f} s  (all: "
              + ", ".join(f"{w:.1f}" for w in walls[kind]) + f")  {min(walls[kind]) / base:5.2f}x memory")
    print(f"same answer on every storage: {len(answers) == 1} ({sorted(answers)} s/iteration)")


def _per_job_pickling(jobs: list[Job]) -> list[Evaluation]:
    """The previous `evaluate_exact_many`: each job pickled whole into its call."""
    from joblib import Parallel, delayed

    return list(Parallel(n_jobs=2, batch_size=4)(delayed(evaluate_exact)(job) for job in jobs))


def exact_cost(rounds: int) -> None:
    """Side by side, alternating order, fresh loky workers per round (their memo tables empty)."""
    from joblib.externals.loky import get_reusable_executor

    config = load_config(CASE1)
    space = SearchSpace(config)
    built = (space.build(p) for p in space.enumerate())
    jobs = [c.job for c in built if c.job is not None]
    ways = {"whole job pickled per call (before)": _per_job_pickling,
            "base once per worker + deltas (now)": lambda js: evaluate_exact_many(js, n_jobs=2)}
    walls: dict[str, list[float]] = {k: [] for k in ways}
    answers: dict[str, list[Evaluation]] = {}
    print(f"== Exact evaluations: {len(jobs)} valid case-study-1 plans on 2 processes ==")
    for r in range(rounds):
        for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
            get_reusable_executor().shutdown(wait=True)  # fresh workers: cold caches for both
            stop_workers()
            began = time.perf_counter()
            answers[name] = ways[name](jobs)
            walls[name].append(time.perf_counter() - began)
    first = min(walls[next(iter(ways))])
    for name, w in walls.items():
        print(f"{name:<40} best {min(w):6.2f} s  median {statistics.median(w):6.2f} s  "
              f"({len(jobs) / min(w):.0f} evaluations/s)  {first / min(w):5.2f}x before")
    print(f"identical answers: {len(set(map(str, answers.values()))) == 1}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=20_000,
                        help="most random exact evaluations (large space)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-baseline-exhaustive", action="store_true",
                        help="do not enumerate the Llama 3 70B space for reference")
    parser.add_argument("--storage-only", action="store_true", help="only the storage-cost comparison")
    parser.add_argument("--exact-only", action="store_true", help="only the exact-evaluation comparison")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the storage / exact comparison")
    parser.add_argument("--modern-only", action="store_true",
                        help="only the published layouts of modern models as baselines (section 6)")
    args = parser.parse_args()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    if args.exact_only:
        exact_cost(args.rounds)
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.storage_only:
            storage_cost(args.rounds, Path(tmp))
            return
        if args.modern_only:
            modern_baselines(Path(tmp), args.seeds)
            return
        case_study_1(args.seeds, Path(tmp))
        if not args.skip_large:
            large_space(args.random, args.seeds, Path(tmp))
        published_baseline(Path(tmp), args.seeds, not args.skip_baseline_exhaustive)
        modern_baselines(Path(tmp), args.seeds)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
