from __future__ import annotations

import math

import numpy as np
import pytest

from hpo.predictors import (
    ResidualMonitor,
    fit_universal_curve,
    raw_loss_alert,
    raw_loss_rise,
    reference_threshold,
    runs_from_frame,
)
from hpo.predictors.monitor import MIN_THRESHOLD, THRESHOLD_MARGIN, residual_threshold
from tests.predictors._synth import make_run, paper_family

TRUE = (0.3, 0.5, 1.2, -0.2)


@pytest.fixture(scope="module")
def curve():
    # calibrated: the residual threshold comes from the nine proxies' own residuals
    return fit_universal_curve(paper_family(TRUE, noise=0.003), form="paper")


def _target(noise=0.003, seed=3):
    return runs_from_frame(make_run("t", 2e7, 2000, 1e-3, 20.0, TRUE, noise=noise,
                                    seed=seed))[0]


def test_threshold_is_calibrated_on_the_proxies(curve):
    mon = curve.calibration["monitor"]
    largest = max(v for v in mon["max_residuals"] if v is not None)
    # the margin times the largest proxy residual, never below the floor
    assert reference_threshold(curve) == pytest.approx(
        max(THRESHOLD_MARGIN * largest, MIN_THRESHOLD), rel=1e-4)
    assert residual_threshold([None, 0.0001]) == MIN_THRESHOLD


def test_no_proxy_alerts_on_its_own_reference(curve):
    frame = paper_family(TRUE, noise=0.003)
    for run in runs_from_frame(frame):
        mon = ResidualMonitor(curve, run.controls)
        assert mon.run(run.steps, run.losses) is None, run.run_id


@pytest.mark.parametrize("seed", range(5))
def test_no_alert_on_clean_replays(curve, seed):
    run = _target(seed=10 + seed)
    mon = ResidualMonitor(curve, run.controls)
    assert mon.run(run.steps, run.losses) is None
    assert 0 < mon.state.max_abs_residual < mon.threshold


def test_alert_on_an_injected_step(curve):
    run = _target()
    losses = run.losses * np.where(run.t_hat >= 0.6, 1.03, 1.0)  # +3% from t^ 0.6 on
    mon = ResidualMonitor(curve, run.controls)
    first = mon.run(run.steps, losses)
    # the smoothed residual crosses the band soon after the step
    assert first is not None and 0.6 < first < 0.66
    assert mon.state.alerted and mon.state.residual > mon.threshold


def test_online_and_whole_curve_agree(curve):
    run = _target()
    losses = run.losses * np.where(run.t_hat >= 0.5, 1.02, 1.0)
    online = ResidualMonitor(curve, run.controls)
    states = [online.update(float(s), float(v)) for s, v in zip(run.steps, losses, strict=True)]
    whole = ResidualMonitor(curve, run.controls)
    assert whole.run(run.steps, losses) == online.state.alert_t
    # in alert from the first alert on while the residual stays above the band
    first = states.index(True)
    assert run.t_hat[first] == pytest.approx(online.state.alert_t)
    np.testing.assert_allclose(np.array(online.state.history), np.array(whole.state.history))


def test_no_alert_inside_the_alignment_window(curve):
    run = _target()
    losses = run.losses * np.where(run.t_hat < 0.25, 1.2, 1.0)  # off only while aligning
    mon = ResidualMonitor(curve, run.controls, threshold=0.01)
    for s, v in zip(run.steps, losses, strict=True):
        if s / run.controls.total_steps <= 0.3:
            assert mon.update(float(s), float(v)) is False


def test_a_run_beyond_the_proxies_gets_a_wider_threshold(curve):
    inside = _target()
    bigger = runs_from_frame(make_run("big", 4e8, 2000, 1e-3, 20.0, TRUE))[0]
    th_in = ResidualMonitor(curve, inside.controls).threshold
    th_big = ResidualMonitor(curve, bigger.controls).threshold
    assert th_in == pytest.approx(reference_threshold(curve))
    # ten times the largest proxy: widened as its prediction interval is
    assert th_big == pytest.approx(th_in * (1 + 2.0 * math.log(10)), rel=1e-6)


def test_monitor_rejects_bad_input(curve):
    run = _target()
    mon = ResidualMonitor(curve, run.controls)
    mon.update(10, 5.0)
    with pytest.raises(ValueError, match="steps must increase"):
        mon.update(10, 5.0)
    with pytest.raises(ValueError, match="finite"):
        mon.update(20, float("nan"))
    with pytest.raises(ValueError, match="beyond total_steps"):
        mon.update(10**6, 5.0)
    with pytest.raises(ValueError, match="threshold must be a number > 0"):
        ResidualMonitor(curve, run.controls, threshold=0.0)
    uncalibrated = fit_universal_curve(paper_family(TRUE), form="paper", calibrate=False)
    with pytest.raises(ValueError, match="no residual threshold"):
        ResidualMonitor(uncalibrated, run.controls)


def test_raw_loss_rule():
    t = np.linspace(0.01, 1, 200)
    falling = 3 + 1 / (t + 0.1)
    assert raw_loss_rise(t, falling) == 0.0
    assert raw_loss_alert(t, falling, 0.001) is None
    bumped = falling * np.where(t > 0.7, 1.05, 1.0)
    first = raw_loss_alert(t, bumped, 0.01)
    # the smoothed loss passes 1% above its running minimum shortly after the bump
    assert first is not None and 0.7 < first < 0.75
    assert raw_loss_rise(t, bumped) > 0.01
