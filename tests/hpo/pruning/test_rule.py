"""The rule in numbers (hpo.pruning._rule): the probability to beat a competitor, the
verdict, and the sentence for every reason, in both directions."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm

from hpo.pruning._rule import (
    Competitor,
    Estimate,
    beat_probability,
    explain,
    judge,
)

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
    me = _est(3.1, 0.02, sign)
    other = Competitor("b", 1, final=sign * 3.0)
    sigma = 0.02 / Z80
    expected = norm.cdf(math.log(3.0 / 3.1) / sigma)
    assert beat_probability(me, other, 0.0, sign) == pytest.approx(expected)
    assert me.sigma(sign) == pytest.approx(sigma)
    # a margin (objective units) makes ending "better" easier
    assert beat_probability(me, other, 0.0, sign, margin=0.1) == pytest.approx(0.5)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_finished_trials_own_error_is_shared_in_proportion_to_rho(sign: float) -> None:
    # the finished trial was predicted 5% high at this checkpoint; with correlated errors the
    # judged trial's prediction is probably high too, so its chance to win grows with rho
    me = _est(3.1, 0.05, sign)
    other = Competitor("b", 1, estimate=_est(3.15, 0.05, sign), final=sign * 3.0)
    chances = [beat_probability(me, other, rho, sign) for rho in (0.0, 0.5, 0.9)]
    assert chances[0] < chances[1] < chances[2]
    shifted = math.log(3.1) + 0.5 * math.log(3.0 / 3.15)
    sd = 0.05 / Z80 * math.sqrt(1 - 0.25)
    assert chances[1] == pytest.approx(norm.cdf((math.log(3.0) - shifted) / sd))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_two_running_trials_compare_predictions_with_a_shared_error(sign: float) -> None:
    me, other = _est(3.1, 0.05, sign), Competitor("b", 1, estimate=_est(3.0, 0.05, sign))
    s = 0.05 / Z80
    for rho in (0.0, 0.8):
        sd = math.sqrt(2 * s * s * (1 - rho))
        assert beat_probability(me, other, rho, sign) == pytest.approx(
            norm.cdf(math.log(3.0 / 3.1) / sd))
    # the shared part cancels: the same gap is more telling when errors move together
    assert beat_probability(me, other, 0.8, sign) < beat_probability(me, other, 0.0, sign)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_judge_stops_below_the_threshold_against_the_strongest_competitor(sign: float) -> None:
    me = _est(3.1, 0.02, sign)
    weak = Competitor("w", 7, final=sign * 3.3)
    strong = Competitor("s", 5, final=sign * 3.0)
    verdict = judge(me, [weak, strong], 0.0, 0.05, sign)
    assert verdict.stop and verdict.reason == "unlikely_to_win" and verdict.against is strong
    kept = judge(me, [weak], 0.0, 0.05, sign)
    assert not kept.stop and kept.reason == "may_win" and kept.probability > 0.99
    assert judge(me, [], 0.0, 0.05, sign).reason == "no_competitor"
    # the threshold is the one knob: close calls stop only under a high one
    close = Competitor("c", 2, final=sign * 3.08)
    p = beat_probability(me, close, 0.0, sign)
    assert 0.05 < p < 0.5
    assert not judge(me, [close], 0.0, 0.05, sign).stop
    assert judge(me, [close], 0.0, 0.5, sign).stop


def test_non_positive_losses_raise() -> None:
    me = Estimate(-1.0, -1.1, -0.9, 0.2)
    with pytest.raises(ValueError, match="positive"):
        beat_probability(me, Competitor("b", 1, final=1.0), 0.0, 1.0)


def _record(**kw: object) -> dict:
    return {"estimate": _est(3.1, 0.02).to_dict(), "threshold": 0.05, "t_hat": 0.2, **kw}


def test_explain_says_why_for_every_reason() -> None:
    stop = explain(_record(stop=True, reason="unlikely_to_win", probability=0.004,
                           against={"label": 5, "final": 3.0}))
    assert stop == ("stopped at t^ 0.20: 0.4% chance to end below trial 5, below the threshold "
                    "0.05 (predicted 3.1 [3.039, 3.163] against its final 3)")
    other = _est(2.9, 0.02).to_dict()
    keep = explain(_record(stop=False, reason="may_win", probability=0.31,
                           against={"label": "b", "final": None, "estimate": other}))
    assert keep == ("kept at t^ 0.20: 31.0% chance to end below trial b, not below 0.05 "
                    "(predicted 3.1 [3.039, 3.163] against 2.9 [2.843, 2.959])")
    late = explain({**_record(stop=True, reason="unlikely_to_win", probability=1e-5,
                              against={"label": 1, "final": 3.0}), "t_hat": 0.36})
    assert late.startswith("stopped at t^ 0.36 (predicted at t^ 0.20): 1.0e-05 chance")
    assert explain(_record(stop=True, reason="diverged")) == (
        "stopped at t^ 0.20: its latest value is not finite (diverged)")
    failed = Estimate.failed("fit_failed", 0.2, "ValueError: too few points").to_dict()
    assert explain({"estimate": failed, "stop": False, "reason": "no_estimate"}) == (
        "kept at t^ 0.20: no prediction (ValueError: too few points); a trial is never "
        "stopped without one")
    assert explain(_record(stop=False, reason="startup", have=1, needed=2)) == (
        "kept at t^ 0.20: predicted 3.1 [3.039, 3.163]; no stop until 2 trials have a "
        "prediction or a final value (1 so far)")
    assert explain(_record(stop=False, reason="no_competitor")).endswith(
        "no other trial to compare with yet")
    assert explain(_record(stop=False, reason="last_report")).endswith(
        "at its last report, stopping saves nothing")


def test_estimate_round_trips_through_json() -> None:
    est = _est(3.1, 0.02)
    assert Estimate.from_dict(est.to_dict()) == est
    failed = Estimate.failed("fit_failed", 0.3, "why")
    back = Estimate.from_dict(failed.to_dict())
    assert back.status == "fit_failed" and back.detail == "why" and not back.usable


def test_extrapolation_shared_by_both_trials_cancels_in_their_comparison() -> None:
    import dataclasses

    from hpo.pruning._rule import covariance

    # both 3x wider than calibrated (a size beyond the proxies'): compared within the
    # calibrated spread; one alone extrapolated (its tau): it keeps its extra spread
    s0 = 0.01 / Z80
    wide = dataclasses.replace(_est(3.1, 0.03), widening=3.0)
    other = dataclasses.replace(_est(3.0, 0.03), widening=3.0)
    narrow = _est(3.0, 0.01)
    rho = 0.5
    assert covariance(wide, other, rho) == pytest.approx(rho * s0 * s0 + 8 * s0 * s0)
    both = beat_probability(wide, Competitor("b", 1, estimate=other), rho)
    assert both == pytest.approx(norm.cdf(math.log(3.0 / 3.1) / math.sqrt(2 * (1 - rho) * s0**2)))
    alone = beat_probability(wide, Competitor("b", 1, estimate=narrow), rho)
    var = (3 * s0) ** 2 + s0**2 - 2 * rho * s0 * s0
    assert alone == pytest.approx(norm.cdf(math.log(3.0 / 3.1) / math.sqrt(var)))
    assert both < alone
    # no widening: the plain correlation of the calibrated spreads
    assert covariance(_est(3.1, 0.01), narrow, rho) == pytest.approx(rho * s0 * s0)
