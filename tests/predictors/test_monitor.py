from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from hpo.predictors import (
    ResidualBand,
    ResidualMonitor,
    fit_universal_curve,
    raw_loss_alert,
    raw_loss_rise,
    reference_band,
    runs_from_frame,
)
from hpo.predictors.monitor import (
    ALIGN_WINDOW,
    BAND_SIGMAS,
    JUMP_BASELINE,
    MIN_BAND,
    SMOOTH_WINDOW,
    calibrate_monitor,
    held_out_trace,
)
from tests.predictors._synth import make_run, paper_family

TRUE = (0.3, 0.5, 1.2, -0.2)
JUMP_NOISE = math.sqrt(1 + SMOOTH_WINDOW / JUMP_BASELINE)


@pytest.fixture(scope="module")
def curve():
    # calibrated: the misfit allowances come from the nine proxies' held-out residuals
    return fit_universal_curve(paper_family(TRUE, noise=0.003), form="paper")


def _target(noise=0.003, seed=3, n_params=2e7, schedule="linear"):
    return runs_from_frame(make_run("t", n_params, 2000, 1e-3, 20.0, TRUE, noise=noise,
                                    seed=seed, schedule=schedule))[0]


def _drifted(run):
    # +2% by the end, from t^ 0.5 (benchmarks/diagnose_drift.py)
    return run.losses * (1 + 0.02 * np.clip((run.t_hat - 0.5) / 0.5, 0, None))


def test_calibrate_monitor_takes_the_largest_excess_beyond_each_proxys_noise_band():
    t = np.linspace(0.1, 1.0, 91)
    noise = np.full(t.size, 0.001)
    quiet = np.column_stack([t, np.full(t.size, 0.002), np.full(t.size, np.nan), noise])
    off = quiet.copy()
    off[t > 0.5, 1] = 0.01  # a level 1% off the curve late in the run
    off[t > 0.5, 2] = 0.008  # and its jump
    early = quiet.copy()
    early[t <= 0.3, 1] = 0.05  # inside the alignment window: not counted
    cal = calibrate_monitor([(quiet, True), (off, False), (early, True), (None, True)])
    k = BAND_SIGMAS
    # the matched proxies stay within their k-noise band: no allowance; the held-out schedule
    # (not matched) sets the transfer allowances
    close = {"abs": 1e-6}  # stored to 7 digits
    assert cal["level"] == pytest.approx(0.0, **close)
    assert cal["jump"] == pytest.approx(0.0, **close)
    assert cal["level_transfer"] == pytest.approx(0.01 - k * 0.001, **close)
    assert cal["jump_transfer"] == pytest.approx(0.008 - k * JUMP_NOISE * 0.001, **close)
    assert cal["noise"] == pytest.approx(0.001, **close) and cal["proxies"] == 3


def test_calibrate_monitor_measures_at_the_k_and_window_it_is_given():
    t = np.linspace(0.1, 1.0, 91)
    noise = np.full(t.size, 0.001)
    quiet = np.column_stack([t, np.full(t.size, 0.002), np.full(t.size, np.nan), noise])
    early = quiet.copy()
    early[t <= 0.3, 1] = 0.05  # off the curve until t^ 0.3
    cal = calibrate_monitor([(quiet, True), (early, True)], band_sigmas=1.0)
    # k = 1: the quiet proxy's level of 0.002 is 0.001 beyond its 1-noise band
    assert cal["sigmas"] == 1.0 and cal["level"] == pytest.approx(0.001, abs=1e-6)
    # a window that ends at t^ 0.2 counts the early excess, at the default k
    cal = calibrate_monitor([(quiet, True), (early, True)], align_window=(0.1, 0.2))
    assert cal["sigmas"] == BAND_SIGMAS
    assert cal["level"] == pytest.approx(0.05 - BAND_SIGMAS * 0.001, abs=1e-6)


def test_band_is_stored_in_the_curves_calibration(curve):
    band = reference_band(curve)
    assert isinstance(band, ResidualBand) and band.noise > 0
    assert band.level >= 0 and band.jump >= 0
    # no held-out proxy leaves its band: the allowance covers the largest excess
    for run in runs_from_frame(paper_family(TRUE, noise=0.003)):
        trace = held_out_trace(curve, run.controls, run.steps, run.losses)
        after = trace[trace[:, 0] > 0.3]
        assert np.all(np.abs(after[:, 1]) <= BAND_SIGMAS * after[:, 3] + band.level + 1e-3)


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


def test_the_band_is_the_runs_own_noise_plus_the_allowance(curve):
    band = reference_band(curve)
    bands = {}
    for noise in (0.003, 0.01):
        run = _target(noise=noise, seed=4)
        mon = ResidualMonitor(curve, run.controls)
        assert mon.run(run.steps, run.losses) is None
        bands[noise] = (mon.state.noise, mon.threshold, mon.state.jump_band)
    for n, level_band, jump_band in bands.values():
        assert level_band == pytest.approx(max(BAND_SIGMAS * n + band.level, MIN_BAND))
        assert jump_band == pytest.approx(max(BAND_SIGMAS * JUMP_NOISE * n + band.jump,
                                              MIN_BAND))
    # a run three times as noisy gets about three times the noise; its band is wider by k
    # times the difference, the allowance being the family's
    assert bands[0.01][0] == pytest.approx(3.3 * bands[0.003][0], rel=0.3)
    assert bands[0.01][1] - bands[0.003][1] == pytest.approx(
        BAND_SIGMAS * (bands[0.01][0] - bands[0.003][0]))


def test_noise_of_an_already_smoothed_log_is_its_levels(curve):
    # a logged loss that is an EMA of a noisy one: consecutive points barely differ, its
    # level still carries the noise
    run = _target(noise=0.0)
    white = 0.02 * np.random.default_rng(0).standard_normal(run.losses.size)
    ema = np.zeros_like(white)
    for i in range(1, white.size):
        ema[i] = 0.9 * ema[i - 1] + 0.1 * white[i]
    mon = ResidualMonitor(curve, run.controls)
    mon.run(run.steps, run.losses * np.exp(ema))
    level_noise = np.array(mon.state.history)[:, 2]  # the level of the noise alone
    points = int(round(SMOOTH_WINDOW * run.steps.size))
    per_point = np.median(np.abs(np.diff(ema))) * 1.4826 / math.sqrt(2 * points)
    assert mon.state.noise > 3 * per_point
    assert mon.state.noise == pytest.approx(np.std(level_noise[-100:]), rel=0.7)


def test_alert_on_an_injected_step_comes_from_the_jump(curve):
    run = _target()
    losses = run.losses * np.where(run.t_hat >= 0.6, 1.03, 1.0)  # +3% from t^ 0.6 on
    mon = ResidualMonitor(curve, run.controls)
    first = mon.run(run.steps, losses)
    # the jump leaves its band within a few points of the step, before a fixed 1% threshold
    assert first is not None and 0.6 < first < 0.61 and mon.state.alert_kind == "jump"
    fixed = ResidualMonitor(curve, run.controls, threshold=0.01)
    assert first < fixed.run(run.steps, losses)
    assert mon.state.alerted and mon.state.residual > mon.threshold


def test_a_slow_drift_is_caught_where_the_family_is_tight(curve):
    run = _target()
    mon = ResidualMonitor(curve, run.controls)
    # +1% at t^ 0.75, while the smoothed raw loss still falls
    first = mon.run(run.steps, _drifted(run))
    assert first is not None and 0.5 < first < 0.75
    assert raw_loss_alert(run.t_hat, _drifted(run), 0.001) is None
    # the jump sees it before the level leaves its own band
    level_only = ResidualMonitor(curve, run.controls, threshold=mon.threshold)
    assert mon.state.alert_kind == "jump" and first < level_only.run(run.steps, _drifted(run))


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


def test_window_and_k_are_the_monitors_parameters(curve):
    band = reference_band(curve)
    run = _target()
    default = ResidualMonitor(curve, run.controls)
    assert default.align_window == ALIGN_WINDOW and default.band_sigmas == BAND_SIGMAS
    wide = ResidualMonitor(curve, run.controls, band_sigmas=2 * BAND_SIGMAS)
    assert wide.run(run.steps, run.losses) is None
    # the level's band is k times the run's noise plus the family's allowance, at the k given
    assert wide.threshold == pytest.approx(max(2 * BAND_SIGMAS * wide.state.noise + band.level,
                                               MIN_BAND))
    # a later window: the run is aligned on t^ 0.2-0.45 and judged only after it
    losses = run.losses * np.where((run.t_hat > 0.3) & (run.t_hat < 0.4), 1.2, 1.0)
    late = ResidualMonitor(curve, run.controls, threshold=0.01, align_window=(0.2, 0.45))
    for s, v in zip(run.steps, losses, strict=True):
        alert = late.update(float(s), float(v))
        assert not (alert and s / run.controls.total_steps <= 0.45)
    assert late.state.history[0][0] >= 0.2
    assert ResidualMonitor(curve, run.controls, threshold=0.01).run(run.steps, losses) < 0.4


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"align_window": (0.3, 0.1)}, "0 <= lo < hi <= 1"),
    ({"align_window": (0.1,)}, "two numbers"),
    ({"band_sigmas": -1.0}, "band_sigmas must be a number >= 0"),
    ({"band_sigmas": True}, "band_sigmas must be a number >= 0"),
])
def test_monitor_rejects_a_bad_window_or_k(curve, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ResidualMonitor(curve, _target().controls, **kwargs)


def test_only_the_allowance_widens_beyond_the_proxies(curve):
    band = reference_band(curve)
    inside, bigger = _target(), _target(n_params=4e8)
    mons = [ResidualMonitor(curve, r.controls) for r in (inside, bigger)]
    for mon, run in zip(mons, (inside, bigger), strict=True):
        mon.run(run.steps, run.losses)
    assert mons[0].widening == 1.0
    # ten times the largest proxy: the allowance widened as its prediction interval is, the
    # run's own noise not
    assert mons[1].widening == pytest.approx(1 + 2.0 * math.log(10), rel=1e-6)
    n = mons[1].state.noise
    assert mons[1].threshold == pytest.approx(BAND_SIGMAS * n + mons[1].widening * band.level)


def test_a_schedule_no_proxy_ran_gets_the_transfer_allowance_and_no_jump():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hybrid = fit_universal_curve(paper_family(TRUE, noise=0.003))  # linear decay only
    band = reference_band(hybrid)
    run = _target(schedule="cosine")
    mon = ResidualMonitor(hybrid, run.controls)
    mon.run(run.steps, run.losses * np.where(run.t_hat >= 0.6, 1.03, 1.0))
    assert not mon.matched and mon.state.jump_band is None
    assert mon.threshold == pytest.approx(max(BAND_SIGMAS * mon.state.noise
                                              + band.level_transfer, MIN_BAND))
    assert mon.state.alert_kind in (None, "level")


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
    assert reference_band(uncalibrated) is None
    with pytest.raises(ValueError, match="no residual band"):
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


def test_raw_loss_rule_starts_at_the_windows_start():
    t = np.linspace(0.01, 1, 400)
    bumped = (3 + 1 / (t + 0.1)) * np.where((t > 0.15) & (t < 0.2), 1.3, 1.0)
    # from t^ 0.1 (the default window) the bump is a rise; from t^ 0.3 it is gone
    assert raw_loss_alert(t, bumped, 0.01) < 0.2 and raw_loss_rise(t, bumped) > 0.01
    assert raw_loss_alert(t, bumped, 0.01, align_window=(0.3, 0.5)) is None
    assert raw_loss_rise(t, bumped, align_window=(0.3, 0.5)) == 0.0


def _lr_family_run(run_id, n_params, lr, seed, noise=0.003):
    # the base LR reshapes the normalized curve beyond tau (a higher LR is higher early and
    # ends alike), as in the quickstart's grid; tau is fixed, the base LR is a covariate
    frame = make_run(run_id, n_params, 2000, 1e-3, 20.0, TRUE, noise=noise, seed=seed)
    t = frame["step"] / 2000
    frame["loss"] *= 1 + 0.15 * math.log(lr / 0.01) * (1 - t) ** 2
    frame["base_lr"] = lr
    return frame


def test_the_reference_is_the_runs_own_expected_curve_at_its_base_lr():
    import pandas as pd

    proxies = pd.concat([_lr_family_run(f"p{i}-{lr}", 1e7, lr, seed=10 * i + j)
                         for i in range(2) for j, lr in enumerate((0.005, 0.01, 0.02))],
                        ignore_index=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        curve = fit_universal_curve(proxies)
    assert "log_lr" in curve._covariates()
    high = runs_from_frame(_lr_family_run("t", 2e7, 0.02, seed=99))[0]
    mon = ResidualMonitor(curve, high.controls)
    assert mon.run(high.steps, high.losses) is None  # a clean trial at a high LR: no drift
    # the reference it passed is the curve at its own LR, which sits well apart from the
    # recipe's: against that one its residual would leave the band
    t = np.linspace(0.35, 0.9, 12)
    own = curve.predict(t, high.controls)
    recipe = curve.predict(t, high.controls.with_(base_lr=0.01))
    assert np.max(np.abs(np.log(own / recipe))) > 3 * mon.state.band
