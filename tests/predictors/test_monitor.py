from __future__ import annotations

import numpy as np
import pytest

from hpo.predictors import ResidualMonitor, fit_universal_curve, runs_from_frame
from tests.predictors._synth import make_run, paper_family

TRUE = (0.3, 0.5, 1.2, -0.2)


@pytest.fixture(scope="module")
def curve():
    return fit_universal_curve(paper_family(TRUE), form="paper", calibrate=False)


def _target(noise=0.002):
    return runs_from_frame(make_run("t", 2e7, 2000, 1e-3, 20.0, TRUE, noise=noise, seed=3))[0]


def test_monitor_no_alert_on_a_collapsing_run(curve):
    run = _target()
    mon = ResidualMonitor(curve, run.controls, k=4.0, n=5)
    assert mon.run(run.steps, run.losses) is None


def test_monitor_reports_first_alert_after_injected_drift(curve):
    run = _target()
    losses = run.losses * np.where(run.t_hat > 0.6, 1 + 0.3 * (run.t_hat - 0.6), 1.0)
    mon = ResidualMonitor(curve, run.controls, k=4.0, n=5)
    first = mon.run(run.steps, losses)
    # the residual leaves the noise band soon after the drift starts at t^ = 0.6
    assert first is not None and 0.6 < first < 0.75


def test_monitor_rejects_bad_points(curve):
    run = _target()
    mon = ResidualMonitor(curve, run.controls)
    mon.update(10, 5.0)
    with pytest.raises(ValueError, match="steps must increase"):
        mon.update(10, 5.0)
    with pytest.raises(ValueError, match="finite"):
        mon.update(20, float("nan"))
    with pytest.raises(ValueError, match="align_window"):
        ResidualMonitor(curve, run.controls, align_window=(0.5, 0.2))
