"""A run's twin (the proxy at its own settings): finding it, the twin peer, the curve's term."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from hpo.predictors import fit_universal_curve, load_universal_curve, runs_from_frame
from hpo.predictors.curves import EmpiricalCurve, shape_covariates
from hpo.predictors.normalize import final_loss_estimate
from hpo.predictors.peers import TwinPredictor
from hpo.predictors.predict import CollapsePredictor, align_final_loss, collapse_final
from hpo.predictors.schedules import Controls
from hpo.predictors.twins import find_twin, same_settings, settings_distance

from ._synth import make_run


def _c(**kw) -> Controls:
    base = {"total_steps": 1000, "peak_lr": 1e-3, "batch_tokens": 1e5, "tpp": 20.0,
            "n_params": 1e7}
    return Controls(**{**base, **kw})


def test_same_settings_compares_lr_and_batch_where_known():
    assert same_settings(_c(), _c(n_params=1e8, tpp=40.0))
    assert not same_settings(_c(), _c(peak_lr=2e-3))
    assert not same_settings(_c(), _c(batch_tokens=2e5))
    assert same_settings(_c(), _c(batch_tokens=None))  # unknown: not compared
    assert not same_settings(_c(peak_lr=None), _c(peak_lr=None))  # no LR: no twin
    # the base LR (the setting CompleteP shares across widths) beats the scaled peak LR
    assert same_settings(_c(base_lr=1e-2, peak_lr=1e-3), _c(base_lr=1e-2, peak_lr=5e-4))


def test_settings_distance_uses_tpp_or_steps_and_size():
    assert settings_distance(_c(), _c(tpp=40.0)) == pytest.approx(math.log(2))
    assert settings_distance(_c(), _c(peak_lr=2e-3, tpp=40.0)) == pytest.approx(
        math.sqrt(2) * math.log(2))
    # TPP unknown: the steps and the size each count
    a, b = _c(tpp=None), _c(tpp=None, n_params=4e7, total_steps=1000)
    assert settings_distance(a, b) == pytest.approx(math.log(4))


def test_find_twin_prefers_same_settings_then_nearest_tpp_then_size():
    proxies = [_c(peak_lr=2e-3), _c(tpp=80.0), _c(tpp=30.0, n_params=2e7),
               _c(tpp=30.0, n_params=1e6)]
    target = _c(n_params=1e8, tpp=20.0 * 1.5)
    assert find_twin(target, proxies, range(4)) == (2, pytest.approx(0.0))
    assert find_twin(target, proxies, [0, 1])[0] == 1  # the other LR is no twin
    assert find_twin(target, proxies, [0]) is None
    assert find_twin(target, proxies, [0], same=False)[0] == 0
    assert find_twin(proxies[2], proxies, range(4), other_size_than=2e7)[0] == 3


def _family() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Proxies at two LRs and two sizes (one batch, TPP 20), and a larger target that is the
    small LR-1e-3 proxy's curve, 1.3x higher."""
    proxies = pd.concat([make_run(f"p{n:g}-{lr:g}", n, int(2000 * n / 1e7), lr, 20.0)
                         for n in (1e7, 2e7) for lr in (1e-3, 2e-3)], ignore_index=True)
    target = make_run("p1e+07-0.001", 1e7, 2000, 1e-3, 20.0)
    target = target.assign(run_id="target", n_params=8e7, loss=target["loss"] * 1.3)
    return proxies, target


def test_twin_predictor_reads_the_twins_curve_and_declines_without_one():
    proxies, target = _family()
    runs = runs_from_frame(proxies)
    twin = TwinPredictor(runs)
    cal = twin.calibrate([0.1, 0.2])
    # each proxy predicted from its twin of the other size
    assert all(e is not None for e in cal["errors"][1])
    assert twin.calibration is cal
    (run,) = runs_from_frame(target)
    keep = run.t_hat <= 0.2
    pred = twin.predict(run.steps[keep], run.losses[keep], run.controls)
    true_twin = next(r for r in runs if r.run_id == "p2e+07-0.001")  # nearest size, same TPP
    expected = 1.3 * final_loss_estimate(true_twin.t_hat, true_twin.losses, at=1.0)
    assert pred.final == pytest.approx(expected, rel=2e-3)
    assert pred.method == "twin"
    with pytest.raises(ValueError, match="no proxy ran"):
        twin.predict(run.steps[keep], run.losses[keep], run.controls.with_(peak_lr=5e-3))


def test_curve_twin_term_carries_a_near_twins_residual_and_round_trips():
    proxies, _ = _family()
    runs = runs_from_frame(proxies)
    plain = EmpiricalCurve(twin_width=0.0).fit(runs)
    near = EmpiricalCurve(twin_width=0.5).fit(runs)
    c = next(r.controls for r in runs if r.run_id == "p2e+07-0.001")  # a proxy's own: w 1
    idx, weight = near.twin(c)
    assert near.run_ids[idx] == "p2e+07-0.001" and weight == pytest.approx(1.0)
    # its residual against the other proxies' curve at its controls, added with weight 1
    idx_all = near.matches(c)
    residual = near.log_curves[idx] - near._local(near.z[idx], idx_all[idx_all != idx])
    gained = near.grid_curve(c) - plain.grid_curve(c)
    ok = np.isfinite(residual)
    assert np.allclose(gained[ok], residual[ok]) and np.abs(residual[ok]).max() > 1e-4
    grid = near.grid[near.grid >= 0.1]
    assert plain.twin(c) is None and plain.twin_weight(c) == 0.0
    far = c.with_(peak_lr=4e-3)  # nearest: the 2e-3 proxy of its size
    i, w = near.twin(far)
    assert near.run_ids[i] == "p2e+07-0.002"
    d = settings_distance(far, near.settings[i])
    assert 0 < d and w == pytest.approx(math.exp(-0.5 * (d / 0.5) ** 2))
    loaded = load_universal_curve(near.to_dict())
    assert loaded.twin(c) == (idx, pytest.approx(1.0))
    assert np.allclose(loaded.predict(grid, c), near.predict(grid, c))
    old = near.to_dict()
    for key in ("settings", "twin_width"):
        del old["params"][key]
    assert load_universal_curve(old).twin(c) is None  # a curve saved without them: no term


def test_default_curve_has_no_twin_term_and_a_twin_turns_the_stretch_off():
    proxies, _ = _family()
    curve = fit_universal_curve(proxies, calibrate=False)
    run = runs_from_frame(proxies)[0]
    assert curve.twin_weight(run.controls) == 0.0  # TWIN_WIDTH = 0: chosen leave one source out
    assert CollapsePredictor(curve).predict(run.steps[:40], run.losses[:40], run.controls)
    losses, lhat = np.array([5.0, 4.0, 3.5, 3.2, 3.1, 3.0]), np.array(
        [2.0, 1.5, 1.3, 1.2, 1.15, 1.1])
    assert collapse_final(losses, lhat, 0.5, twin=1.0) == pytest.approx(
        align_final_loss(losses, lhat))
    assert collapse_final(losses, lhat, 0.5) != pytest.approx(align_final_loss(losses, lhat))


def test_size_trend_adds_log_size_beside_tpp_only_where_sizes_span():
    two = [_c(), _c(n_params=4e7)]
    assert shape_covariates(two, size=True)[0] == ["log_tpp", "log_n_params"]
    assert shape_covariates(two)[0] == ["log_tpp"]
    assert shape_covariates([_c(), _c(tpp=40.0)], size=True)[0] == ["log_tpp"]


def test_curve_options_reach_the_fit_its_refits_and_its_json():
    proxies, _ = _family()
    curve = fit_universal_curve(proxies, size_trend=True, twin_width=0.3)
    assert curve.empirical.covariates[:2] == ["log_tpp", "log_n_params"]
    refit = curve.blank()  # what the held-out calibration refits start from
    assert (refit.empirical.size_trend, refit.empirical.twin_width) == (True, 0.3)
    assert curve.calibration is not None
    loaded = load_universal_curve(curve.to_dict())
    assert (loaded.empirical.size_trend, loaded.empirical.twin_width) == (True, 0.3)
    with pytest.raises(TypeError):
        fit_universal_curve(proxies, form="paper", size_trend=True)
