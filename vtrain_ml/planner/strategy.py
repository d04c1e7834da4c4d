"""Which way to search a space: the cheapest, from its size and the exact simulator's measured cost.

A search must never be slower than brute force. Three strategies, one study (every exact
evaluation is a trial of it, whichever runs; `--resume` continues any of them):

- **enumerate**: simulate every plan that passes the static memory bound (an exact lower bound of
  peak memory: no other plan can fit), the exact optimum by construction. Chosen when that costs
  less than screening would: few plans, or a cheap simulator.
- **screen** (`planner.screening`): the surrogate scores every plan (up to `screen_limit`; a larger
  space is screened on a random sample that large) and the best are verified exactly until none
  could still beat the exact answer. Chosen when the plans are too many, or the simulator too
  slow, to enumerate.
- **optuna**: TPE (NSGA-II for time versus cost) trials scored by the surrogate, verified
  periodically (`planner.verify`). Chosen when the space is so large that even a screened sample
  would see under 1% of it (more than 100 x `screen_limit` combinations), where an adaptive
  sampler earns its per-trial cost.

The simulator's cost is measured: seconds per exact plan from the search's first exact
evaluations (the surrogate's training sample, which enumeration would simulate too), in the
simulating thread's CPU seconds when it simulates in-process (planner.exact: a loaded machine
slows both sides alike, and the surrogate's side is constants). The
surrogate's costs cannot be measured without paying them, and are what dominates a small space:
starting it (importing XGBoost and loading the compiled feature kernel, `SURROGATE_STARTUP_S`),
fitting it (`FIT_S`, once measured: the measured refits) and scoring (`SCORE_RATE` plans a
second), measured for the focused surrogate on this project's 2-core machine. Screening's
estimate is the start-up, `REFITS` fits, `SCORE_PASSES` passes over the plans and a typical
verification (`VERIFY_ROUNDS` rounds of one batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from vtrain_ml.planner.config import SearchConfig, Strategy

SURROGATE_STARTUP_S = 2.0  # import xgboost (and the scikit-learn it imports), load the compiled
# features, first fit, on this project's machine (2026-11-27, a 200-plan fit included): 0.79-1.02 s
# in fresh processes with numba's disk cache warm, 12.5 s with it cold (the first run after an
# install or a source change compiles the kernels); 2.4 s of CPU to import when first measured.
# 1.0 s put case study 1's enumerate-or-screen edge at ~47 ms per exact plan, which a loaded
# test run crossed; 2.0 s puts it at ~68 ms and NVIDIA's Llama 3 70B space (~2.3 ms per plan)
# still screens
FIT_S = 0.3  # one focused-surrogate fit on a few hundred rows
SCORE_RATE = 300_000.0  # plans scored per second by a focused surrogate (features and trees)
SCORE_PASSES = 2  # whole-space scoring passes of a typical screening (first and confirming)
REFITS = 4  # surrogate refits of a typical screening
VERIFY_ROUNDS = 3  # verification rounds of a typical screening
OPTUNA_COVERAGE = 0.01  # a screened sample covering less of the space than this: Optuna


@dataclass(frozen=True)
class StrategyChoice:
    strategy: Strategy
    reason: str
    sampled: bool = False  # screen a random sample of `screen_limit` plans, not every one

    def to_dict(self) -> dict[str, object]:
        return {"name": self.strategy.value, "reason": self.reason, "sampled": self.sampled}


@dataclass(frozen=True)
class Costs:
    """What the choice is made from (seconds are this machine's, measured by the search)."""

    combinations: int  # the space's size
    feasible: int  # plans that pass the rules and the static memory bound (of the screened rows)
    left: int  # of those, plans without an exact result yet
    exact_s: float  # seconds per exact plan, as measured
    startup_s: float  # seconds to start the surrogate (0 once started)
    fit_s: float  # seconds per surrogate fit
    batch: int  # plans per verification round

    def enumerate_s(self) -> float:
        return self.left * self.exact_s

    def screen_s(self) -> float:
        return (self.startup_s + REFITS * self.fit_s + SCORE_PASSES * self.feasible / SCORE_RATE
                + VERIFY_ROUNDS * self.batch * self.exact_s)


def choose_strategy(config: SearchConfig, costs: Costs) -> StrategyChoice:
    """The strategy for this search and why (the sentence the search prints)."""
    limit = config.screen_limit
    sampled = costs.combinations > limit
    if config.strategy is not Strategy.AUTO:
        return StrategyChoice(config.strategy, f"asked for (strategy: {config.strategy.value})",
                              sampled and config.strategy is Strategy.SCREEN)
    if costs.combinations * OPTUNA_COVERAGE > limit:
        return StrategyChoice(Strategy.OPTUNA, (
            f"the space has {costs.combinations:,} combinations: a screened sample of {limit:,} "
            f"would see {100 * limit / costs.combinations:.2f}% of it, so TPE / NSGA-II trials "
            f"scored by the surrogate explore it adaptively"))
    scope = f"a random sample of {limit:,} of the {costs.combinations:,} combinations" if sampled \
        else f"the {costs.combinations:,} combinations"
    enumerate_s, screen_s = costs.enumerate_s(), costs.screen_s()
    numbers = (f"{costs.feasible:,} plans of {scope} pass the rules and the static memory bound; "
               f"simulating the {costs.left:,} not yet simulated takes ~{enumerate_s:.1f} s at "
               f"{1e3 * costs.exact_s:.1f} ms each, screening them with the surrogate ~{screen_s:.1f} s")
    if not sampled and enumerate_s <= screen_s:
        return StrategyChoice(Strategy.ENUMERATE, numbers + ": simulating them all is cheaper "
                                                            "and exact")
    return StrategyChoice(Strategy.SCREEN, numbers + ": screening is cheaper", sampled)


__all__ = ["FIT_S", "SURROGATE_STARTUP_S", "Costs", "StrategyChoice", "choose_strategy"]
