"""The rule in numbers (hpo.pruning._rule): the probability to beat a competitor, the
verdict, and the sentence for every reason, in both directions."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm

from hpo.pruning._record import Record
from hpo.pruning._rule import (
    Competitor,
    Estimate,
    beat_probability,
    judge,
)
from hpo.pruning._sentence import explain

Z80 = norm.ppf(0.9)


def _est(value: float, half: float, sign: float = 1.0, t_hat: float = 0.2) -> Estimate:
    """A prediction of loss ``value`` with an 80% interval of +-``half`` in log units, in
    objective units (``sign * loss``)."""
    lo, hi = value * math.exp(-half), value * math.exp(half)
    if sign < 0:
        return Estimate(-value, -hi, -lo, t_hat)
    return Estimate(value, lo, hi, t_hat)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_against_a_finished_trial_the_chance_is_the_predictive_tail(sign: float) -> None:
    # no pair law (a predictor that only gives intervals): the judged trial's interval, read as
    # a normal, against the competitor's known final
    me = _est(3.1, 0.02, sign)
    other = Competitor("b", 1, final=sign * 3.0)
    sigma = 0.02 / Z80
    expected = norm.cdf(math.log(3.0 / 3.1) / sigma)
    assert beat_probability(me, other, sign) == pytest.approx(expected)
    assert me.sigma(sign) == pytest.approx(sigma)
    # a margin (objective units) makes ending "better" easier
    assert beat_probability(me, other, sign, margin=0.1) == pytest.approx(0.5)


def _paired(value: float, sign: float, scale: float = 0.01, dof: float = 4.0,
            t_hat: float = 0.2) -> Estimate:
    """An estimate with a side of a pair law (wide interval: the law decides, not it)."""
    import dataclasses

    return dataclasses.replace(_est(value, 0.2, sign, t_hat), pair_scale=scale, pair_dof=dof)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_with_a_pair_law_the_ratio_of_the_predictions_decides(sign: float) -> None:
    from scipy.stats import t as t_law

    me, theirs = _paired(3.1, sign), _paired(3.0, sign)
    expected = t_law.sf(math.log(3.1 / 3.0) / 0.01, 4.0)
    running = Competitor("b", 1, estimate=theirs)
    assert beat_probability(me, running, sign) == pytest.approx(expected)
    # a finished competitor with its prediction from the same checkpoint: its shared error
    # cancels in the ratio, so its final value does not move the chance
    for final in (2.9, 3.0, 3.2):
        done = Competitor("b", 1, estimate=theirs, final=sign * final)
        assert beat_probability(me, done, sign) == pytest.approx(expected)
    # the heavy tail: far less sure than a normal of the same scale
    assert expected > norm.sf(math.log(3.1 / 3.0) / 0.01) * 10
    # a finished competitor without a prediction there shares no error with the judged trial:
    # its final against the judged trial's whole error (the interval, +-0.2 at 80%)
    alone = Competitor("b", 1, final=sign * 3.0)
    assert beat_probability(me, alone, sign) == pytest.approx(
        norm.cdf(math.log(3.0 / 3.1) / (0.2 / Z80)))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_wider_side_of_a_pair_sets_its_scale(sign: float) -> None:
    # a trial extrapolated beyond the proxies (a wider pair scale) is judged with its scale,
    # whichever of the two it is
    me, wide = _paired(3.1, sign, 0.01), _paired(3.0, sign, 0.04)
    p_wide = beat_probability(me, Competitor("b", 1, estimate=wide), sign)
    p_back = 1 - beat_probability(wide, Competitor("a", 0, estimate=me), sign)
    assert p_wide == pytest.approx(p_back)
    narrow = beat_probability(me, Competitor("b", 1, estimate=_paired(3.0, sign)), sign)
    assert narrow < p_wide < 0.5


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_settings_further_apart_are_judged_on_a_wider_law(sign: float) -> None:
    import dataclasses

    from scipy.stats import t as t_law

    from hpo.pruning._rule import distance_widening, setting_distance

    def at(value: float, lr: float, tau: float) -> Estimate:
        return dataclasses.replace(_paired(value, sign), lr=lr, tau=tau, distance_slope=0.5)

    me, near, far = at(3.1, 0.01, 1.0), at(3.0, 0.01, 1.0), at(3.0, 0.04, 0.25)
    assert distance_widening(me, near) == 1.0
    assert setting_distance(me, far) == pytest.approx(math.log(4))
    assert distance_widening(me, far) == pytest.approx(2.0)
    z = math.log(3.1 / 3.0) / 0.01
    assert beat_probability(me, Competitor("b", 1, estimate=near), sign) == pytest.approx(
        t_law.sf(z, 4.0))
    assert beat_probability(me, Competitor("b", 1, estimate=far), sign) == pytest.approx(
        t_law.sf(z / 2.0, 4.0))
    # a weight-decay sweep moves tau alone: the distance is tau's
    assert setting_distance(me, at(3.0, 0.01, 16.0)) == pytest.approx(math.log(16))
    # an unknown LR and tau widen nothing; the fields survive the stored record
    assert distance_widening(me, _paired(3.0, sign)) == 1.0
    assert Estimate.from_dict(far.to_dict()) == far


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_studys_finished_pairs_rescale_the_pair_law(sign: float) -> None:
    import dataclasses

    from hpo.pruning._rule import NO_RESCALE, StudyRescale, study_rescale

    def done(errors: list[float], dof: float = 4.0, lrs: list[float] | None = None
             ) -> list[tuple[Estimate, float]]:
        # finished trials predicted with these log errors (pair scale 0.01)
        out = []
        for k, e in enumerate(errors):
            est = _paired(3.0 * math.exp(e), sign, dof=dof)
            if lrs is not None:
                est = dataclasses.replace(est, lr=lrs[k])  # a prior that does not widen
            out.append((est, sign * 3.0))
        return out

    # fewer than two finished trials, or a normal law: nothing to learn
    assert study_rescale(done([0.01]), sign) == NO_RESCALE
    assert study_rescale(done([0.01, -0.01], dof=math.inf), sign) == NO_RESCALE
    # errors that agree (a shared bias, which cancels in every pair) narrow the law; errors
    # that scatter widen it
    tight = study_rescale(done([0.05, 0.051, 0.049, 0.05]), sign)
    assert tight.log_scale < 0
    assert (tight.trials, tight.pairs) == (4, 6)
    loose = study_rescale(done([0.05, -0.05, 0.0, 0.04]), sign)
    assert loose.log_scale > 0
    # more trials that agree narrow it further: the study's evidence takes over from the prior
    tighter = study_rescale(done([0.05 + 0.001 * (-1) ** k for k in range(12)]), sign)
    assert tighter.log_scale < tight.log_scale
    # pairs that agree when near and scatter when far teach a law that did not widen with the
    # settings' distance to widen
    lrs = [0.01, 0.011, 0.1, 0.11, 1.0, 1.1]
    grows = study_rescale(done([0.0, 0.001, 0.05, 0.051, -0.05, -0.049], lrs=lrs), sign)
    assert grows.distance_slope > 0
    # the rescaling enters the probability as a scale (the tail stays the prior's)
    me, theirs = _paired(3.1, sign), Competitor("b", 1, estimate=_paired(3.0, sign))
    assert beat_probability(me, theirs, sign, rescale=tight) < beat_probability(
        me, theirs, sign)
    assert beat_probability(me, theirs, sign, rescale=StudyRescale(math.log(2.0))) == (
        pytest.approx(beat_probability(dataclasses.replace(me, pair_scale=0.02),
                                       Competitor("b", 1, estimate=_paired(3.0, sign, 0.02)),
                                       sign)))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_pair_law_is_never_wider_than_independent_intervals(sign: float) -> None:
    import dataclasses

    from scipy.stats import t as t_law

    from hpo.pruning._rule import pair_law

    # settings far apart widen the prior's law without end; the cap is the two intervals
    # (+-0.02 each at 80%) read as independent normals, matched at the 80% level
    def at(value: float, lr: float) -> Estimate:
        return dataclasses.replace(_est(value, 0.02, sign), pair_scale=0.01, pair_dof=4.0,
                                   lr=lr, distance_slope=1.0)

    near = pair_law(at(3.1, 0.01), at(3.0, 0.011), sign)
    assert near.scale == pytest.approx(0.01 * 1.1)
    far = pair_law(at(3.1, 0.01), at(3.0, 10.0), sign)
    assert far.scale == pytest.approx(math.hypot(0.02, 0.02) / t_law.ppf(0.9, 4.0))
    # a whole interval above the other's: the chance is small however far apart they are
    me, other = at(2.733, 1e-4), at(2.175, 0.3)
    assert beat_probability(me, Competitor("o", 1, estimate=other, final=sign * 2.175),
                            sign) < 0.01


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_tolerance_counts_near_ties_as_losses(sign: float) -> None:
    me, theirs = _paired(3.003, sign), Competitor("b", 1, estimate=_paired(3.0, sign))
    plain = beat_probability(me, theirs, sign)
    tolerant = beat_probability(me, theirs, sign, tolerance=0.002)
    # ending more than 0.2% below is harder than ending below
    assert tolerant < plain
    from scipy.stats import t as t_law

    assert tolerant == pytest.approx(t_law.sf((math.log(3.003 / 3.0) - math.log(0.998)) / 0.01,
                                              4.0))
    verdict = judge(me, [theirs], 0.3, sign, tolerance=0.002)
    assert verdict.probability == pytest.approx(tolerant)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_judge_stops_below_the_threshold_against_the_strongest_competitor(sign: float) -> None:
    me = _est(3.1, 0.02, sign)
    weak = Competitor("w", 7, final=sign * 3.3)
    strong = Competitor("s", 5, final=sign * 3.0)
    verdict = judge(me, [weak, strong], 0.05, sign)
    assert verdict.stop and verdict.reason == "unlikely_to_win" and verdict.against is strong
    kept = judge(me, [weak], 0.05, sign)
    assert not kept.stop and kept.reason == "may_win" and kept.probability > 0.99
    assert judge(me, [], 0.05, sign).reason == "no_competitor"
    # the threshold is the one knob: close calls stop only under a high one; 0 stops nothing
    close = Competitor("c", 2, final=sign * 3.08)
    p = beat_probability(me, close, sign)
    assert 0.05 < p < 0.5
    assert not judge(me, [close], 0.05, sign).stop
    assert judge(me, [close], 0.5, sign).stop
    assert not judge(me, [strong], 0.0, sign).stop


def test_non_positive_losses_raise() -> None:
    me = Estimate(-1.0, -1.1, -0.9, 0.2)
    with pytest.raises(ValueError, match="positive"):
        beat_probability(me, Competitor("b", 1, final=1.0), 1.0)


def _record(**kw: object) -> dict:
    return {"estimate": _est(3.1, 0.02).to_dict(), "threshold": 0.05, "t_hat": 0.2, **kw}


def _say(stored: dict) -> str:
    """The sentence of a record read back from the dict the pruner stores."""
    return explain(Record.from_dict(stored))


def test_explain_says_why_for_every_reason() -> None:
    stop = _say(_record(stop=True, reason="unlikely_to_win", probability=0.004,
                           against={"label": 5, "final": 3.0}))
    assert stop == ("stopped at t^ 0.20: 0.4% chance to end below trial 5, below the threshold "
                    "0.05 (predicted 3.1 [3.039, 3.163] against its final 3)")
    other = _est(2.9, 0.02).to_dict()
    keep = _say(_record(stop=False, reason="may_win", probability=0.31,
                           against={"label": "b", "final": None, "estimate": other}))
    assert keep == ("kept at t^ 0.20: 31.0% chance to end below trial b, not below 0.05 "
                    "(predicted 3.1 [3.039, 3.163] against 2.9 [2.843, 2.959])")
    late = _say({**_record(stop=True, reason="unlikely_to_win", probability=1e-5,
                              against={"label": 1, "final": 3.0}), "t_hat": 0.36})
    assert late.startswith("stopped at t^ 0.36 (predicted at t^ 0.20): less than 0.1% chance "
                           "to end below trial 1")
    # a tolerance says what "below" means
    tol = _say({**_record(stop=True, reason="unlikely_to_win", probability=0.012,
                             against={"label": 3, "final": 3.0}), "tolerance": 0.002})
    assert tol.startswith("stopped at t^ 0.20: 1.2% chance to end more than 0.2% below trial 3")
    assert _say(_record(stop=True, reason="diverged")) == (
        "stopped at t^ 0.20: its latest value is not finite (diverged)")
    failed = Estimate.failed("fit_failed", 0.2, "ValueError: too few points").to_dict()
    assert _say({"estimate": failed, "stop": False, "reason": "no_estimate"}) == (
        "kept at t^ 0.20: no prediction (ValueError: too few points); a trial is never "
        "stopped without one")
    assert _say(_record(stop=False, reason="startup", have=1, needed=2)) == (
        "kept at t^ 0.20: predicted 3.1 [3.039, 3.163]; no stop until 2 trials have a "
        "prediction or a final value (1 so far)")
    assert _say(_record(stop=False, reason="no_competitor")).endswith(
        "no other trial to compare with yet")
    assert _say(_record(stop=False, reason="last_report")).endswith(
        "at its last report, stopping saves nothing")


def test_estimate_round_trips_through_json() -> None:
    est = _est(3.1, 0.02)
    assert Estimate.from_dict(est.to_dict()) == est
    paired = _paired(3.1, 1.0)
    assert Estimate.from_dict(paired.to_dict()) == paired
    failed = Estimate.failed("fit_failed", 0.3, "why")
    back = Estimate.from_dict(failed.to_dict())
    assert back.status == "fit_failed" and back.detail == "why" and not back.usable


def test_a_self_calibrated_curve_measures_its_pair_law_on_the_studys_trials() -> None:
    from hpo.predictors import fit_proxy_pair_scale, runs_from_frame
    from hpo.pruning._predict import fit_reference
    from tests.predictors._synth import make_run

    # four finished trials of one study (an LR sweep): they are one sweep, so the pair law is
    # measured on their pairs, not on pairs across unrelated settings
    runs = [r for lr in (0.5e-3, 1e-3, 1.5e-3, 2e-3)
            for r in runs_from_frame(make_run(f"t{lr:g}", 1e7, 500, lr, 20.0, noise=0.003,
                                              seed=int(lr * 1e4), every=10))]
    curve = fit_reference([(r.run_id, r.steps, r.losses, r.controls) for r in runs], 1.0)
    assert {r["group"] for r in curve.calibration["runs"]} == {"study"}
    law = fit_proxy_pair_scale(curve.calibration)
    assert law is not None and law.within_sweep


def test_sigma_and_the_side_without_a_pair_law_read_the_interval_as_a_normal() -> None:
    from hpo.predictors.pairs import PairErrorLaw

    for level in (0.5, 0.8, 0.9, 0.95):
        est = Estimate(3.0, 2.7, 3.4, 0.2, level)
        # the wider side of the interval, in log units, over the normal quantile
        assert est.halfwidth(1.0) == math.log(3.4 / 3.0)
        assert est.sigma(1.0) == math.log(3.4 / 3.0) / norm.ppf(0.5 + level / 2)
        assert est.pair(1.0) == PairErrorLaw.from_interval(math.log(3.4 / 3.0), level)
    # a measured side is the estimate's own
    assert _paired(3.0, 1.0).pair(1.0) == PairErrorLaw(0.01, 4.0)
