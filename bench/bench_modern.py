"""Accuracy on measured runs of today's stacks, per source, with shipped defaults (nothing fitted).

    PYTHONPATH=. .venv/bin/python bench/bench_modern.py [--rows]

Sources (bench/modern_rows.py turns their rows into jobs and says what each leaves out):
- SimuMax's measured B200 Megatron-LM runs (`../shared/data/modern`): step time and peak
  allocated memory, ours beside SimuMax's own predictions on the same rows;
- torchtitan's published benchmarks: tokens/s/GPU and peak (reserved) memory;
- the held-out published runs in `data/published` (read at run time, skipped when absent):
  tokens/s/GPU, per source and per GPU family.
Rows that need something not modelled are counted as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import yaml
from modern_rows import ASSUMED, PUBLISHED, Row, published, simumax, torchtitan

from simulator.errors import VTrainError
from simulator.job.catalog import resolve_hardware
from simulator.job.loaders import job_from_dict
from simulator.job.specs import GiB
from simulator.simulate import simulate


def h100_96gb(folder: Path) -> str:
    """Meta's Grand Teton H100s in torchtitan's tables: 96 GB HBM2e at 2.4 TB/s (the shared
    data's README); everything else as the H100 SXM file."""
    spec = resolve_hardware("h100-sxm-80gb").model_dump(mode="json", exclude_none=True)
    spec.update(name="h100-96gb", memory_GiB=96.0, hbm_bandwidth_GBps=2400)
    path = folder / "h100-96gb.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def predict(row: Row, h100_96: str) -> dict[str, float] | str:
    """Our prediction of the row's measured quantities, or the one-line reason it failed."""
    assert row.job is not None
    job_dict = row.job
    if job_dict["cluster"]["gpu"] == "h100-96gb":
        job_dict = {**job_dict, "cluster": {**job_dict["cluster"], "gpu": h100_96}}
    try:
        job = job_from_dict(job_dict)
        result = simulate(job)
    except VTrainError as exc:
        return f"refused: {str(exc)[:120]}"
    out = {"time_s": result.iteration_time_s,
           "tokens_per_s_per_gpu": result.tokens_per_s / job.cluster.num_gpus,
           "alloc_gib": result.peak_allocated_bytes / GiB}
    out["reserved_gib"] = max(s.memory.allocator_reserved_bytes for s in result.stages) / GiB
    return out


# SimuMax's own B200 GEMM measurements (configs/system/b200_bf16_ceperm.json @ e691807a:
# "efficient_factor": 0.4878, its matmul efficiency where no shape-specific factor applies; the
# per-shape factors for these models' GEMMs lie between 0.45 and 0.65)
SIMUMAX_B200_GEMM = 0.4878


def simumax_gemms(rows: list[Row], folder: Path) -> None:
    """What the SimuMax rows give with SimuMax's own catch-all GEMM factor instead of the
    shipped default (a what-if that isolates the machine's GEMM speed from the rest of the model;
    the shipped b200 file now carries bench/fit_b200_kernels.py's fit to SimuMax's B200 kernel
    microbenchmarks, 0.52, which replaced issue 22's 0.70 extrapolated from a B300)."""
    spec = resolve_hardware("b200").model_dump(mode="json", exclude_none=True)
    spec["efficiency"]["gemm_max_efficiency"] = SIMUMAX_B200_GEMM
    spec["name"] = "b200-simumax-gemms"
    path = folder / "b200-simumax-gemms.yaml"
    path.write_text(yaml.safe_dump(spec))
    pairs = []
    for row in rows:
        if row.job is None:
            continue
        job = {**row.job, "cluster": {**row.job["cluster"], "gpu": str(path)}}
        pairs.append((simulate(job_from_dict(job)).iteration_time_s, row.measured["time_s"]))
    shipped = resolve_hardware("b200").efficiency.gemm_max_efficiency
    print(f"what-if, SimuMax rows with SimuMax's B200 GEMM efficiency ({SIMUMAX_B200_GEMM}) instead "
          f"of the shipped {shipped}: time_s {errors(pairs)}")


def errors(pairs: list[tuple[float, float]]) -> str:
    if not pairs:
        return "no rows"
    e = [p / m - 1 for p, m in pairs]
    a = [abs(x) for x in e]
    worst = max(e, key=abs)
    return (f"MAPE {100 * statistics.mean(a):5.1f}%  median {100 * statistics.median(a):5.1f}%  "
            f"worst {100 * worst:+6.1f}%  (n={len(e)}, mean signed {100 * statistics.mean(e):+.1f}%)")


def report(source: str, rows: list[Row], results: dict[int, dict[str, float] | str],
           show_rows: bool) -> None:
    done = [(r, results[id(r)]) for r in rows if r.job is not None and isinstance(results[id(r)], dict)]
    skipped = Counter(r.skip for r in rows if r.job is None)
    refused = Counter(str(results[id(r)])[:90] for r in rows if r.job is not None
                      and not isinstance(results[id(r)], dict))
    print(f"\n== {source}: {len(rows)} rows, {len(done)} simulated")
    print(f"   assumed: {ASSUMED.get(source, ASSUMED['published'])}")
    for reason, n in sorted({**skipped, **refused}.items(), key=lambda kv: -kv[1]):
        print(f"   skipped {n:>3}: {reason}")
    metrics = sorted({k for r, _ in done for k in r.measured})
    for metric in metrics:
        ours = [(p[metric], r.measured[metric]) for r, p in done if metric in r.measured]
        print(f"   {metric:<21} ours    {errors(ours)}")
        peer = [(r.peer[metric], r.measured[metric]) for r, _ in done
                if metric in r.peer and metric in r.measured]
        if peer:
            print(f"   {metric:<21} SimuMax {errors(peer)}")
    if source not in ("simumax", "torchtitan"):
        by_gpu: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for r, p in done:
            by_gpu[r.gpu_family].append((p["tokens_per_s_per_gpu"], r.measured["tokens_per_s_per_gpu"]))
        for gpu, pairs in sorted(by_gpu.items()):
            print(f"     {gpu:<6} tokens/s/GPU {errors(pairs)}")
    if show_rows:
        for r, p in done:
            cells = "  ".join(f"{k} {p[k]:.4g}/{v:.4g} ({p[k] / v - 1:+.1%})" for k, v in r.measured.items())
            print(f"     {r.label[:70]:<70} {cells}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", action="store_true", help="print every simulated row")
    parser.add_argument("--published", type=Path, default=PUBLISHED,
                        help="folder of the held-out published runs (default data/published)")
    args = parser.parse_args(argv)
    groups: dict[str, list[Row]] = {"simumax": simumax(), "torchtitan": torchtitan()}
    for row in published(args.published):
        groups.setdefault(row.source, []).append(row)
    if len(groups) == 2:
        print("data/published is absent: held-out published rows skipped")
    with tempfile.TemporaryDirectory() as folder:
        h100_96 = h100_96gb(Path(folder))
        results: dict[int, dict[str, float] | str] = {}
        for rows in groups.values():
            for row in rows:
                if row.job is not None:
                    results[id(row)] = predict(row, h100_96)
        simumax_gemms(groups["simumax"], Path(folder))
    for source, rows in groups.items():
        report(source, rows, results, args.rows)
    held_out = [(results[id(r)], r) for s, rows in groups.items() if s not in ("simumax", "torchtitan")
                for r in rows if r.job is not None and isinstance(results[id(r)], dict)]
    pairs: list[tuple[float, float]] = []
    for p, r in held_out:
        assert isinstance(p, dict)
        pairs.append((p["tokens_per_s_per_gpu"], r.measured["tokens_per_s_per_gpu"]))
    print(f"\nall held-out published rows, tokens/s/GPU: {errors(pairs)}  (target 15%, goal 8%)")
    no_cp = [(p["tokens_per_s_per_gpu"], r.measured["tokens_per_s_per_gpu"]) for p, r in held_out
             if isinstance(p, dict) and r.job is not None and r.job["parallel"].get("cp", 1) == 1]
    print(f"  of them without context parallelism (the rows issue 22 alone could express): "
          f"{errors(no_cp)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

