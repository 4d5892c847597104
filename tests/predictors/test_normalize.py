from __future__ import annotations

import numpy as np
import pytest

from hpo.predictors import ema, final_loss_estimate, moving_average, normalize_curve, smooth_curve
from hpo.predictors.normalize import check_curve, interpolate_on_grid


def test_moving_average_is_trailing_and_prefix_stable():
    t = np.arange(10.0)
    y = np.arange(10.0) ** 2
    full = moving_average(t, y, 3.0)
    # the value at a point depends only on the points before it
    np.testing.assert_allclose(moving_average(t[:6], y[:6], 3.0), full[:6])
    assert full[5] == pytest.approx((9 + 16 + 25) / 3)


def test_ema_bias_corrected_constant():
    np.testing.assert_allclose(ema(np.full(5, 2.0), 0.1), 2.0)
    with pytest.raises(ValueError, match="alpha"):
        ema(np.ones(3), 0.0)


def test_smooth_curve_reproduces_a_line():
    t = np.linspace(0, 1, 101)
    y = 3 - t
    np.testing.assert_allclose(smooth_curve(t, y, 0.1), y, atol=1e-12)


def test_final_loss_estimate_extrapolates_linear_tail():
    t = np.linspace(0.5, 0.98, 49)
    y = 3 - t
    assert final_loss_estimate(t, y) == pytest.approx(3 - 0.98)
    assert final_loss_estimate(t, y, at=1.0) == pytest.approx(2.0)


def test_normalize_curve_ends_at_one():
    t = np.linspace(0.01, 1, 100)
    y = 3 + 1 / (t + 0.1)
    # the final loss is a line fit over the tail: exact up to the curvature of the tail
    assert normalize_curve(t, y, window=0)[-1] == pytest.approx(1.0, rel=1e-4)


def test_interpolate_on_grid_nan_outside():
    out = interpolate_on_grid(np.array([0.2, 0.4]), np.array([1.0, 2.0]), np.array([0.1, 0.3]))
    assert np.isnan(out[0]) and out[1] == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("steps", "losses", "match"),
    [
        ([1, 2, 3], [1.0, np.nan, 1.0], "finite"),
        ([1, 2, 3], [1.0, -1.0, 1.0], "> 0"),
        ([1], [1.0], "at least 2"),
        ([1, 2], [1.0], "differ in length"),
        ([1, 2, 300], [1.0, 1.0, 1.0], "beyond total_steps"),
    ],
)
def test_check_curve_rejects_malformed(steps, losses, match):
    with pytest.raises(ValueError, match=match):
        check_curve(np.array(steps), np.array(losses), 2, total_steps=100)


def test_check_curve_sorts_and_averages_duplicates():
    s, v = check_curve(np.array([3, 1, 1]), np.array([1.0, 2.0, 4.0]))
    np.testing.assert_array_equal(s, [1, 3])
    np.testing.assert_allclose(v, [3.0, 1.0])


def test_final_loss_estimate_averages_noisy_curves():
    from hpo.predictors.normalize import relative_noise

    t = np.linspace(0.001, 1, 1000)
    clean = 3 + 0.5 * (1 - t) ** 2
    errors = []
    for seed in range(8):
        rng = np.random.default_rng(seed)
        noisy = clean * (1 + 0.04 * rng.standard_normal(t.size))  # per-batch noise of 4 %
        assert relative_noise(clean) < 0.005 < relative_noise(noisy)
        errors.append(final_loss_estimate(t, noisy, at=1.0) / 3.0 - 1)
    # a quadratic over the last quarter: 4 % noise per point averages down to under 1 %
    assert np.mean(np.abs(errors)) < 0.01
