"""Exact evaluations in worker processes: the base job travels once, the answers do not change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from joblib import Parallel, delayed

from tests.search_tests.conftest import tiny_config, tiny_dict
from vtrain_ml.planner.evaluation import evaluate_exact, evaluate_exact_many, job_deltas
from vtrain_ml.planner.space import SearchSpace


def _tiny_jobs() -> list:
    space = SearchSpace(tiny_config())
    built = (space.build(p) for p in space.enumerate())
    return [c.job for c in built if c.job is not None]


def test_a_delta_holds_only_the_parts_that_differ_from_the_first_job() -> None:
    jobs = _tiny_jobs()
    base, deltas = job_deltas(jobs)
    assert base is jobs[0] and deltas[0] == {}
    assert all("hardware" not in d and "model" not in d for d in deltas)
    assert any("parallel" in d for d in deltas)
    rebuilt = [base.model_copy(update=d) for d in deltas]
    assert rebuilt == jobs
    assert all(j.hardware is base.hardware for j in rebuilt)


def test_another_model_travels_in_its_delta() -> None:
    jobs = _tiny_jobs()[:3]
    wider = jobs[1].model_copy(update={"model": jobs[1].model.model_copy(update={"hidden_size": 2048})})
    _, deltas = job_deltas([jobs[0], wider, jobs[2]])
    assert deltas[1]["model"].hidden_size == 2048
    assert "model" not in deltas[2]


def test_parallel_evaluations_equal_serial_ones_in_order() -> None:
    jobs = _tiny_jobs()
    assert len(jobs) >= 8  # below 8 jobs no worker is started
    wider = jobs[3].model_copy(update={"model": jobs[3].model.model_copy(update={"hidden_size": 2048})})
    jobs = [*jobs[:3], wider, *jobs[3:]]
    assert evaluate_exact_many(jobs, n_jobs=2) == [evaluate_exact(j) for j in jobs]


def test_the_search_workers_and_joblib_parallel_share_one_process() -> None:
    """A calibration (joblib `Parallel`) after a search in one process, and a search after it: the
    two pools are separate, so neither finds the other's executor (a shuffled test order once ran
    calibrate's `--jobs 2` after a parallel search and failed inside joblib)."""
    jobs = _tiny_jobs()
    first = evaluate_exact_many(jobs, n_jobs=2)
    assert list(Parallel(n_jobs=2)(delayed(abs)(i) for i in (-3, -2, -1))) == [3, 2, 1]
    assert evaluate_exact_many(jobs, n_jobs=2) == first


def test_a_search_that_simulated_in_workers_exits_without_a_traceback(tmp_path: Path) -> None:
    """The worker pool is shut down before the interpreter tears its modules down: left to the
    garbage collector at exit, loky's callback printed "Exception ignored in ... weakref_cb" with
    a traceback after a search that simulated in workers (the search's command, in a process of
    its own: the teardown order is the command's)."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump({**tiny_dict(), "n_jobs": 2, "strategy": "enumerate",
                                      "storage": "memory"}))
    done = subprocess.run([sys.executable, "-m", "vtrain_ml.search", "--config", str(recipe)],
                          capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert "simulating" in done.stderr and len(_tiny_jobs()) >= 8  # enough plans for the workers
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_a_peak_that_leaves_no_room_for_the_allocator_is_infeasible_as_the_simulator_says() -> None:
    """The search's memory constraint is the simulator's verdict (simulator.memory.fit): the
    allocated peak plus the allocator's 2% floor plus the context must fit, not the bare peak.
    A plan whose peak is 1 GiB under the capacity of an 80 GiB GPU misses by the floor."""
    from simulator.job.specs import GiB
    from vtrain_ml.planner.evaluation import evaluation_from_time
    from vtrain_ml.planner.objective import constraint_values

    config = tiny_config()
    job = next(c.job for c in map(SearchSpace(config).build, SearchSpace(config).enumerate())
               if c.job is not None)
    capacity, context = job.hardware.memory_bytes, job.hardware.reserved_memory_GiB * GiB
    peak = capacity - 1 * GiB
    ev = evaluation_from_time(job, 1.0, peak)
    assert ev.memory_required_bytes == (peak - context) * 1.02 + context > capacity
    assert not ev.fits_in_memory and constraint_values(config, capacity, ev)[0] > 0
    roomy = evaluation_from_time(job, 1.0, capacity / 2)
    assert roomy.fits_in_memory and constraint_values(config, capacity, roomy)[0] < 0
