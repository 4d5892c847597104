"""The pair prior (hpo.predictors.prior): its law, its fit, the shipped default, and the
collapse predictor's side of it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from hpo.predictors.prior import (
    FEATURES,
    PairPrior,
    default_prior,
    fit_pair_prior,
    load_pair_prior,
    pair_log_scales,
    setting_distance,
)


def test_side_scale_is_log_linear_in_the_features_with_a_default_proxy_scale():
    prior = PairPrior(-3.0, {"extrapolation": 0.5, "log_proxy_scale": 1.0},
                      default_log_proxy_scale=math.log(0.02))
    near = prior.side_scale({"extrapolation": 0.0, "log_proxy_scale": math.log(0.01)})
    far = prior.side_scale({"extrapolation": 1.0, "log_proxy_scale": math.log(0.01)})
    assert near == pytest.approx(math.exp(-3.0) * 0.01)
    assert far == pytest.approx(near * math.exp(0.5))
    # a source whose proxies measured no pair error reads the prior's default
    assert prior.side_scale({"log_proxy_scale": None}) == pytest.approx(math.exp(-3.0) * 0.02)


def test_setting_distance_is_the_larger_log_ratio_of_the_known_settings():
    assert setting_distance(0.01, 0.04, 1.0, 0.25) == pytest.approx(math.log(4))
    # a weight-decay sweep moves tau alone; an LR sweep at fixed weight decay moves both alike
    assert setting_distance(0.01, 0.01, 1.0, 16.0) == pytest.approx(math.log(16))
    # unknown (0) settings count nothing
    assert setting_distance(0.0, 0.04, 0.0, 2.0) == 0.0
    assert setting_distance(0.01, 0.02, 0.0, 2.0) == pytest.approx(math.log(2))


def test_a_pair_is_judged_on_its_wider_side_widened_by_the_lr_ratio():
    params = np.array([-4.0, 1.0, 0.6])  # intercept, one feature's coefficient, lr slope
    xa, xb = np.array([[0.0], [2.0]]), np.array([[1.0], [0.5]])
    ls = pair_log_scales(params, xa, xb, np.array([0.0, math.log(4)]))
    assert ls[0] == pytest.approx(-3.0)
    assert ls[1] == pytest.approx(-2.0 + 0.6 * math.log(4))


def test_fit_pair_prior_recovers_a_known_law():
    rng = np.random.default_rng(1)
    n = 4000
    xa = rng.uniform(0, 1, (n, 1))
    xb = rng.uniform(0, 1, (n, 1))
    dist = np.abs(rng.normal(0, 1, n))
    true = np.array([math.log(0.01), 0.8, 0.5])
    s = np.exp(pair_log_scales(true, xa, xb, dist))
    d = s * stats.t.rvs(4, size=n, random_state=rng)
    prior = fit_pair_prior(d, xa, xb, dist, ("extrapolation",))
    assert prior.intercept == pytest.approx(true[0], abs=0.15)
    assert prior.coef["extrapolation"] == pytest.approx(0.8, abs=0.2)
    assert prior.distance_slope == pytest.approx(0.5, abs=0.1)
    assert 2.5 < prior.dof < 7
    # without the LR term the law has none
    plain = fit_pair_prior(d, xa, xb, dist, ("extrapolation",), use_distance=False)
    assert plain.distance_slope == 0.0
    with pytest.raises(ValueError, match="at least 10 pairs"):
        fit_pair_prior(d[:5], xa[:5], xb[:5], dist[:5], ("extrapolation",))


def test_prior_round_trips_and_rejects_bad_fields(tmp_path):
    prior = PairPrior(-4.2, {"t_hat": -1.0}, 0.3, 3.5, math.log(0.015), {"held_out": "x"})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(prior.to_dict()))
    assert load_pair_prior(path) == prior
    with pytest.raises(ValueError, match="intercept"):
        load_pair_prior({"coef": {}})
    with pytest.raises(ValueError, match="unknown pair-prior feature"):
        PairPrior(0.0, {"colour": 1.0})
    with pytest.raises(ValueError, match="dof"):
        PairPrior(0.0, {}, dof=0.0)


def test_the_shipped_prior_is_fitted_on_every_source():
    prior = default_prior()
    assert set(prior.coef) <= set(FEATURES)
    assert prior.dof > 0 and prior.meta.get("made_by", "").startswith("benchmarks/pair_prior.py")
    assert len(prior.meta.get("fitted_on", [])) >= 4


def test_collapse_predictions_carry_their_evidence_and_side_of_the_prior():
    from hpo.predictors import CollapsePredictor, fit_universal_curve, runs_from_frame
    from tests.predictors._synth import paper_family

    frame = paper_family(noise=0.002)
    curve = fit_universal_curve(frame, form="paper")
    prior = PairPrior(-1.0, {"log_proxy_scale": 1.0, "inv_points": 2.0}, distance_slope=0.4,
                      dof=3.0)
    pred = CollapsePredictor(curve, prior=prior)
    run = runs_from_frame(frame)[4]
    keep = run.t_hat <= 0.2
    p = pred.predict(run.steps[keep], run.losses[keep], run.controls)
    ev = p.evidence
    assert set(ev) == set(FEATURES)
    assert ev["log_proxy_scale"] == pytest.approx(math.log(pred.proxy_pair_scale.scale(p.t_hat)))
    assert ev["transfer"] == 0.0 and ev["steep"] == 0.0
    assert p.pair_scale == pytest.approx(prior.side_scale(ev))
    assert p.pair_dof == 3.0 and p.distance_slope == 0.4
    # two points after the warmup are enough, and earn a wider side than many
    steps = run.steps[keep]
    first = steps[steps / run.controls.total_steps >= 0.05][:2]
    short = pred.predict(first, run.losses[np.isin(run.steps, first)], run.controls)
    assert short.evidence["inv_points"] == 0.5
    assert short.pair_scale > p.pair_scale


def test_the_default_threshold_is_the_one_chosen_with_the_shipped_prior():
    from hpo.pruning import DEFAULT_THRESHOLD

    meta = default_prior().meta
    assert DEFAULT_THRESHOLD == meta["threshold"]
    # most sources held out chose the same one
    chosen = list(meta["threshold_by_held_out_source"].values())
    assert chosen.count(DEFAULT_THRESHOLD) > len(chosen) / 2
