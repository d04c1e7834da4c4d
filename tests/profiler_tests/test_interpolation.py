import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costs.analytic import AnalyticKernelModel, CostSource
from simulator.costs.interpolation import RatioInterpolator, size_features
from simulator.costs.profiled import ProfiledKernelModel
from simulator.graph.ops import Op, OpKind, Phase
from simulator.job.catalog import resolve_hardware
from simulator.job.enums import Precision

ANALYTIC = AnalyticKernelModel(resolve_hardware("h100-sxm-80gb"), Precision.BF16)


def _gemm(m, n, k, phase=Phase.FORWARD):
    return Op("g", OpKind.GEMM, phase, (1, m, n, k), 2, 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n))


def test_interpolator_is_exact_at_measured_points():
    x = np.array([[1.0, 2.0], [2.0, 1.0], [3.0, 5.0]])
    y = np.array([0.1, -0.2, 0.3])
    assert np.allclose(RatioInterpolator().fit(x, y).predict(x), y)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 30), st.floats(0, 30), st.floats(-3, 3)), min_size=1, max_size=12),
       st.floats(0, 30), st.floats(0, 30))
def test_prediction_never_leaves_the_range_of_measured_ratios(points, qx, qy):
    data = np.array(points)
    model = RatioInterpolator().fit(data[:, :2], data[:, 2])
    pred = model.predict(np.array([[qx, qy]]))[0]
    assert data[:, 2].min() - 1e-9 <= pred <= data[:, 2].max() + 1e-9


def test_a_constant_slowdown_is_learned_for_unmeasured_shapes():
    measured = [(op, 2.0 * ANALYTIC.seconds(op)) for op in
                (_gemm(1024, 1024, 1024), _gemm(4096, 4096, 4096), _gemm(8192, 2048, 4096))]
    model = ProfiledKernelModel.from_measurements(measured, ANALYTIC)
    new = _gemm(2048, 4096, 1024)
    cost = model.cost(new)
    assert cost.source is CostSource.INTERPOLATED
    assert cost.seconds == pytest.approx(2.0 * ANALYTIC.seconds(new))


def test_other_phase_of_a_measured_kind_borrows_the_kind_correction():
    measured = [(_gemm(1024, 1024, 1024), 3.0 * ANALYTIC.seconds(_gemm(1024, 1024, 1024)))]
    model = ProfiledKernelModel.from_measurements(measured, ANALYTIC)
    wgrad = _gemm(1024, 1024, 1024, Phase.BACKWARD_WEIGHT)
    cost = model.cost(wgrad)
    assert cost.source is CostSource.INTERPOLATED
    # the forward GEMM measured 3x its analytic time: the unmeasured weight-gradient GEMM of the
    # same kind is 3x its own analytic time too
    assert cost.seconds == pytest.approx(3.0 * ANALYTIC.seconds(wgrad))


def test_kinds_never_measured_fall_back_to_analytic():
    model = ProfiledKernelModel.from_measurements([(_gemm(64, 64, 64), 1e-5)], ANALYTIC)
    norm = Op("n", OpKind.NORM, Phase.FORWARD, (1 << 20,), 2, 5.0 * (1 << 20), 4.0 * (1 << 20),
              variant="layernorm")
    cost = model.cost(norm)
    assert cost.source is CostSource.ANALYTIC and cost.seconds == ANALYTIC.seconds(norm)


def test_size_features_are_finite_for_zero_flop_ops():
    assert np.isfinite(size_features(np.array([0.0]), np.array([0.0]))).all()
