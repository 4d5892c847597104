from __future__ import annotations

import numpy as np
import pytest

from hpo.predictors import collapse_spread, curve_mae, seed_spread


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


def test_normalized_matrix_masks_the_incomplete_smoothing_window_at_the_end():
    from hpo.predictors import Controls, RunCurve, normalized_run
    from hpo.predictors.metrics import SPREAD_GRID, normalized_matrix

    steps = np.arange(1, 1001, dtype=float)
    clean = 2.0 + 1.0 / np.sqrt(steps)
    noisy = clean.copy()
    noisy[-3:] *= 1.08  # a few outlying last batches
    runs = [RunCurve(run_id=name, steps=steps, losses=losses,
                     controls=Controls(total_steps=1000, schedule="linear"))
            for name, losses in (("clean", clean), ("noisy", noisy))]
    m = normalized_matrix(runs, SPREAD_GRID, window=0.02)
    # the last grid points, where the centered window has shrunk, are left out
    assert np.isnan(m[:, SPREAD_GRID > 0.99]).all()
    assert np.isfinite(m[:, SPREAD_GRID <= 0.99]).all()
    # so outlying final batches do not set the spread through the unsmoothed end points
    unmasked = np.array([normalized_run(r, SPREAD_GRID, 0.02) for r in runs])
    assert collapse_spread(m) < collapse_spread(unmasked) - 0.02
