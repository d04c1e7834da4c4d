"""The simulator's memo tables (blocks per model/tp/micro-batch, their costs) change no result:
a warm simulation equals a cold one, and layouts that differ only in pipeline/data-parallel
fields share their blocks while anything the blocks read gives new ones."""

from __future__ import annotations

from pathlib import Path

from simulator import load_job, simulate
from simulator.graph import BLOCKS, blocks_key, build_blocks, build_graph
from simulator.simulate import clear_caches

ROOT = Path(__file__).resolve().parents[2]
MTNLG = ROOT / "examples" / "mtnlg_530b.yaml"


def _with(job, **parallel):  # type: ignore[no-untyped-def]
    return job.model_copy(update={"parallel": job.parallel.model_copy(update=parallel)})


def test_warm_simulation_equals_cold_one() -> None:
    job = load_job(MTNLG)
    clear_caches()
    cold = simulate(job).to_dict()
    warm = simulate(job).to_dict()
    clear_caches()
    again = simulate(job).to_dict()
    assert warm == cold == again


def test_layouts_differing_in_optimizer_sharding_share_blocks_and_tp_does_not() -> None:
    job = load_job(MTNLG)
    clear_caches()
    graph = build_graph(job)
    sharded = _with(job, distributed_optimizer=not job.parallel.distributed_optimizer)
    assert blocks_key(sharded) == blocks_key(job)
    assert build_graph(sharded).layer is graph.layer
    other_tp = _with(job, tp=4)
    assert blocks_key(other_tp) != blocks_key(job)
    assert build_graph(other_tp).layer is not graph.layer


def test_memoized_blocks_equal_fresh_ones() -> None:
    job = load_job(MTNLG)
    clear_caches()
    cached = build_graph(job)
    assert len(BLOCKS) == 1
    layer, emb, head = build_blocks(job)
    assert (cached.layer, cached.embedding, cached.head) == (layer, emb, head)
