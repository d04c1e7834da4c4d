"""Why a search space holds no feasible plan, in sentences a user can act on.

Every plan of the space (a random sample of a space larger than `SAMPLE`) is sorted, on the
`SpaceTable`'s arrays, into one of three kinds: it breaks a layout rule of the simulator, it needs
more GPUs than the budget but is otherwise valid, or it is valid but its model states alone
overflow GPU memory. The message counts each kind with a concrete example. Whether more GPUs
would help is asked of the space itself with a larger budget -- whose pp and dp choice lists, when
derived from the budget, grow with it (530B parameters on one GPU has pp = dp = 1 only; on 280
GPUs it has pp = 35) -- doubling the budget until some plan's model states fit.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from simulator.job.specs import GiB
from vtrain_ml.planner import rules
from vtrain_ml.planner.space import Candidate, SearchSpace
from vtrain_ml.planner.table import SpaceTable

SAMPLE = 200_000  # plans; a larger space is diagnosed on a random sample of this many
EXAMPLES = 500  # rule-breaking plans built to name the rules they break
MAX_GPUS_TRIED = 1 << 22  # the largest budget tried when asking whether more GPUs would help


def no_feasible_plan(space: SearchSpace, table: SpaceTable | None = None) -> str | None:
    """None if the space (or `table`, its sample) holds a feasible plan, else why not."""
    table = table or SpaceTable.sampled(space, SAMPLE, space.config.seed)
    if rules.feasible(table).any():
        return None
    return explain(space, table)


def _rule_kinds(table: SpaceTable, broken: np.ndarray) -> list[tuple[str, int]]:
    """The rules broken most often, with an example each (from up to `EXAMPLES` random plans)."""
    kinds: Counter[str] = Counter()
    example: dict[str, str] = {}
    rows = np.flatnonzero(broken)
    rng = np.random.default_rng(table.space.config.seed)
    for position in np.sort(rng.choice(rows, size=min(EXAMPLES, len(rows)), replace=False)):
        problems = [p for p in table.candidate(int(position)).problems if "exceeds max_gpus" not in p]
        if problems:
            first = problems[0].split(";")[0].strip()
            kind = re.sub(r"\d+(\.\d+)?", "N", first)
            kinds[kind] += 1
            example.setdefault(kind, first)
    return [(example[k], n) for k, n in kinds.most_common(2)]


def explain(space: SearchSpace, table: SpaceTable) -> str:
    c, gib = space.config, space.hardware.memory_bytes / GiB
    model = space.base_model.name if space.base_model is not None else "the architectures"
    scope = f"{space.size:,} combinations" if table.complete else f"{len(table):,} random combinations " \
                                                                  f"of {space.size:,}"
    layout = table.flat(rules.layout_grid(table))
    budget = table.flat(rules.budget_grid(table))
    static = table.flat(rules.static_memory_grid(table))
    parts = []
    if (layout & ~budget).any():
        parts.append(f"{int((layout & ~budget).sum()):,} need more than max_gpus={c.max_gpus} GPUs")
    broken = int((~layout).sum())
    kinds = _rule_kinds(table, ~layout)
    if broken:
        parts.append(f"{broken:,} break a layout rule (most often: " + "; ".join(k for k, _ in kinds) + ")")
    memory = layout & budget
    if memory.any():
        parts.append(f"{int(memory.sum()):,} fit the budget but their weights, gradients and optimizer "
                     f"states alone need {float(static[memory].min()) / GiB:.1f} GiB or more per GPU "
                     f"> {gib:.0f} GiB")
    text = (f"no feasible layout of {model} on {c.max_gpus} {space.hardware.name} GPUs in the space "
            f"({scope}): " + "; ".join(parts))
    fit = smallest_fit(space)
    if fit is not None and fit.job is not None:
        p, gpus = fit.job.parallel, fit.job.cluster.num_gpus
        return text + (f". The smallest layout of the space whose model states fit uses {gpus} GPUs "
                       f"(tp={p.tp}, pp={p.pp}, dp={fit.job.dp}): raise --max-gpus to at least that")
    notes = "".join(f". {note}" for note in rules.pipeline_notes(space))
    if not memory.any() and c.space.num_gpus is not None:  # the rules alone: the count is fixed
        return text + (f". No plan is held back by memory: with the GPU count fixed "
                       f"(num_gpus={', '.join(map(str, c.space.num_gpus))}), widen the layout choices "
                       f"(tp, pp, cp, micro-batch, schedule) or choose a count their products divide"
                       + notes)
    return text + (". More GPUs in the budget do not help: allow distributed_optimizer, larger tp or pp "
                   "in the space, or use a GPU with more memory" + notes)


def smallest_fit(space: SearchSpace) -> Candidate | None:
    """The plan with the fewest GPUs whose model states fit, in the space with the budget doubled
    until one exists (None: none up to `MAX_GPUS_TRIED`)."""
    budget = space.config.max_gpus
    if space.config.space.num_gpus is not None:  # a fixed GPU count: a larger budget changes nothing
        return None
    while budget < MAX_GPUS_TRIED:
        budget *= 2
        wider = SearchSpace(space.config.model_copy(update={"max_gpus": budget}), space.hardware)
        table = SpaceTable.sampled(wider, SAMPLE, space.config.seed)
        ok = rules.feasible(table)
        if ok.any():
            gpus = table.flat(table.num_gpus)
            at = np.flatnonzero(ok)
            return table.candidate(int(at[np.argmin(gpus[at])]))
    return None


__all__ = ["explain", "no_feasible_plan", "smallest_fit"]
