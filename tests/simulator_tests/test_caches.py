"""The simulator's memo tables (blocks per model/tp/micro-batch, their costs) change no result:
a warm simulation equals a cold one, and layouts that differ only in pipeline/data-parallel
fields share their blocks while anything the blocks read gives new ones."""

from __future__ import annotations

from pathlib import Path

from simulator import job_from_dict, load_job, simulate
from simulator.graph.blocks import BLOCKS, blocks_key, build_blocks, build_graph
from simulator.job.enums import Framework
from simulator.prepare import JOBS
from simulator.simulate import clear_caches, clear_layout_caches

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


def _bits(result) -> list[bytes]:  # type: ignore[no-untyped-def]
    t, tail = result.timeline, result.tail
    return [a.tobytes() for a in (t.start, t.end, t.idle, t.p2p_exposed, tail.dp_exposed_s,
                                  tail.dp_comm_s, tail.optimizer_s, tail.embedding_sync_s)]


def _variants():  # type: ignore[no-untyped-def]
    """MT-NLG as shipped, with ZeRO-1 and overlapped gradient reduction (the tail then reads
    the timeline), interleaved, and on another framework."""
    job = load_job(MTNLG)
    yield job
    yield _with(job, distributed_optimizer=True, overlap_grad_reduce=True)
    yield job_from_dict({
        "model": "megatron-gpt-1.7b",
        "training": {"global_batch_size": 64, "micro_batch_size": 2, "precision": "bf16"},
        "parallel": {"tp": 2, "pp": 4, "dp": 2, "virtual_stages": 2,
                     "schedule": "interleaved_1f1b", "sequence_parallel": True},
        "cluster": {"gpu": "a100-80gb", "num_gpus": 16}})
    yield job.model_copy(update={"training": job.training.model_copy(
        update={"framework": Framework.MEGATRON_DEEPSPEED})})


def test_per_job_memo_tables_change_no_bit() -> None:
    """The jobs' static parts, stage costs, p2p delays and the tail's fixed terms are memoized
    per job and models: a warm result is the cold one, bit for bit, for every variant."""
    for job in _variants():
        clear_caches()
        cold = simulate(job)
        warm = simulate(job)
        assert warm.to_dict() == cold.to_dict()
        assert _bits(warm) == _bits(cold)


def test_a_callers_network_model_is_its_own_memo_key() -> None:
    from tests.simulator_tests.conftest import free_network

    job = load_job(MTNLG)
    clear_caches()
    default = simulate(job).to_dict()
    free = free_network(job)
    warm_free = simulate(job, network=free).to_dict()
    clear_caches()
    assert simulate(job, network=free).to_dict() == warm_free
    assert warm_free["iteration_time_s"] < default["iteration_time_s"]


def test_a_new_layout_keeps_the_models_blocks_and_forgets_the_layout() -> None:
    job = load_job(MTNLG)
    clear_caches()
    first = simulate(job)
    first.job["model"] = "changed by a caller"  # a result's dicts are its own
    clear_layout_caches()
    assert len(BLOCKS) == 1 and len(JOBS) == 0
    again = simulate(job)
    assert again.job["model"] == job.model.name
    assert again.iteration_time_s == first.iteration_time_s


def test_memoized_arrays_a_result_shares_cannot_be_changed_in_place() -> None:
    import numpy as np
    import pytest

    job = load_job(MTNLG)
    clear_caches()
    result = simulate(job)
    for shared in (result.costs.forward_s, result.graph.chunk_layers, result.tail.optimizer_s):
        with pytest.raises(ValueError, match="read-only"):
            shared += 1.0
    assert np.array_equal(simulate(job).costs.forward_s, result.costs.forward_s)
    assert simulate(job).to_dict() == result.to_dict()


def test_low_precision_and_fsdp_jobs_warm_equal_cold_and_keys_see_what_the_blocks_read() -> None:
    """The blocks of a low-precision run read the GPU generation (its format), the micro-batch
    count (weight casts per micro-batch) and, under FSDP, whether dp > 1: all in the key."""
    base = {"model": "llama-3-8b",
            "training": {"global_batch_size": 16, "precision": "fp8", "fp8_recipe": "tensorwise",
                         "first_last_layers_bf16": True, "flash_attention": True},
            "parallel": {"tp": 2, "pp": 2, "sequence_parallel": True,
                         "data_parallel_sharding": "optim_grads_params"},
            "cluster": {"gpu": "b200", "num_gpus": 8}}
    job = job_from_dict(base)
    clear_caches()
    cold = simulate(job).to_dict()
    assert simulate(job).to_dict() == cold
    hopper = job_from_dict({**base, "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8}})
    assert blocks_key(hopper) != blocks_key(job)
    more_mb = job_from_dict({**base, "training": {**base["training"], "global_batch_size": 32}})
    assert blocks_key(more_mb) != blocks_key(job)
    one_dp = job_from_dict({**base, "cluster": {"gpu": "b200", "num_gpus": 4}})
    assert blocks_key(one_dp) != blocks_key(job)
