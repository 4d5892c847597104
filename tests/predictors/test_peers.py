from __future__ import annotations

import numpy as np
import pytest

from hpo.predictors import (
    AnnealingLawPredictor,
    Controls,
    LastValuePredictor,
    PowerLawEnsemblePredictor,
    calibrate_predictor,
)
from hpo.predictors.io import RunCurve
from hpo.predictors.peers import annealing_areas


def test_last_value_predictor_returns_smoothed_last_value():
    c = Controls(total_steps=100, schedule="linear")
    steps = np.arange(1, 41, dtype=float)
    losses = np.where(steps % 2 == 0, 3.1, 2.9)
    p = LastValuePredictor(window=0.04).predict(steps, losses, c)
    assert p.final == pytest.approx(3.0) and p.method == "last_value"


def test_power_law_ensemble_recovers_pow3():
    c = Controls(total_steps=1000, schedule="constant")
    steps = np.arange(10, 301, 10, dtype=float)
    losses = 2.0 + 0.5 * (steps / 1000) ** -0.5
    p = PowerLawEnsemblePredictor().predict(steps, losses, c)
    # a pure power law is inside the ensemble: the extrapolation hits 2.5
    assert p.final == pytest.approx(2.5, rel=0.01)
    curve = PowerLawEnsemblePredictor().predict_curve(steps, losses, c, np.array([0.3, 1.0]))
    assert curve[-1] == pytest.approx(1.0)


def test_annealing_law_recovers_known_curve_with_decay_in_prefix():
    total = 1000
    c = Controls(total_steps=total, schedule="linear")
    eta = c.eta(np.arange(total + 1) / total)
    s1, s2 = annealing_areas(eta, decay=0.999)
    steps = np.arange(10, 401, 10)
    full = 2.0 + 0.4 * s1 ** -0.5 - 0.3 * s2
    p = AnnealingLawPredictor(c_ridge=0.0).predict(steps.astype(float), full[steps], c)
    assert p.final == pytest.approx(full[-1], rel=5e-3)


def test_annealing_areas_zero_for_constant_schedule():
    s1, s2 = annealing_areas(np.r_[np.linspace(0, 1, 11), np.ones(90)])
    assert np.all(s2 == 0) and s1[-1] == pytest.approx((5.5 + 90) / 100)


def test_peers_reject_too_few_points_and_calibrate():
    c = Controls(total_steps=100, schedule="linear")
    with pytest.raises(ValueError, match="at least 5"):
        PowerLawEnsemblePredictor().predict(np.arange(1.0, 4.0), np.ones(3), c)
    steps = np.arange(5, 101, 5, dtype=float)
    run = RunCurve("r", steps, 3 + 1 / steps, c)
    cal = calibrate_predictor(LastValuePredictor(), [run], fractions=(0.5, 0.9))
    assert len(cal["errors"]) == 2 and cal["errors"][0][0] > 0
