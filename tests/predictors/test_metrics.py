from __future__ import annotations

import numpy as np
import pytest

from predictors import collapse_spread, curve_mae, seed_spread


def test_collapse_spread_is_max_over_t_of_range_across_runs():
    curves = np.array([[1.2, 1.1, 1.0], [1.25, 1.1, 1.0], [1.21, 1.0, 1.0]])
    assert collapse_spread(curves) == pytest.approx(0.1)
    # points covered by a single run are ignored
    assert collapse_spread(np.array([[1.0, np.nan], [1.1, 5.0]])) == pytest.approx(0.1)
    assert np.isnan(collapse_spread(np.array([[1.0, 2.0]])))


def test_seed_spread_is_largest_group_spread():
    g1 = np.array([[1.0, 1.0], [1.02, 1.0]])
    g2 = np.array([[1.0, 1.0], [1.0, 1.05]])
    assert seed_spread([g1, g2]) == pytest.approx(0.05)
    assert np.isnan(seed_spread([g1[:1]]))


def test_curve_mae_ignores_nan():
    assert curve_mae(np.array([1.0, 2.0, np.nan]), np.array([1.1, 2.0, 3.0])) == (
        pytest.approx(0.05)
    )
    with pytest.raises(ValueError):
        curve_mae(np.array([np.nan]), np.array([1.0]))
