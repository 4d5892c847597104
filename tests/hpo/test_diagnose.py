from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from hpo.diagnose import ResidualCallback, diagnose_runs, format_diagnoses
from hpo.predictors import fit_universal_curve, runs_from_frame
from tests.predictors._synth import make_run, paper_family

TRUE = (0.3, 0.5, 1.2, -0.2)


@pytest.fixture(scope="module")
def curve():
    return fit_universal_curve(paper_family(TRUE, noise=0.003), form="paper")


def _points(run, bump_from: float | None = None):
    losses = run.losses.copy()
    if bump_from is not None:
        losses = losses * np.where(run.t_hat >= bump_from, 1.03, 1.0)
    return [SimpleNamespace(step=int(s), train_loss=float(v))
            for s, v in zip(run.steps, losses, strict=True)]


@pytest.fixture(scope="module")
def target():
    return runs_from_frame(make_run("t", 2e7, 2000, 1e-3, 20.0, TRUE, noise=0.003, seed=3))[0]


def test_callback_keeps_reports_and_stops_on_the_first_alert(curve, target):
    seen = []
    cb = ResidualCallback(curve, target.controls, stop_on_alert=True, on_alert=seen.append)
    answers = [cb(p) for p in _points(target, bump_from=0.6)]
    # one report, at the first alert; from then on the callback asks the loop to stop
    assert len(seen) == 1 and seen[0] is cb.alert
    first = answers.index(True)
    assert target.t_hat[first] == pytest.approx(cb.alert["t_hat"])
    assert all(answers[first:]) and not any(answers[:first])
    assert abs(cb.alert["residual"]) > cb.alert["threshold"] > 0


def test_callback_without_stop_only_reports_and_chains(curve, target, caplog):
    calls = []

    def pruner(point):
        calls.append(point.step)
        return point.step == 1500

    cb = ResidualCallback(curve, target.controls, name="trial 7", then=pruner)
    with caplog.at_level(logging.WARNING, logger="hpo.diagnose"):
        answers = [cb(p) for p in _points(target, bump_from=0.6)]
    # the chained callback sees every point and alone decides the stop
    assert len(calls) == len(answers)
    assert [p for p, a in zip(target.steps, answers, strict=True) if a] == [1500]
    # without on_alert the alert is logged, once
    alerts = [r for r in caplog.records if "residual alert" in r.getMessage()]
    assert len(alerts) == 1 and alerts[0].getMessage().startswith("trial 7: residual alert")


def test_callback_skips_non_finite_and_repeated_points(curve, target):
    cb = ResidualCallback(curve, target.controls)
    pts = _points(target)
    for p in pts[:50]:
        cb(p)
    cb(SimpleNamespace(step=pts[49].step, train_loss=pts[49].train_loss))  # a resume's repeat
    cb(SimpleNamespace(step=pts[50].step, train_loss=float("nan")))
    for p in pts[51:]:
        cb(p)
    assert cb.alert is None and cb.max_abs_residual is not None


def test_diagnose_runs_names_runs_it_cannot_monitor(curve, target):
    short = runs_from_frame(make_run("short", 2e7, 2000, 1e-3, 20.0, TRUE).head(40))[0]
    out = diagnose_runs([target, short], curve)
    assert out[0].alert_t is None and out[0].max_abs_residual < out[0].threshold
    assert out[0].alert_residual is None
    assert out[1].note and "alignment window" in out[1].note
    table = format_diagnoses(out)
    assert "| t |" in table and "alignment window" in table


def test_diagnosis_of_a_broken_run_gives_the_residual_at_its_alert(curve, target):
    from dataclasses import replace

    broken = replace(target, losses=target.losses * np.where(target.t_hat >= 0.6, 1.03, 1.0))
    (d,) = diagnose_runs([broken], curve)
    assert 0.6 < d.alert_t < 0.7
    # the residual at the alert is the first one beyond the band
    i = int(np.searchsorted(d.t_hat, d.alert_t))
    assert d.alert_residual == d.residual[i] and abs(d.alert_residual) > d.threshold
    assert np.all(np.abs(d.residual[(d.t_hat > 0.3) & (d.t_hat < d.alert_t)]) <= d.threshold)
