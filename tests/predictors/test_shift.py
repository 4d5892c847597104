"""The study's shared error: the normal-normal posterior of hpo.predictors.shift."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpo.predictors.shift import NO_SHIFT, SHIFT_SD, SHIFT_TAU, study_shift


def test_no_finished_trial_moves_nothing() -> None:
    assert study_shift([]) == NO_SHIFT
    assert study_shift([math.nan, math.inf]) == NO_SHIFT
    assert study_shift([0.1, 0.1], tau=0.0) == NO_SHIFT


def test_one_trial_is_shrunk_toward_zero_by_the_prior() -> None:
    s = study_shift([0.1])
    t2, s2 = SHIFT_TAU**2, SHIFT_SD**2
    assert s.trials == 1
    assert s.shift == pytest.approx(0.1 * t2 / (t2 + s2))
    assert 0 < s.shift < 0.1
    # non-finite errors are left out, not counted
    assert study_shift([0.1, math.nan]) == s


def test_a_consistent_shared_error_is_learned_and_noise_is_not() -> None:
    consistent = study_shift([0.1] * 10)
    assert consistent.shift == pytest.approx(0.1, rel=0.01)
    # the same mean from errors that scatter widely: their own spread shrinks it more
    rng = np.random.default_rng(0)
    noisy = rng.normal(0.0, 0.3, 10)
    noisy += 0.1 - noisy.mean()
    scattered = study_shift(noisy)
    assert 0 < scattered.shift < 0.5 * consistent.shift
    # more trials with the same errors move it further toward their mean
    assert study_shift([0.1] * 2).shift < study_shift([0.1] * 5).shift < 0.1
    # the sign follows the errors
    assert study_shift([-0.1] * 5).shift == pytest.approx(-study_shift([0.1] * 5).shift)
