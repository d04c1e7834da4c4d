from simulator import simulate
from tests.conftest import make_job


def test_breakdown_sums_to_iteration_time(small_job):
    result = simulate(small_job)
    assert abs(sum(result.breakdown.values()) - result.iteration_time_s) < 1e-9 * result.iteration_time_s


def test_more_microbatches_take_longer():
    short = simulate(make_job(training={"global_batch_size": 8}))
    long = simulate(make_job(training={"global_batch_size": 32}))
    assert long.iteration_time_s > short.iteration_time_s
