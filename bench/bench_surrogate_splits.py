"""Held-out accuracy of the surrogate over several group splits. Prints numbers, asserts nothing.

    python bench/bench_surrogate_splits.py --samples runs/samples/moe-cp-40k-s15 [--splits 6]
        [--n-estimators 14]

One split (bench/bench_surrogate.py's) moves by ~0.1-0.3 points of MAPE with which model shapes
it holds out, more than most single changes to the closed form; the mean over `--splits` seeds
of `surrogate.workflow.train` (each holds out its own 15% of the model shapes, trains on the rest
and scores the held-out rows) is the number a closed-form change is kept by (NOTES.md). Each
split's time MAPE, memory MAPE and Spearman are printed, then their means.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from surrogate.encoding import OutOfSpaceWarning
from surrogate.workflow import TrainConfig, train


def split_metrics(samples: Path, seed: int, n_estimators: int) -> dict[str, Any]:
    """Held-out metrics of the model `train` fits on the split `seed` of `samples`."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        result = train(samples, Path(tmp) / "model", TrainConfig(seed=seed, n_estimators=n_estimators))
    return dict(result.report["test"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", required=True)
    p.add_argument("--splits", type=int, default=6)
    p.add_argument("--n-estimators", type=int, default=TrainConfig.n_estimators)
    args = p.parse_args()
    rows = [split_metrics(Path(args.samples), seed, args.n_estimators) for seed in range(args.splits)]
    for seed, m in enumerate(rows):
        print(f"split {seed}: time MAPE {m['mape']:.2%}  P95 {m['p95_ape']:.2%}  "
              f"memory MAPE {m['memory_mape']:.2%}  Spearman {m['spearman']:.4f}  (n={m['n']})")
    print(f"mean over {len(rows)} splits ({args.n_estimators} trees): "
          f"time MAPE {statistics.mean(m['mape'] for m in rows):.2%}  "
          f"memory MAPE {statistics.mean(m['memory_mape'] for m in rows):.2%}  "
          f"Spearman {statistics.mean(m['spearman'] for m in rows):.4f}")


if __name__ == "__main__":
    main()
