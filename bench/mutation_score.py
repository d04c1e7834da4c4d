"""Mutation score of the modules `make mutants` mutates, per file and in total.

Reads what `mutmut run` left in mutants/ (one `<file>.meta` JSON per mutated source file, holding
each mutant's pytest exit code) and prints killed / timeout / survived / no-test counts of the
mutants that were checked. Score = (killed + timeout) / checked: a mutant that no selected test
runs counts against the score, since the suite would not notice it either.

`--sample N` instead prints the names of N mutants per file (seeded, sorted): `make mutants
MUTANTS_SAMPLE=N` checks only those, when the whole set (about 3,000 mutants, each running the
tests that cover it) would take hours on 2 cores.

Run: python bench/mutation_score.py [--of-sample N] [--sample N] [--seed S] [--root mutants]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

# mutmut's exit codes (mutmut/stats.py status_by_exit_code); None: not checked
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 36: "timeout",
          -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout"}
COLUMNS = ("killed", "timeout", "survived", "no tests", "other")


def exit_codes(meta: Path) -> dict[str, int | None]:
    return json.loads(meta.read_text())["exit_code_by_key"]


def counts(meta: Path, names: set[str] | None = None) -> Counter[str]:
    return Counter(STATUS.get(code, "other") for name, code in exit_codes(meta).items()
                   if code is not None and (names is None or name in names))


def sample(root: Path, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    names: list[str] = []
    for meta in sorted(root.rglob("*.py.meta")):
        keys = sorted(exit_codes(meta))
        names += sorted(rng.sample(keys, min(n, len(keys))))
    return names


def _score(c: Counter[str]) -> float:
    checked = sum(c.values())
    return (c["killed"] + c["timeout"]) / checked if checked else float("nan")


def report(root: Path, names: set[str] | None = None) -> None:
    total: Counter[str] = Counter()
    print(f"{'file':<40}" + "".join(f"{c:>10}" for c in COLUMNS) + f"{'score':>8}")
    for meta in sorted(root.rglob("*.py.meta")):
        c = counts(meta, names)
        if c:
            total += c
            print(f"{str(meta.relative_to(root))[:-5]:<40}" + "".join(f"{c[k]:>10}" for k in COLUMNS)
                  + f"{_score(c):>8.1%}")
    print(f"{'total':<40}" + "".join(f"{total[k]:>10}" for k in COLUMNS) + f"{_score(total):>8.1%}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="mutants")
    ap.add_argument("--sample", type=int, default=-1, help="print N mutant names per file and stop")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--of-sample", type=int, default=0, metavar="N",
                    help="score only the N-per-file sample (what MUTANTS_SAMPLE=N checked)")
    args = ap.parse_args()
    root = Path(args.root)
    if not list(root.rglob("*.py.meta")):
        sys.exit(f"no mutmut results under {root}/: run `make mutants` first")
    if args.sample >= 0:
        print(" ".join(sample(root, args.sample, args.seed) if args.sample else []))
        return
    report(root, set(sample(root, args.of_sample, args.seed)) if args.of_sample else None)


if __name__ == "__main__":
    main()
