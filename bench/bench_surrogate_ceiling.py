"""How fast could the batch prediction be if a part of the feature pipeline cost nothing?

    PYTHONPATH=. python bench/bench_surrogate_ceiling.py --samples runs/samples/moe-cp-40k \
        --model runs/bench/moe40 [--rounds 4]

`Surrogate.predict` on every sample, with parts of `surrogate.encoding._fill_table` replaced in
turn by no-ops of the same shapes (the features are then wrong; only the time is read):

- *as is*;
- *no extended kernel*: the compiled extended physics (`surrogate.extended_kernel`) skipped;
- *... no lookups*: also the tables its rows read (`surrogate.extended.lookups`: ones);
- *... no dense kernel or GEMM pass*: also the dense physics (`surrogate.kernel.fill_features`,
  `surrogate.gemm_shapes.effs_table`);
- *no features at all*: `_fill_table` skipped whole (what is left: the table's columns, the
  string encoding, the out-of-space check, XGBoost's two boosters, the outputs);
- *XGBoost alone*: both boosters' `inplace_predict` on the ready feature matrix (as
  `bench_surrogate.py` times them).

Each variant is timed in one process, alternating `--rounds` times (best of 3 calls a round,
best round kept), so that the ratios are side by side on this noisy machine. The numbers bound
what any rewrite of a part can buy: a variant's rate is the most that making the parts it skips
free would give. Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import surrogate.encoding as encoding
from surrogate.dataset import read_samples
from surrogate.encoding import OutOfSpaceWarning, feature_matrix
from surrogate.features import JOB_COLUMNS
from surrogate.model import Surrogate
from surrogate.slots import LOOKUPS


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _ones_lookups(columns: Any, fields: np.ndarray, *args: Any) -> np.ndarray:
    return np.ones((len(LOOKUPS), fields.shape[1]))


VARIANTS: dict[str, dict[str, Callable[..., Any]]] = {
    "as is": {},
    "no extended kernel": {"extended_kernel": _noop},
    "no extended kernel, no lookups": {"extended_kernel": _noop, "lookups": _ones_lookups},
    "... no dense kernel or GEMM pass": {"extended_kernel": _noop, "lookups": _ones_lookups,
                                         "fill_features": _noop, "effs_table": _noop},
    "no features at all": {"_fill_table": _noop},
}


def measure(model: Surrogate, df: Any, rounds: int) -> dict[str, tuple[float, float]]:
    """variant -> (best wall s, best process CPU s) of one `predict(df)`."""
    originals = {name: getattr(encoding, name) for patch in VARIANTS.values() for name in patch}
    best = {name: (float("inf"), float("inf")) for name in (*VARIANTS, "XGBoost alone")}
    _, x = feature_matrix({c: df[c].to_numpy() for c in JOB_COLUMNS}, model.hardware_)
    boosters = list(model.boosters_.values())
    try:
        for _ in range(rounds):
            for name, patch in VARIANTS.items():
                for attr, value in originals.items():
                    setattr(encoding, attr, value)
                for attr, value in patch.items():
                    setattr(encoding, attr, value)
                model.predict(df)  # warm-up
                for _ in range(3):
                    wall, cpu = time.perf_counter(), time.process_time()
                    model.predict(df)
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
            for _ in range(3):
                wall, cpu = time.perf_counter(), time.process_time()
                for booster in boosters:
                    booster.inplace_predict(x, validate_features=False)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                best["XGBoost alone"] = (min(best["XGBoost alone"][0], wall),
                                         min(best["XGBoost alone"][1], cpu))
    finally:
        for attr, value in originals.items():
            setattr(encoding, attr, value)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    model = Surrogate.load(args.model)
    df = read_samples(args.samples)[list(JOB_COLUMNS)]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", OutOfSpaceWarning)
        warnings.simplefilter("ignore", RuntimeWarning)  # the no-ops' wrong numbers (threads too)
        best = measure(model, df, args.rounds)
    base_wall = best["as is"][0]
    print(f"{len(df):,} rows of {args.samples}, model {args.model}; best of {args.rounds} rounds x 3 calls")
    print(f"{'variant':36s} {'predictions/s':>14s} {'vs as is':>9s} {'CPU s/100k':>11s}")
    for name, (wall, cpu) in best.items():
        print(f"{name:36s} {len(df) / wall:>14,.0f} {base_wall / wall:>8.2f}x {cpu * 1e5 / len(df):>11.3f}")


if __name__ == "__main__":
    main()
