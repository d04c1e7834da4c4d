"""The search space as arrays: every combination (or a random sample of them) as one row.

`SearchSpace.build` makes one checked `Job` per plan (~170 us): right for the few hundred plans a
search simulates, far too slow to score the 2.5 million plans of case study 3 with a surrogate that
predicts a million per second. A `SpaceTable` holds plans as flat indices into the product of the
knobs' choice lists (`SearchSpace.enumerate` order: the last knob varies fastest), and computes on
*grids*: an array with one axis per knob, of length 1 on the knobs it does not depend on. The
number of GPUs is tp x pp x dp on a (tp, pp, dp) grid, a rule on the model and tp is a small
array over those axes, and numpy's broadcasting combines them; only a whole-space mask is ever as
large as the space. `flat(grid)` reads a grid's value for every row.

The table is a fast *view*, never the authority: every plan that is simulated is rebuilt by
`SearchSpace.build`, and tests check that the table's masks and job columns equal the built
candidates' on whole spaces. A new knob (issue 25: ep, cp, precision, ...) plugs in as an axis
here and, if it has rules, a rule in `planner.rules`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np

from simulator.job.specs import ModelSpec
from vtrain_ml.planner.choices import parse_pipeline
from vtrain_ml.planner.space import Candidate, Choice, SearchSpace

ARCHITECTURE_KNOBS = ("num_layers", "hidden_size", "head_dim")


class SpaceTable:
    """Rows of one `SearchSpace`: all of them, or the sorted flat indices `rows`."""

    def __init__(self, space: SearchSpace, rows: np.ndarray | None = None) -> None:
        self.space = space
        self.names = [k.name for k in space.knobs]
        self.shape = tuple(len(k.choices) for k in space.knobs)
        self.strides = np.array([int(np.prod(self.shape[i + 1:])) for i in range(len(self.shape))],
                                dtype=np.int64)
        self.rows = np.arange(space.size, dtype=np.int64) if rows is None else np.unique(rows)
        self.memo: dict[str, Any] = {}

    @classmethod
    def sampled(cls, space: SearchSpace, n: int, seed: int) -> SpaceTable:
        """A table of `n` distinct random rows (every row when the space has no more)."""
        if space.size <= n:
            return cls(space)
        rng = np.random.default_rng(seed)
        return cls(space, rng.choice(space.size, size=n, replace=False).astype(np.int64))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def complete(self) -> bool:
        return len(self.rows) == self.space.size

    def cached(self, name: str, make: Callable[[], Any]) -> Any:
        """`make()` once per table (the rules' masks and the template job, `planner.rules`)."""
        if name not in self.memo:
            self.memo[name] = make()
        return self.memo[name]

    # -- grids ---------------------------------------------------------------------------------
    def axis(self, name: str, read: Callable[[Any], Any] | None = None) -> np.ndarray:
        """Knob `name`'s choices (mapped through `read`) along its own axis of the grid."""
        i = self.names.index(name)
        values = self.space.knobs[i].choices
        shape = [1] * len(self.shape)
        shape[i] = self.shape[i]
        return np.asarray([read(v) if read else v for v in values]).reshape(shape)

    def flat(self, grid: Any, positions: np.ndarray | None = None) -> np.ndarray:
        """A grid's value for every row (or the rows at `positions`) as a 1-D array."""
        grid = np.asarray(grid)
        if positions is None and self.complete and grid.size > 1:
            return np.broadcast_to(grid, self.shape).reshape(-1)
        return self.gather(grid, self.digits(positions))

    def digits(self, positions: np.ndarray | None = None) -> list[np.ndarray]:
        """Per knob, the choice index of every row (or the rows at `positions`)."""
        rows = self.rows if positions is None else self.rows[positions]
        return [(rows // int(s)) % n if n > 1 else np.zeros(len(rows), dtype=np.int64)
                for s, n in zip(self.strides, self.shape, strict=True)]

    @staticmethod
    def gather(grid: Any, digits: list[np.ndarray]) -> np.ndarray:
        """A grid's value at rows given by their `digits`."""
        grid = np.asarray(grid)
        if grid.size == 1:
            return np.full(len(digits[0]), grid.reshape(-1)[0])
        return grid[tuple(d if size > 1 else 0 for d, size in zip(digits, grid.shape, strict=True))]

    # -- the model of each row -------------------------------------------------------------------
    @cached_property
    def model_specs(self) -> np.ndarray:
        """The model of every architecture combination, on the architecture axes (a fixed model:
        one entry); None where a combination is no model (hidden not a multiple of head_dim)."""
        if self.space.base_model is not None:
            return np.array(self.space.base_model, dtype=object).reshape([1] * len(self.shape))
        axes = [self.names.index(n) for n in ARCHITECTURE_KNOBS]
        knobs = [self.space.knobs[i] for i in axes]
        specs = np.empty([len(k.choices) for k in knobs], dtype=object)
        for index in np.ndindex(*specs.shape):
            params = {k.name: k.choices[j] for k, j in zip(knobs, index, strict=True)}
            specs[index] = self.space._model(params)[0]
        shape = [1] * len(self.shape)
        for i, k in zip(axes, knobs, strict=True):
            shape[i] = len(k.choices)
        assert axes == sorted(axes)
        return specs.reshape(shape)

    def model(self, read: Callable[[ModelSpec], Any], dtype: Any = np.int64) -> np.ndarray:
        """`read(model)` on the architecture axes (0 where there is no model)."""
        specs = self.model_specs
        return np.array([read(m) if m is not None else 0 for m in specs.reshape(-1)],
                        dtype=dtype).reshape(specs.shape)

    # -- layout grids ------------------------------------------------------------------------------
    def knob(self, name: str, default: Any, read: Callable[[Any], Any] | None = None) -> np.ndarray:
        """Knob `name` on its axis (through `read`), or `default` where it is not a knob."""
        if name in self.names:
            return self.axis(name, read)
        return np.asarray(read(default) if read else default).reshape([1] * len(self.shape))

    @cached_property
    def tp(self) -> np.ndarray:
        return self.axis("tp").astype(np.int64)

    @cached_property
    def pp(self) -> np.ndarray:
        return self.axis("pp").astype(np.int64)

    @cached_property
    def cp(self) -> np.ndarray:
        return self.knob("cp", 1).astype(np.int64)

    @cached_property
    def dp(self) -> np.ndarray:
        if "dp" in self.names:
            return self.axis("dp").astype(np.int64)
        ranks = self.tp * self.cp * self.pp
        if "num_gpus" in self.names:
            return np.maximum(1, self.axis("num_gpus").astype(np.int64) // ranks)
        return np.maximum(1, self.space.config.max_gpus // ranks)

    @cached_property
    def num_gpus(self) -> np.ndarray:
        return self.tp * self.cp * self.pp * self.dp

    @cached_property
    def whole_dp(self) -> np.ndarray:
        """`space.num_gpus` is a multiple of tp*cp*pp (true where it is not a knob)."""
        if "num_gpus" not in self.names:
            return np.ones([1] * len(self.shape), dtype=bool)
        return self.axis("num_gpus").astype(np.int64) % (self.tp * self.cp * self.pp) == 0

    @cached_property
    def ep(self) -> np.ndarray:
        return self.knob("ep", 1).astype(np.int64)

    @cached_property
    def expert_tp(self) -> np.ndarray:
        """The experts' tp (`Job.expert_tp`): the knob, else tp."""
        return self.axis("expert_tp").astype(np.int64) if "expert_tp" in self.names else self.tp

    def hardware(self, read: Callable[[Any, Any], Any], dtype: Any = None) -> np.ndarray:
        """`read(spec, entry)` of each plan's GPU type, on the hardware axis."""
        space = self.space
        first = next(iter(space.entries))
        out = self.knob("hardware", first, lambda n: read(space.hardware_specs[n], space.entries[n]))
        return out if dtype is None else out.astype(dtype)

    def precision(self, read: Callable[[Any], Any], dtype: Any = None) -> np.ndarray:
        """`read(PrecisionChoice)` of each plan, on the precision axis."""
        from vtrain_ml.planner.dimensions import precision_choice

        config = self.space.config
        out = self.knob("precision", None, lambda v: read(precision_choice(config, v)))
        return out if dtype is None else out.astype(dtype)

    @cached_property
    def sharding_level(self) -> np.ndarray:
        """`Job.sharding.level`: the data_parallel_sharding knob, else the distributed optimizer
        (ZeRO-1) or none."""
        from simulator.job.enums import DataParallelSharding

        if "data_parallel_sharding" in self.names:
            levels = self.axis("data_parallel_sharding", lambda v: DataParallelSharding(v).level)
            return levels.astype(np.int64)
        return np.where(self.flag("distributed_optimizer"), DataParallelSharding.OPTIM.level,
                        DataParallelSharding.NO_SHARD.level)

    def equals(self, name: str, value: Any, default: Any) -> np.ndarray:
        """Knob `name` (its default where it is not a knob) equals `value`."""
        return self.knob(name, default, lambda v: v == value).astype(bool)

    @cached_property
    def micro_batch(self) -> np.ndarray:
        return self.axis("micro_batch_size").astype(np.int64)

    @cached_property
    def schedule_names(self) -> tuple[str, ...]:
        choices = self.space.knobs[self.names.index("pipeline")].choices
        return tuple(dict.fromkeys(parse_pipeline(str(c))[0].value for c in choices))

    @cached_property
    def schedule_code(self) -> np.ndarray:
        """Index into `schedule_names`, on the pipeline axis."""
        return self.axis("pipeline", lambda c: self.schedule_names.index(parse_pipeline(str(c))[0].value))

    @cached_property
    def virtual_stages(self) -> np.ndarray:
        return self.axis("pipeline", lambda c: parse_pipeline(str(c))[1]).astype(np.int64)

    def flag(self, name: str, default: bool = False) -> np.ndarray:
        return self.knob(name, default, bool).astype(bool)

    def code(self, name: str) -> np.ndarray:
        """The choice index of knob `name`, on its axis."""
        return self.axis(name, self.space.knobs[self.names.index(name)].choices.index)

    # -- rows <-> plans --------------------------------------------------------------------------
    def params(self, position: int) -> dict[str, Choice]:
        """The knob values of the row at `position` (all knobs: `SearchSpace.build`'s input)."""
        row = int(self.rows[position])
        return {k.name: k.choices[(row // int(s)) % len(k.choices)]
                for k, s in zip(self.space.knobs, self.strides, strict=True)}

    def candidate(self, position: int) -> Candidate:
        return self.space.build(self.params(position))

    def row_of(self, params: dict[str, Any]) -> int | None:
        """The flat index of a plan (searched knobs; fixed ones are implied), or None when a value
        is not among its knob's choices."""
        full = self.space.complete(params)
        row = 0
        for knob, stride in zip(self.space.knobs, self.strides, strict=True):
            if full[knob.name] not in knob.choices:
                return None
            row += knob.choices.index(full[knob.name]) * int(stride)
        return row

    def positions(self, rows: np.ndarray) -> np.ndarray:
        """Positions of flat `rows` in this table (-1 where a row is not in it)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.complete:
            return rows
        at = np.minimum(np.searchsorted(self.rows, rows), max(len(self.rows) - 1, 0))
        return np.where(self.rows[at] == rows, at, -1) if len(self.rows) else np.full(len(rows), -1)

    def neighbour_rows(self, row: int, reach: int = 2) -> np.ndarray:
        """Flat rows one move away from flat `row` (`SearchSpace.neighbours`' moves: another
        value of one searched knob, or up to `reach` steps along two ordered knobs at once)."""
        digits = [(row // int(s)) % n for s, n in zip(self.strides, self.shape, strict=True)]
        out: list[int] = []
        searched = [i for i, n in enumerate(self.shape) if n > 1]
        for i in searched:
            stride = int(self.strides[i])
            out += [row + (d - digits[i]) * stride for d in range(self.shape[i]) if d != digits[i]]
        ordered = [i for i in searched if self.space.knobs[i].step is not None]
        steps = [d for d in range(-reach, reach + 1) if d]
        for n, a in enumerate(ordered):
            for b in ordered[n + 1:]:
                out += [row + da * int(self.strides[a]) + db * int(self.strides[b])
                        for da in steps for db in steps
                        if 0 <= digits[a] + da < self.shape[a] and 0 <= digits[b] + db < self.shape[b]]
        return np.unique(np.array(out, dtype=np.int64))

__all__ = ["SpaceTable"]
