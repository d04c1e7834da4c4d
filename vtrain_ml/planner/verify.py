"""Periodic exact verification: the step that keeps a surrogate-driven search honest.

Every `every` trials, the `top` best candidates that are not yet verified are simulated exactly.
They are ranked by the *current* surrogate (not by the possibly stale values stored with old
trials), from a pool of every candidate the study has seen plus, repeated a few steps, the
one-knob neighbours of the best of them: a cheap hill-climb on the surrogate, which keeps a
sampler that re-proposes one region from hiding a better plan a few steps away. Their exact results are added
to the study as trials of their own (the sampler learns from them), become training rows of the
surrogate, and the surrogate is refit.

For time versus cost (Pareto), candidates of one non-dominated front are picked in order of
crowding distance (NSGA-II's, Deb et al. 2002: the most isolated first, the extremes always), so
that a round spreads along the whole front instead of crowding its fast end; `refine_front`
then walks the neighbours of the exact front until no unverified neighbour is predicted to join
it. With `patience`, the search stops once the best exact answer (the exact front, for Pareto)
has not changed for that many rounds.
"""

from __future__ import annotations

import logging

import optuna
from optuna.trial import FrozenTrial

from vtrain_ml.planner.config import Objective
from vtrain_ml.planner.context import SearchContext
from vtrain_ml.planner.evaluation import Evaluation
from vtrain_ml.planner.objective import constraint_values, objective_values
from vtrain_ml.planner.ranking import VerifyEvent, best_signature, dominates, exact_front, rank, spread_rank
from vtrain_ml.planner.space import Candidate
from vtrain_ml.planner.study import complete_trials, surrogate_trials, trial_exact

log = logging.getLogger(__name__)


class ExactVerifier:
    """Optuna callback (`study.optimize(..., callbacks=[verifier])`); `verify` also runs alone.
    Exact evaluations go through the study's `ExactStore` (claimed, so that processes sharing
    the study never simulate a plan twice)."""

    def __init__(self, ctx: SearchContext, refine_steps: int = 3) -> None:
        config = ctx.config
        self.ctx = ctx
        self.space = ctx.space
        self.scorer = ctx.scorer
        self.every = config.verify_every
        self.top = config.verify_top
        self.target_trials = config.trials
        self.refine_steps = refine_steps
        self.patience = config.patience
        self.rounds_ = 0
        self.stale_rounds_ = 0  # rounds since the best exact answer last changed
        self.stopped_early_ = False
        self._finished = 0
        self._best: object = None

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self.ctx.stop():
            study.stop()
            return
        self._finished += 1
        if self._finished % self.every:
            return
        trials = self.verify(study)
        # several processes share the trial budget: stop once the study holds enough trials
        if len(surrogate_trials(trials)) >= self.target_trials:
            study.stop()
        elif self.patience is not None and self.stale_rounds_ >= self.patience:
            self.stopped_early_ = True
            study.stop()

    def _track_best(self) -> None:
        """Count rounds in which the best exact answer did not change (for `patience`)."""
        best = best_signature(self.space, list(self.ctx.store.done.values()))
        self.stale_rounds_ = self.stale_rounds_ + 1 if best == self._best and best is not None else 0
        self._best = best

    def _simulate(self, picked: list[tuple[Candidate, Evaluation]]) -> int:
        results = self.ctx.store.evaluate([c for c, _ in picked], "exact", [p for _, p in picked])
        if self.ctx.teach():
            self.scorer.refit()
        return len(results)

    def verify(self, study: optuna.Study) -> list[FrozenTrial]:
        """One round; returns the study's complete trials as read before the round."""
        trials = complete_trials(study)
        self.ctx.store.refresh()
        verified = self._simulate(self.pick(trials))
        self.rounds_ += 1
        if self.patience is not None:
            self._track_best()
        self.ctx.hooks.verified(VerifyEvent(self.rounds_, len(surrogate_trials(trials)), verified,
                                            len(self.ctx.store.done), self.ctx.best()))
        return trials

    def pick(self, trials: list[FrozenTrial]) -> list[tuple[Candidate, Evaluation]]:
        """The `top` best candidates seen by the study that no process has simulated or is
        simulating, by the current surrogate."""
        store = self.ctx.store
        verified = set(store.done) | store.others
        seen: dict[str, Candidate] = {}
        for t in surrogate_trials(trials):
            key = t.user_attrs.get("key")
            if key in verified or key in seen or "infeasible" in t.user_attrs:
                continue
            candidate = self.space.build(t.params)
            if candidate.feasible:
                seen[candidate.key] = candidate
        candidates = list(seen.values())
        if not candidates:
            return []
        order = self._ranked(candidates)
        for _ in range(self.refine_steps):  # beam search on the surrogate from the best seen
            added = False
            for i in self._beam(candidates, order):
                for n in self.space.neighbours(candidates[i]):
                    if n.feasible and n.key not in verified and n.key not in seen:
                        seen[n.key] = n
                        candidates.append(n)
                        added = True
            previous, order = order[: self.top], self._ranked(candidates)
            if not added or order[: self.top] == previous:
                break
        order = order[: self.top]
        predicted = self.scorer.predict([candidates[i] for i in order])
        return list(zip([candidates[i] for i in order], predicted, strict=True))

    def _beam(self, candidates: list[Candidate], order: list[int]) -> list[int]:
        """The best 2 * top candidates with distinct objective values: plans that tie (layout
        variants of one model when maximizing parameters) would fill the beam with one region."""
        objective = self.space.config.objective
        predicted = self.scorer.predict(candidates)
        beam: dict[tuple[float, ...], int] = {}
        for i in order:
            beam.setdefault(objective_values(objective, predicted[i]), i)
            if len(beam) >= 2 * self.top:
                break
        return list(beam.values())

    def _ranked(self, candidates: list[Candidate]) -> list[int]:
        predicted = self.scorer.predict(candidates)
        config, capacity = self.space.config, self.space.hardware.memory_bytes
        constraints = [constraint_values(config, capacity, p) for p in predicted]
        if config.objective is Objective.PARETO:
            return spread_rank(predicted, constraints)
        return rank(config.objective, predicted, constraints)

    def refine_front(self, max_rounds: int = 10) -> int:
        """Verify unverified neighbours of the exact time-versus-cost front that the surrogate
        predicts would join it, until none is left (or `max_rounds`); returns how many."""
        config, capacity = self.space.config, self.space.hardware.memory_bytes
        added = 0
        for _ in range(max_rounds):
            if self.ctx.stop():
                break
            store = self.ctx.store
            store.refresh()
            verified = set(store.done) | store.others
            front = exact_front(self.space, list(store.done.values()))
            seen: dict[str, Candidate] = {}
            for t in front:
                for n in self.space.neighbours(self.space.build(t.params)):
                    if n.feasible and n.key not in verified:
                        seen.setdefault(n.key, n)
            candidates = list(seen.values())
            predicted = self.scorer.predict(candidates)
            exact = [objective_values(Objective.PARETO, trial_exact(t)) for t in front]
            joining = [i for i, p in enumerate(predicted)
                       if all(c <= 0 for c in constraint_values(config, capacity, p))
                       and not any(dominates(e, objective_values(Objective.PARETO, p)) for e in exact)]
            if not joining:
                break
            guesses = [predicted[i] for i in joining]
            order = spread_rank(guesses, [constraint_values(config, capacity, g) for g in guesses])
            chosen = [joining[i] for i in order[: 2 * self.top]]
            added += self._simulate([(candidates[i], predicted[i]) for i in chosen])
        return added
