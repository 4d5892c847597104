from __future__ import annotations

import math

import numpy as np
import pytest

from hpo.predictors import (
    CollapsePredictor,
    Controls,
    Prediction,
    align_final_loss,
    fit_universal_curve,
    runs_from_frame,
)
from hpo.predictors.calibrate import prefix_errors
from hpo.predictors.predict import halfwidth_from_errors
from hpo.predictors.prior import PairPrior
from tests.predictors._synth import make_run, paper_family

TRUE = (0.3, 0.5, 1.2, -0.2)


@pytest.fixture(scope="module")
def curve():
    # the synthetic family follows the paper form exactly, so that form is exact here
    return fit_universal_curve(paper_family(TRUE), form="paper")


def test_align_final_loss_closed_form():
    lhat = np.array([1.3, 1.2, 1.1])
    assert align_final_loss(2.5 * lhat, lhat) == pytest.approx(2.5)
    # weighted: only the last point counts
    assert align_final_loss(np.array([9.0, 9.0, 2.2]), lhat, np.array([0, 0, 1.0])) == (
        pytest.approx(2.0)
    )


def test_collapse_predictor_exact_on_a_collapsing_target(curve):
    target = runs_from_frame(make_run("t", 3e7, 3000, 1.5e-3, 25.0, TRUE, final=2.7))[0]
    pred = CollapsePredictor(curve, level=0.8)
    keep = target.t_hat <= 0.2
    p = pred.predict(target.steps[keep], target.losses[keep], target.controls)
    assert isinstance(p, Prediction) and p.method == "collapse" and p.level == 0.8
    # the target follows the universal curve, so the divisor is its final loss
    assert p.final == pytest.approx(2.7, rel=2e-3)
    assert p.lower <= p.final <= p.upper
    assert p.t_hat == pytest.approx(target.t_hat[keep][-1])


def test_collapse_predictor_interval_covers_noisy_targets():
    # proxies as noisy as the targets: the leave-one-out errors then include the noise
    noisy = fit_universal_curve(paper_family(TRUE, noise=0.002), form="paper")
    pred = CollapsePredictor(noisy, level=0.8)
    covered = []
    for seed in range(10):
        run = runs_from_frame(make_run("t", 2e7, 2000, 1e-3, 20.0, TRUE, final=3.0,
                                       noise=0.002, seed=100 + seed))[0]
        keep = run.t_hat <= 0.3
        p = pred.predict(run.steps[keep], run.losses[keep], run.controls)
        covered.append(p.lower <= 3.0 <= p.upper)
        assert abs(p.final / 3.0 - 1) < 0.01
    assert np.mean(covered) >= 0.5


@pytest.mark.parametrize(
    ("steps", "losses", "match"),
    [
        ([100], [3.0], "at least 2"),
        ([100, 200], [3.0, np.nan], "finite"),
        ([100, 5000], [3.0, 2.9], "beyond total_steps"),
    ],
)
def test_collapse_predictor_rejects_malformed_prefix(curve, steps, losses, match):
    c = runs_from_frame(paper_family(TRUE))[0].controls
    with pytest.raises(ValueError, match=match):
        CollapsePredictor(curve).predict(np.array(steps), np.array(losses), c)


def test_collapse_predictor_missing_controls_raises(curve):
    c = runs_from_frame(paper_family(TRUE))[0].controls.with_(tau=None, tpp=None)
    c = c.with_(n_params=None)
    with pytest.raises(ValueError, match="needs the controls"):
        CollapsePredictor(curve).predict(np.array([100, 200, 300]), np.array([4.0, 3.9, 3.8]), c)


def test_halfwidth_from_errors_quantile_of_absolute_errors_interpolates_in_t():
    cal = {"fractions": [0.1, 0.3], "errors": [list(np.linspace(-0.1, 0.1, 101)),
                                                list(np.linspace(-0.01, 0.01, 101))]}
    # |e| at 0.1 is uniform on [0, 0.1]: q80 = 0.08; at 0.3, 0.008; halfway between at 0.2
    assert halfwidth_from_errors(cal, 0.1, 0.8) == pytest.approx(0.08, abs=1e-3)
    assert halfwidth_from_errors(cal, 0.2, 0.8) == pytest.approx(0.044, abs=1e-3)
    assert halfwidth_from_errors(cal, 0.9, 0.8) == pytest.approx(0.008, abs=1e-3)
    with pytest.raises(ValueError, match="fewer than 2"):
        halfwidth_from_errors({"fractions": [0.1], "errors": [[0.1, None]]}, 0.1, 0.8)


def test_interval_is_symmetric_in_log_whatever_the_sign_of_the_errors():
    from hpo.predictors import Controls
    from hpo.predictors.peers import LastValuePredictor

    pred = LastValuePredictor(level=0.8)
    c = Controls(total_steps=100)
    for errors in (np.linspace(0, 0.1, 101), np.linspace(-0.1, 0, 101)):
        # the proxies' predictions were all too high (or all too low): the interval still
        # reaches both ways, by the 80% quantile of the absolute errors (0.08)
        pred.calibration = {"fractions": [0.1, 0.5], "errors": [list(errors)] * 2}
        p = pred.predict(np.array([10, 20, 30]), np.array([3.0, 2.5, 2.0]), c)
        assert p.lower == pytest.approx(p.final * math.exp(-0.08), rel=1e-3)
        assert p.upper == pytest.approx(p.final * math.exp(0.08), rel=1e-3)


def test_collapse_predictor_default_form_close_on_proxy_like_target():
    hybrid = fit_universal_curve(paper_family(TRUE))
    run = runs_from_frame(make_run("t", 2e7, 2000, 1e-3, 20.0, TRUE, final=2.9))[0]
    keep = run.t_hat <= 0.2
    p = CollapsePredictor(hybrid).predict(run.steps[keep], run.losses[keep], run.controls)
    assert p.final == pytest.approx(2.9, rel=2e-3)


def test_prefix_errors_zero_for_exact_curve(curve):
    run = runs_from_frame(make_run("t", 2e7, 2000, 1e-3, 20.0, TRUE))[0]
    errs = prefix_errors(CollapsePredictor(curve), run, (0.2, 0.5))
    assert all(e is not None and abs(e) < 3e-3 for e in errs)
    assert math.isfinite(errs[0])


def test_stretch_final_loss_recovers_power_of_reference():
    from hpo.predictors.predict import stretch_final_loss

    lhat = np.linspace(1.3, 1.1, 20)
    losses = 2.0 * lhat**1.5  # the run's excess is the reference's to the power 1.5
    # no shrinkage: exact; shrinkage pulls the exponent toward 1 (plain alignment)
    assert stretch_final_loss(losses, lhat, 0.0) == pytest.approx(2.0)
    plain = align_final_loss(losses, lhat)
    half = stretch_final_loss(losses, lhat, 1.0)
    assert plain > half > 2.0


def test_stretch_final_loss_exponent_is_bounded():
    from hpo.predictors.predict import STRETCH_BOUNDS, stretch_final_loss

    lhat = np.linspace(1.3, 1.1, 20)
    losses = 2.0 * lhat**-3.0  # an inverted shape is not a stretch: the exponent is clipped
    x = np.log(lhat)
    expected = math.exp(np.mean(np.log(losses) - STRETCH_BOUNDS[0] * x))
    assert stretch_final_loss(losses, lhat, 0.0) == pytest.approx(expected)


def test_calibration_records_predictor_choice(curve):
    sel = curve.calibration["predictor"]
    assert len(sel["choice"]) == len(curve.calibration["fractions"])
    assert len(sel["loo_median_abs_err_10_30"]) == len(sel["candidates"])
    # the collapse predictor uses the chosen setting unless told otherwise
    pred = CollapsePredictor(curve)
    assert pred.settings(0.2) == (
        sel["candidates"][sel["choice"][0]]["align_from"],
        sel["candidates"][sel["choice"][0]]["stretch"],
    )
    assert CollapsePredictor(curve, align_from=0.3, stretch=None).settings(0.2) == (0.3, None)


def test_hybrid_calibration_has_a_transfer_path():
    import pandas as pd

    # proxies with two schedules: each group predicted from the other calibrates new schedules
    frames = [paper_family(TRUE, every=40)]
    for i, lr in enumerate((0.5e-3, 1e-3, 2e-3)):
        frames.append(make_run(f"c{i}", 2e7, 2000, lr, 20.0, TRUE, schedule="cosine", every=40))
    hybrid = fit_universal_curve(pd.concat(frames))
    cal = hybrid.calibration
    assert "errors_transfer" in cal and "predictor_transfer" in cal
    assert len(cal["errors_transfer"]) == len(cal["fractions"])
    # a run whose schedule no proxy ran is predicted through the transfer path
    wsd = runs_from_frame(make_run("w", 2e7, 2000, 1e-3, 20.0, TRUE, schedule="wsd:linear:0.2"))
    pred = CollapsePredictor(hybrid)
    assert pred._transfers(wsd[0].controls)
    keep = wsd[0].t_hat <= 0.3
    p = pred.predict(wsd[0].steps[keep], wsd[0].losses[keep], wsd[0].controls)
    assert p.lower < p.final < p.upper


def test_collapse_predictor_divergence_guard_predicts_current_level(curve):
    run = runs_from_frame(make_run("t", 2e7, 2000, 1e-3, 20.0, TRUE, final=3.0))[0]
    keep = run.t_hat <= 0.3
    losses = run.losses[keep].copy()
    late = run.t_hat[keep] > 0.15
    losses[late] = 6.0 + 0.5 * (run.t_hat[keep][late] - 0.15)  # blew up and keeps rising
    p = CollapsePredictor(curve).predict(run.steps[keep], losses, run.controls)
    # a run that stopped falling is predicted at its current level, not aligned down
    assert p.final == pytest.approx(np.mean(losses[-3:]))
    q = CollapsePredictor(curve, divergence_guard=False).predict(run.steps[keep], losses,
                                                                 run.controls)
    assert q.final < p.final


def test_making_progress_is_not_fooled_by_noise_on_a_flat_reference():
    from hpo.predictors.predict import making_progress

    rng = np.random.default_rng(0)
    lhat = np.linspace(1.10, 1.09, 40)  # the stable phase of a WSD schedule: nearly flat
    healthy = 3.0 * lhat * np.exp(rng.normal(0, 0.02, lhat.size))  # per-batch noise
    assert making_progress(healthy, lhat)
    # a run that goes up while the reference falls is clearly not following it
    falling = np.linspace(1.4, 1.1, 40)
    rising = np.linspace(3.0, 3.3, 40) * np.exp(rng.normal(0, 0.002, 40))
    assert not making_progress(rising, falling)


def test_calibration_keeps_each_proxys_loo_errors(curve):
    from hpo.predictors import load_universal_curve

    cal = curve.calibration
    runs = cal["runs"]
    assert len(runs) == 9 and {r["run_id"] for r in runs} == {f"r{i}" for i in range(9)}
    assert all(len(r["errors"]) == len(cal["fractions"]) for r in runs)
    # exact family, exact form: held-out errors are tiny
    assert max(abs(e) for r in runs for e in r["errors"] if e is not None) < 0.01
    # they survive the JSON round trip
    assert load_universal_curve(curve.to_dict()).calibration["runs"] == runs


def test_a_prefix_that_does_not_follow_the_curve_is_aligned_plainly_and_flagged(curve):
    from hpo.predictors.predict import SHAPE_SLOPE_MAX, shape_slope

    run = runs_from_frame(make_run("x", 2e7, 2000, 1e-3, 20.0, TRUE, final=3.0))[0]
    keep = run.t_hat <= 0.3
    steps, losses = run.steps[keep], run.losses[keep]
    lhat = curve.predict(run.t_hat[keep], run.controls)
    assert shape_slope(losses, lhat) == pytest.approx(1.0, abs=0.05)
    follows = CollapsePredictor(curve).predict(steps, losses, run.controls)
    assert follows.evidence["steep"] == 0.0
    # 1.5x as steeply (in log) as the curve says: a prediction, not flagged
    mild = 3.0 * lhat ** 1.5
    assert 1.4 < shape_slope(mild, lhat) < SHAPE_SLOPE_MAX
    assert CollapsePredictor(curve).predict(steps, mild, run.controls).evidence["steep"] == 0
    # 3x as steeply: plain alignment over the window, flagged for the pair prior, which
    # gives it a wider side (the shipped prior or one that says so)
    steep = 3.0 * lhat ** 3
    assert shape_slope(steep, lhat) > SHAPE_SLOPE_MAX
    prior = PairPrior(-4.0, {"steep": 1.0})
    pred = CollapsePredictor(curve, prior=prior).predict(steps, steep, run.controls)
    assert pred.evidence["steep"] == 1.0
    plain = CollapsePredictor(curve, stretch=None, prior=prior)
    assert pred.final == pytest.approx(plain.predict(steps, steep, run.controls).final)
    assert pred.pair_scale == pytest.approx(math.exp(-3.0))


def test_extrapolation_is_the_log_distance_beyond_the_proxies_ranges():
    from hpo.predictors.predict import extrapolation

    ranges = {"n_params": [1e7, 4e7], "tpp": [10.0, 40.0], "tau": [1.0, 4.0]}
    c = Controls(total_steps=1000, n_params=2e7, tpp=20.0, tau=2.0)
    # inside every range: no extrapolation; a smaller run is not an extrapolation either
    assert extrapolation(ranges, c) == 0.0
    assert extrapolation(ranges, c.with_(n_params=1e6)) == 0.0
    # twice the largest proxy, TPP 4x above the range, tau 2x below: log 2 + log 4 + log 2
    far = c.with_(n_params=8e7, tpp=160.0, tau=0.5)
    assert extrapolation(ranges, far) == pytest.approx(math.log(2) + math.log(4) + math.log(2))
    # unknown controls count nothing
    assert extrapolation(ranges, c.with_(n_params=None, tpp=None, tau=None)) == 0.0


def test_interval_widens_with_the_extrapolation():
    from hpo.predictors import predict as P
    from hpo.predictors import runs_from_frame
    from tests.predictors._synth import paper_family

    curve = fit_universal_curve(paper_family(every=40))
    r0 = runs_from_frame(paper_family(every=40))[0]
    keep = r0.t_hat <= 0.3
    steps, losses = r0.steps[keep], r0.losses[keep]
    pred = CollapsePredictor(curve)
    inside = pred.predict(steps, losses, r0.controls)
    bigger = pred.predict(steps, losses, r0.controls.with_(n_params=4e7 * math.e))
    # the same point prediction; the half-width grows by 1 + EXTRAPOLATION_WIDENING x 1
    assert bigger.final == pytest.approx(inside.final)
    ratio = math.log(bigger.upper / bigger.final) / math.log(inside.upper / inside.final)
    assert ratio == pytest.approx(1 + P.EXTRAPOLATION_WIDENING)


@pytest.mark.parametrize(
    ("case", "message"),
    [("one point", r"1 logged point\(s\) after the warmup"),
     ("inside the warmup", r"0 logged point\(s\) after the warmup")],
)
def test_sparse_or_warmup_only_prefixes_are_declined_with_the_reason(case, message):
    from hpo.predictors import runs_from_frame
    from tests.predictors._synth import paper_family

    curve = fit_universal_curve(paper_family(every=40))
    r0 = runs_from_frame(paper_family(every=40))[0]
    c = r0.controls
    if case == "one point":
        # an eval every 200 of 2000 steps and a warmup of 300: one point after it by t^ 0.2
        steps = np.array([200.0, 400.0])
        c = c.with_(warmup_steps=300.0)
    else:
        # a warmup of 30% and a prefix of 20%: every point is in the warmup
        steps = np.array([100.0, 200.0, 300.0, 400.0])
        c = c.with_(warmup_steps=600.0)
    losses = np.interp(steps, r0.steps, r0.losses)
    with pytest.raises(ValueError, match=message):
        CollapsePredictor(curve).predict(steps, losses, c)


def test_a_loss_spike_in_the_prefix_moves_the_prediction_little():
    from hpo.predictors import runs_from_frame
    from tests.predictors._synth import paper_family

    curve = fit_universal_curve(paper_family(every=40))
    r0 = runs_from_frame(paper_family(every=40))[0]
    keep = r0.t_hat <= 0.3
    steps, losses = r0.steps[keep], r0.losses[keep].copy()
    clean = CollapsePredictor(curve).predict(steps, losses, r0.controls)
    # one logged point 3x too high in the alignment window (a spike)
    losses[-4] *= 3.0
    spiked = CollapsePredictor(curve).predict(steps, losses, r0.controls)
    # it is still a prediction with an interval, within 10% of the clean one
    assert abs(spiked.final / clean.final - 1) < 0.10 and spiked.lower < spiked.upper


def test_leave_one_size_out_needs_the_curves_size_term_estimable():
    # TPP known: no size term in the shape, so two sizes give leave-one-size-out errors
    # (where widths do not collapse, they are the proxies' only measure of it)
    fam = paper_family(TRUE, every=40)
    two = fam[fam["n_params"] < 3e7]
    assert "leave-one-size-out" in fit_universal_curve(two).calibration["method"]
    # TPP unknown: log n_params is a shape covariate; leaving one of two sizes out would fit
    # without it, unlike the fit that predicts a target, so that needs three sizes
    blind = fam.assign(tokens=np.nan)
    two_blind = fit_universal_curve(blind[blind["n_params"] < 3e7])
    assert "log_n_params" in two_blind.empirical.covariates
    assert "leave-one-size-out" not in two_blind.calibration["method"]
    assert "leave-one-size-out" in fit_universal_curve(blind).calibration["method"]


def test_cal_folds_hold_out_whole_sweep_groups_in_at_most_k_folds():
    from hpo.predictors.calibrate import cal_folds
    from hpo.predictors.io import RunCurve

    def run(i: int, group: str | None) -> RunCurve:
        return RunCurve(f"r{i}", np.arange(3.0), np.ones(3), Controls(total_steps=3), group)

    runs = [run(i, f"g{i // 3}") for i in range(36)]  # 12 groups of 3
    folds = cal_folds(runs, k=10)
    # the runs of one group share a fold, and there are at most 10 folds
    assert all(len({folds[j] for j in range(3 * g, 3 * g + 3)}) == 1 for g in range(12))
    assert len(set(folds)) == 10
    # one group for every run (a sweep's proxies): each run is held out by itself
    assert cal_folds([run(i, "proxies") for i in range(4)], k=10) == [0, 1, 2, 3]
    # no group: each run is a fold of its own
    assert len(set(cal_folds([run(i, None) for i in range(5)], k=10))) == 5
