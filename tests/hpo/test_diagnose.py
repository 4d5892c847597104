from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from hpo.diagnose import ResidualCallback, clean_raw_x, diagnose_runs, format_diagnoses
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
    # the step is caught by the jump; at the alert the level and jump are the first beyond
    # their bands, which the diagnosis records point by point
    i = int(np.searchsorted(d.t_hat, d.alert_t))
    assert d.alert_kind == "jump" and d.alert_value == d.jump[i]
    assert d.alert_band == d.jump_band[i]
    assert abs(d.alert_value) > d.alert_band and d.alert_residual == d.residual[i]
    assert d.threshold == d.band[i]
    before = (d.t_hat > 0.3) & (d.t_hat < d.alert_t)
    assert np.all(np.abs(d.residual[before]) <= d.band[before])
    judged = before & np.isfinite(d.jump)
    assert judged.any() and np.all(np.abs(d.jump[judged]) <= d.jump_band[judged])
    assert d.to_dict()["alert_kind"] == "jump" and len(d.to_dict()["band"]) == d.t_hat.size


def test_residual_plot_labels_every_line_the_band_and_the_axes(curve, target, tmp_path):
    from dataclasses import replace

    import matplotlib.pyplot as plt

    from hpo.diagnose import _residuals_figure, plot_residuals

    broken = replace(target, run_id="trial-1",
                     losses=target.losses * np.where(target.t_hat >= 0.6, 1.03, 1.0))
    verify = replace(target, run_id="trial-1-verify")
    # one fixed threshold for all three (the calibrated bands follow each run's own noise)
    diagnoses = diagnose_runs([target, broken, verify], curve, threshold=0.01)
    labels = {"trial-1": "trial-1 lr=0.001, tau=5: kept"}
    fig = _residuals_figure(diagnoses, "residuals", labels)
    ax = fig.axes[0]
    entries = [t.get_text() for t in ax.get_legend().get_texts()]
    th = 100 * diagnoses[0].threshold
    # the band says what it is and its width; every run's line is named (by the given label,
    # else its run id), the alerting one with the t^ of its alert
    assert entries[0] == f"alert band \u00b1{th:.2f}% (monitor threshold, 3 runs)"
    assert entries[1].startswith("alignment window, t^ 0.1-0.3") and entries[2] == "first alert"
    assert entries[3:] == ["t", f"trial-1 lr=0.001, tau=5: kept, alert at t^ "
                                f"{diagnoses[1].alert_t:.2f}", "trial-1-verify"]
    # a continued run is dashed in its run's color
    lines = {line.get_label(): line for line in ax.lines}
    assert lines["trial-1-verify"].get_color() == lines[entries[4]].get_color()
    assert lines["trial-1-verify"].get_linestyle() == "--"
    assert "%" in ax.get_ylabel() and "step / T" in ax.get_xlabel()
    plt.close(fig)
    path = plot_residuals(diagnoses, tmp_path / "r.png", labels=labels)
    assert path == tmp_path / "r.png" and path.stat().st_size > 0


def test_the_raw_loss_rule_sits_beside_the_residual_alert(curve, target):
    from dataclasses import replace

    from hpo.diagnose import clean_raw_x

    rising = replace(target, run_id="rising",
                     losses=target.losses * np.where(target.t_hat >= 0.6, 1.10, 1.0))
    x = clean_raw_x([target])
    assert x >= 0 and clean_raw_x([]) == 0.0
    clean, broken = diagnose_runs([target, rising], curve, raw_x=x)
    # x is the clean run's largest rise: that run never alerts; a 10% step up alerts at 0.6
    assert clean.raw_alert_t is None
    assert broken.raw_alert_t == pytest.approx(0.6, abs=0.01)
    assert broken.to_dict(trace=False)["raw_alert_t"] == pytest.approx(broken.raw_alert_t)
    table = format_diagnoses([clean, broken], x)
    assert f"x = {100 * x:.2f}%" in table and f"| {broken.raw_alert_t:.2f} |" in table
    # without raw_x the rule is not run and the column is not shown
    assert diagnose_runs([rising], curve)[0].raw_alert_t is None
    assert "raw-loss" not in format_diagnoses([clean])


def test_diagnose_runs_and_the_callback_take_the_monitors_window_and_k(curve, target):
    default, = diagnose_runs([target], curve)
    tight, = diagnose_runs([target], curve, band_sigmas=1.0)
    late, = diagnose_runs([target], curve, align_window=(0.2, 0.5))
    # a smaller k narrows the band; a later window starts the residual later
    assert tight.threshold < default.threshold
    assert late.t_hat[0] >= 0.2 > default.t_hat[0]
    cb = ResidualCallback(curve, target.controls, align_window=(0.2, 0.5), band_sigmas=1.0)
    assert (cb.monitor.align_window, cb.monitor.band_sigmas) == ((0.2, 0.5), 1.0)


def test_raw_rule_starts_at_the_window_given(target):
    losses = target.losses * np.where((target.t_hat > 0.15) & (target.t_hat < 0.2), 1.05, 1.0)
    run = runs_from_frame(make_run("bump", 2e7, 2000, 1e-3, 20.0, TRUE, noise=0.003, seed=3)
                          .assign(loss=losses))[0]
    # the early bump sets x from t^ 0.1 on, and is not seen from t^ 0.3 on
    assert clean_raw_x([run]) > 0.01
    assert clean_raw_x([run], align_window=(0.3, 0.5)) < 0.01
