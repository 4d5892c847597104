"""The pure decision (hpo._decision) with tiny fakes: no optuna, no ray, no real predictor."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from hpo._decision import (
    DecisionConfig,
    Estimate,
    TrialCurve,
    TrialSnapshot,
    at_last_report,
    decide,
    dominated,
    estimate_at_checkpoint,
    latest_checkpoint,
)


@dataclass(frozen=True)
class FakeControls:
    total_steps: int


@dataclass(frozen=True)
class FakePrediction:
    final: float
    lower: float
    upper: float
    method: str = "fake"


class LastValuePredictor:
    """Predicts the last loss plus ``bias``, +- ``half`` (in loss units)."""

    def __init__(self, half: float = 0.1, bias: float = 0.0) -> None:
        self.half = half
        self.bias = bias
        self.calls = 0

    def predict(self, steps, losses, controls):
        self.calls += 1
        last = float(losses[-1]) + self.bias
        return FakePrediction(last, last - self.half, last + self.half)


class FailingPredictor:
    def predict(self, steps, losses, controls):
        raise ValueError("cannot predict")


def _est(value: float, half: float, direction: str = "minimize") -> Estimate:
    return Estimate(value=value, lower=value - half, upper=value + half, t_hat=0.1)


def _mirror(x: float, direction: str) -> float:
    # the same scenario in both directions: maximize sees negated losses
    return x if direction == "minimize" else -x


DIRS = ["minimize", "maximize"]


@pytest.mark.parametrize("direction", DIRS)
def test_dominated_stops_when_optimistic_end_worse_than_best_pessimistic(direction: str) -> None:
    cfg = DecisionConfig(direction=direction)
    best = TrialSnapshot(
        "best", running=False, estimate=Estimate.exact_value(_mirror(3.0, direction))
    )
    bad = TrialSnapshot("bad", running=True, estimate=_est(_mirror(3.5, direction), 0.2))
    close = TrialSnapshot("close", running=True, estimate=_est(_mirror(3.1, direction), 0.2))
    out = dominated([best, bad, close], ["bad", "close"], cfg)
    # 3.3 > 3.0: the bad one is dominated; 2.9 < 3.0: the close one overlaps and survives
    assert out["bad"].stop and out["bad"].reason == "dominated" and out["bad"].best == "best"
    assert not out["close"].stop
    assert out["bad"].threshold == pytest.approx(_mirror(3.0, direction))


@pytest.mark.parametrize("direction", DIRS)
def test_dominated_uses_pessimistic_end_of_running_competitors(direction: str) -> None:
    cfg = DecisionConfig(direction=direction)
    # the competitor is only a prediction: its pessimistic end 3.0 + 0.4 counts, not 3.0
    other = TrialSnapshot("other", running=True, estimate=_est(_mirror(3.0, direction), 0.4))
    judged = TrialSnapshot("me", running=True, estimate=_est(_mirror(3.42, direction), 0.05))
    assert not dominated([other, judged], ["me"], cfg)["me"].stop
    judged = TrialSnapshot("me", running=True, estimate=_est(_mirror(3.5, direction), 0.05))
    assert dominated([other, judged], ["me"], cfg)["me"].stop


@pytest.mark.parametrize("direction", DIRS)
def test_a_trial_whose_latest_value_beats_the_best_end_is_kept(direction: str) -> None:
    cfg = DecisionConfig(direction=direction)
    final = Estimate.exact_value(_mirror(3.0, direction))
    done = TrialSnapshot("done", running=False, estimate=final)
    # a stale estimate (3.5 +- 0.2, lower end 3.3 > 3.0) would stop it ...
    stale = _est(_mirror(3.5, direction), 0.2)
    me = TrialSnapshot("me", running=True, estimate=stale, latest=_mirror(3.2, direction))
    assert dominated([done, me], ["me"], cfg)["me"].stop
    # ... but it already reports 2.95, better than the finished trial's final value: kept
    me = TrialSnapshot("me", running=True, estimate=stale, latest=_mirror(2.95, direction))
    verdict = dominated([done, me], ["me"], cfg)["me"]
    assert not verdict.stop and verdict.reason == "latest value not dominated"
    assert verdict.best == "done" and verdict.threshold == pytest.approx(_mirror(3.0, direction))
    # against a running competitor its prediction counts, not its optimistic or pessimistic end
    other = TrialSnapshot("other", running=True, estimate=_est(_mirror(2.9, direction), 0.05))
    me = TrialSnapshot("me", running=True, estimate=stale, latest=_mirror(2.95, direction))
    assert dominated([other, me], ["me"], cfg)["me"].stop
    me = TrialSnapshot("me", running=True, estimate=stale, latest=_mirror(2.88, direction))
    assert not dominated([other, me], ["me"], cfg)["me"].stop


def test_a_trial_at_its_last_report_is_never_stopped() -> None:
    cfg = DecisionConfig()
    done = TrialSnapshot("done", running=False, estimate=Estimate.exact_value(3.0))
    bad = _est(3.5, 0.1)
    for last_report, stop in ((False, True), (True, False)):
        me = TrialSnapshot("me", running=True, estimate=bad, latest=3.4, last_report=last_report)
        verdict = dominated([done, me], ["me"], cfg)["me"]
        assert verdict.stop is stop
    assert verdict.reason == "at its last report"
    # steps counted from 0 end at total_steps - 1, from 1 at total_steps
    assert at_last_report(99, 100) and at_last_report(100, 100)
    assert not at_last_report(98, 100) and not at_last_report(99, None)
    # decide() passes each curve's latest value and whether it is at step total_steps - 1
    curves = [
        TrialCurve("done", np.arange(101.0), np.full(101, 3.0), FakeControls(100), 3.0),
        TrialCurve("end", np.arange(100.0), np.full(100, 3.5), FakeControls(100)),
        TrialCurve("before", np.arange(99.0), np.full(99, 3.5), FakeControls(100)),
        TrialCurve("mid", np.arange(51.0), np.full(51, 3.5), FakeControls(100)),
        TrialCurve("ahead", np.arange(51.0), np.full(51, 2.9), FakeControls(100)),
    ]
    out = decide(curves, LastValuePredictor(0.1, bias=0.5), DecisionConfig(debias=False))
    assert out["mid"].stop and out["before"].stop
    assert not out["end"].stop and not out["ahead"].stop
    assert out["ahead"].reason == "latest value not dominated"


@pytest.mark.parametrize("direction", DIRS)
def test_dominated_margin(direction: str) -> None:
    best = TrialSnapshot(
        "best", running=False, estimate=Estimate.exact_value(_mirror(3.0, direction))
    )
    me = TrialSnapshot("me", running=True, estimate=_est(_mirror(3.2, direction), 0.1))
    # lower end 3.1 is worse than 3.0 by 0.1: stopped without margin, kept with margin 0.15
    assert dominated([best, me], ["me"], DecisionConfig(direction=direction))["me"].stop
    cfg = DecisionConfig(direction=direction, margin=0.15)
    assert not dominated([best, me], ["me"], cfg)["me"].stop


def test_dominated_startup_counts_trials_with_estimates() -> None:
    best = TrialSnapshot("best", running=False, estimate=Estimate.exact_value(1.0))
    waiting = TrialSnapshot("waiting", running=True)  # no estimate yet: does not count
    me = TrialSnapshot("me", running=True, estimate=_est(5.0, 0.1))
    cfg = DecisionConfig(n_startup_trials=3)
    verdict = dominated([best, waiting, me], ["me"], cfg)["me"]
    assert not verdict.stop and verdict.reason.startswith("startup")
    # a third trial with an estimate ends the startup
    third = TrialSnapshot("third", running=True, estimate=_est(1.5, 0.1))
    assert dominated([best, third, me], ["me"], cfg)["me"].stop


def test_dominated_keeps_n_min_trials_alive_least_dominated_first() -> None:
    best = TrialSnapshot("best", running=False, estimate=Estimate.exact_value(1.0))
    worse = TrialSnapshot("worse", running=True, estimate=_est(2.0, 0.1))
    worst = TrialSnapshot("worst", running=True, estimate=_est(3.0, 0.1))
    pruned = TrialSnapshot("pruned", running=False, alive=False)
    out = dominated(
        [best, worse, worst, pruned], ["worse", "worst"], DecisionConfig(n_min_trials=2)
    )
    # 3 alive, at least 2 must stay: only the most dominated one is stopped
    assert out["worst"].stop
    assert not out["worse"].stop and out["worse"].reason.startswith("kept")


def test_dominated_ignores_dead_and_unusable_competitors() -> None:
    dead = TrialSnapshot("dead", running=False, estimate=Estimate.exact_value(0.5), alive=False)
    nan_done = TrialSnapshot("nan", running=False, estimate=Estimate.exact_value(float("nan")))
    failed = TrialSnapshot("failed", running=True, estimate=Estimate.failed("fit_failed", 0.1))
    me = TrialSnapshot("me", running=True, estimate=_est(3.0, 0.1))
    verdict = dominated([dead, nan_done, failed, me], ["me"], DecisionConfig(n_startup_trials=1))
    # nobody usable to compare with: fail open
    assert not verdict["me"].stop and verdict["me"].reason == "no competitor"


def test_dominated_never_stops_without_usable_estimate() -> None:
    best = TrialSnapshot("best", running=False, estimate=Estimate.exact_value(1.0))
    me = TrialSnapshot("me", running=True, estimate=Estimate.failed("too_few_points", 0.1))
    verdict = dominated([best, me], ["me"], DecisionConfig())["me"]
    assert not verdict.stop and "too_few_points" in verdict.reason


def test_dominated_stops_diverged_trial_regardless() -> None:
    me = TrialSnapshot(
        "me", running=True, estimate=Estimate.failed("diverged", 0.1), diverged=True
    )
    # diverged: stopped even alone and during startup
    assert dominated([me], ["me"], DecisionConfig(n_startup_trials=5))["me"].stop
    cfg = DecisionConfig(stop_diverged=False)
    assert not dominated([me], ["me"], cfg)["me"].stop


def test_debias_factor() -> None:
    from hpo._decision import debias_factor

    assert debias_factor([]) == 1.0
    # median of final / predicted; pairs with a sign change or zero are skipped
    assert debias_factor([(3.3, 3.0), (3.0, 3.0), (2.0, 2.2)]) == pytest.approx(1.0)
    assert debias_factor([(3.3, 3.0), (-1.0, 2.0), (0.0, 1.0)]) == pytest.approx(3.0 / 3.3)
    assert debias_factor([(-3.3, -3.0)]) == pytest.approx(3.0 / 3.3)  # maximize: -loss


def test_estimate_widens_interval_outside_fitted_tau_range() -> None:
    class Curve:
        ranges = {"tau": [0.2, 1.0]}

    class Ranged(LastValuePredictor):
        curve = Curve()

    @dataclass(frozen=True)
    class C:
        total_steps: int
        tau: float

    steps, values = np.arange(10.0), np.full(10, 3.0)
    cfg = DecisionConfig(extrapolation_inflation=2.0)
    inside = estimate_at_checkpoint(steps, values, C(100, 0.5), Ranged(0.1), cfg, 0.1)
    outside = estimate_at_checkpoint(steps, values, C(100, 4.0), Ranged(0.1), cfg, 0.1)
    assert inside.extrapolated == () and inside.upper - inside.lower == pytest.approx(0.2)
    # tau = 4 is outside [0.2, 1]: the interval is twice as wide, around the same value
    assert outside.extrapolated == ("tau",)
    assert outside.upper - outside.lower == pytest.approx(0.4)
    assert outside.value == inside.value


def test_decide_debiases_with_finished_trials() -> None:
    # off by default (the finished trials' errors need not be shared); on when asked
    assert DecisionConfig().debias is False
    cfg = DecisionConfig(debias=True)
    curves = [
        TrialCurve("done", np.arange(101.0), np.full(101, 3.0), FakeControls(100), 3.0),
        TrialCurve("run", np.arange(21.0), np.full(21, 3.05), FakeControls(100)),
    ]
    # predicted 3.35 +- 0.1 against an exact 3.0 would stop; debiased by 3.0 / 3.3 it does not
    assert not decide(curves, LastValuePredictor(0.1, bias=0.3), cfg)["run"].stop
    off = DecisionConfig(debias=False)
    assert decide(curves, LastValuePredictor(0.1, bias=0.3), off)["run"].stop


def test_latest_checkpoint() -> None:
    cps = (0.1, 0.2, 0.3)
    assert latest_checkpoint(0.05, cps) is None
    assert latest_checkpoint(0.1, cps) == 0.1
    assert latest_checkpoint(0.29, cps) == 0.2
    assert latest_checkpoint(0.9, cps) == 0.3
    assert latest_checkpoint(float("nan"), cps) is None


@pytest.mark.parametrize("direction", DIRS)
def test_estimate_mirrors_interval_for_maximize(direction: str) -> None:
    cfg = DecisionConfig(direction=direction)
    sign = cfg.sign
    steps = np.arange(10.0)
    losses = np.linspace(4.0, 3.0, 10)
    est = estimate_at_checkpoint(
        steps, sign * losses, FakeControls(100), LastValuePredictor(0.2), cfg, 0.1
    )
    assert est.usable
    assert est.value == pytest.approx(sign * 3.0)
    assert est.lower < est.value < est.upper
    assert (est.lower, est.upper) == pytest.approx(sorted([sign * 2.8, sign * 3.2]))


def test_estimate_nan_rule() -> None:
    cfg = DecisionConfig()
    pred = LastValuePredictor()
    steps = np.arange(6.0)
    # an isolated NaN is dropped
    est = estimate_at_checkpoint(
        steps, np.array([4, np.nan, 3.5, 3.4, 3.3, 3.2]), FakeControls(50), pred, cfg, 0.1
    )
    assert est.usable and est.value == pytest.approx(3.2)
    # a NaN or inf as latest value: diverged
    for bad in (np.nan, np.inf):
        est = estimate_at_checkpoint(
            steps, np.array([4, 3.9, 3.5, 3.4, 3.3, bad]), FakeControls(50), pred, cfg, 0.1
        )
        assert est.status == "diverged" and not est.usable


def test_estimate_fails_open() -> None:
    cfg = DecisionConfig(min_points=3)
    steps, values = np.arange(5.0), np.linspace(4, 3, 5)
    est = estimate_at_checkpoint(steps, values, None, LastValuePredictor(), cfg, 0.1)
    assert est.status == "missing_controls"
    est = estimate_at_checkpoint(
        steps[:2], values[:2], FakeControls(50), LastValuePredictor(), cfg, 0.1
    )
    assert est.status == "too_few_points"
    est = estimate_at_checkpoint(steps, values, FakeControls(50), FailingPredictor(), cfg, 0.1)
    assert est.status == "fit_failed" and "cannot predict" in est.detail

    class InfPredictor:
        def predict(self, steps, losses, controls):
            return FakePrediction(math.inf, 1.0, math.inf)

    est = estimate_at_checkpoint(steps, values, FakeControls(50), InfPredictor(), cfg, 0.1)
    assert est.status == "non_finite_prediction" and not est.usable


def test_estimate_round_trips_through_dict() -> None:
    for est in (
        _est(3.0, 0.1),
        Estimate.failed("fit_failed", 0.2, "boom"),
        Estimate.exact_value(2.5),
    ):
        back = Estimate.from_dict(est.to_dict())
        assert back.status == est.status and back.exact == est.exact
        assert back.usable == est.usable
        if est.usable:
            assert (back.value, back.lower, back.upper) == (est.value, est.lower, est.upper)


@pytest.mark.parametrize("direction", DIRS)
def test_decide_from_raw_curves(direction: str) -> None:
    sign = 1.0 if direction == "minimize" else -1.0
    cfg = DecisionConfig(direction=direction)
    steps = np.arange(0, 21, dtype=float)  # t^ = 0.2 of 100 steps
    curves = [
        TrialCurve(
            "done",
            np.arange(101.0),
            sign * np.full(101, 3.0),
            FakeControls(100),
            final_value=sign * 3.0,
        ),
        TrialCurve("bad", steps, sign * np.full(21, 3.5), FakeControls(100)),
        TrialCurve("good", steps, sign * np.full(21, 3.05), FakeControls(100)),
        TrialCurve("early", steps[:5], sign * np.full(5, 9.0), FakeControls(100)),
        TrialCurve("stopped", steps, sign * np.full(21, 1.0), FakeControls(100), stopped=True),
    ]
    out = decide(curves, LastValuePredictor(0.1), cfg)
    # judged: the running trials past a checkpoint; the early one (t^=0.04) is not judged yet
    assert set(out) == {"bad", "good"}
    assert out["bad"].stop and not out["good"].stop


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="rejudge_every=1.0"):
        DecisionConfig(rejudge_every=1.0)
    with pytest.raises(ValueError, match="rejudge_every=-0.1"):
        DecisionConfig(rejudge_every=-0.1)
    assert DecisionConfig(rejudge_every=0.0).rejudge_slot(0.5) == -1
    assert DecisionConfig(rejudge_every=0.02).rejudge_slot(0.3) == 15
    with pytest.raises(ValueError, match="checkpoints"):
        DecisionConfig(checkpoints=(0.2, 0.1))
    with pytest.raises(ValueError, match="checkpoints"):
        DecisionConfig(checkpoints=(0.0, 0.1))
    with pytest.raises(ValueError, match="margin"):
        DecisionConfig(margin=-1.0)
    with pytest.raises(ValueError, match="n_startup_trials"):
        DecisionConfig(n_startup_trials=0)
    with pytest.raises(ValueError, match="n_min_trials"):
        DecisionConfig(n_min_trials=0)
    with pytest.raises(ValueError, match="direction"):
        DecisionConfig(direction="down")


def test_a_lagging_trial_never_stops_one_ahead_of_it() -> None:
    cfg = DecisionConfig(n_startup_trials=1)

    def snap(key: str, t_hat: float, lo: float, mid: float, hi: float) -> TrialSnapshot:
        return TrialSnapshot(key, running=True,
                             estimate=Estimate(value=mid, lower=lo, upper=hi, t_hat=t_hat))

    ahead = snap("ahead", 0.3, 3.0, 3.1, 3.2)
    # the laggard's early prediction looks better, but it was made at t^ 0.1
    lagging = snap("lagging", 0.1, 2.4, 2.8, 2.9)
    verdicts = dominated([ahead, lagging], ["ahead", "lagging"], cfg)
    assert not verdicts["ahead"].stop and not verdicts["lagging"].stop
    # the same numbers from the same checkpoint stop the worse trial
    level = snap("level", 0.3, 2.4, 2.8, 2.9)
    assert dominated([ahead, level], ["ahead"], cfg)["ahead"].stop
    # a finished trial's exact value counts whenever it finished
    done = TrialSnapshot("done", running=False, estimate=Estimate.exact_value(2.9))
    assert dominated([ahead, done], ["ahead"], cfg)["ahead"].stop


def test_finished_trials_errors_widen_a_running_trials_interval() -> None:
    from hpo._decision import finished_halfwidth, judge_estimate

    # the largest |log(final / predicted)| of the finished trials; none: 0
    assert finished_halfwidth([]) == 0.0
    assert finished_halfwidth([(2.2, 2.0), (1.9, 2.0), (0.0, 1.0)]) == pytest.approx(
        math.log(2.2 / 2.0))
    raw = Estimate(value=2.0, lower=1.96, upper=2.04, t_hat=0.2)
    done = TrialSnapshot("done", running=False, estimate=Estimate.exact_value(1.9))
    cfg = DecisionConfig(n_startup_trials=1)
    # alone with its +-2% interval, the trial predicted 2.0 is dominated by the exact 1.9
    verdict, _ = judge_estimate(raw, "me", 0.2, [done], [], cfg)
    assert verdict.stop
    # the finished trial had been predicted 2.2 at this checkpoint and ended at 1.9: every
    # interval is now at least log(2.2 / 1.9) wide, which reaches below 1.9
    verdict, est = judge_estimate(raw, "me", 0.2, [done], [(2.2, 1.9)], cfg)
    assert not verdict.stop
    assert est.lower == pytest.approx(2.0 * 1.9 / 2.2) and est.value == 2.0
    # an interval already wider is left as it is; for maximize (values are -loss) it mirrors
    wide = Estimate(value=2.0, lower=1.0, upper=3.0, t_hat=0.2)
    assert wide.widened(0.1) == wide
    neg = Estimate(value=-2.0, lower=-2.04, upper=-1.96, t_hat=0.2).widened(math.log(1.1))
    assert neg.lower == pytest.approx(-2.2) and neg.upper == pytest.approx(-2.0 / 1.1)



@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"stop": True, "reason": "dominated", "threshold": 1.707, "best_trial": 5,
          "estimate": {"value": 1.781, "lower": 1.764, "upper": 1.795, "t_hat": 0.2}},
         "stopped at t^ 0.20: predicted 1.781 [1.764, 1.795]; even its optimistic end is worse "
         "than trial 5's pessimistic end 1.707"),
        ({"stop": True, "reason": "dominated (paired)", "threshold": None, "best_trial": 2,
          "estimate": {"value": 1.9, "lower": 1.8, "upper": 2.0, "t_hat": 0.3}},
         "stopped at t^ 0.30: predicted 1.9 [1.8, 2], worse than trial 2's prediction from the "
         "same checkpoint by more than two proxies' predictions were ever off relative to each "
         "other"),
        ({"stop": False, "reason": "not dominated", "threshold": 1.707, "best_trial": 5,
          "estimate": {"value": 1.72, "lower": 1.69, "upper": 1.75, "t_hat": 0.2}},
         "kept at t^ 0.20: predicted 1.72 [1.69, 1.75]; its optimistic end can still beat "
         "trial 5's pessimistic end 1.707"),
        ({"stop": False, "reason": "no usable estimate (fit_failed)", "best_trial": None,
          "estimate": {"value": float("nan"), "lower": float("nan"), "upper": float("nan"),
                       "t_hat": 0.1}},
         "kept at t^ 0.10: no usable estimate (fit_failed)"),
        ({"stop": True, "reason": "diverged", "estimate": {}}, "stopped: diverged"),
    ],
)
def test_explain_states_each_verdict_with_its_numbers(record, expected) -> None:
    from hpo._decision import explain

    # one sentence, the verdict first, then the numbers it rests on
    assert explain(record) == expected
