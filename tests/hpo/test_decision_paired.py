"""The paired rule of the decision: trials compared by the ratio of their raw predictions."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import optuna
import pandas as pd
import pytest

from hpo import CollapsePruner, describe_trial
from hpo._decision import (
    DEFAULT_CHECKPOINTS,
    DecisionConfig,
    Estimate,
    TrialCurve,
    TrialSnapshot,
    decide,
    dominated,
    finished_check,
    pair_delta,
    pair_errors,
    paired_gap,
    paired_tolerance_from_groups,
)
from tests.hpo._fakes import LastValuePredictor


def _est(value: float, half: float) -> Estimate:
    return Estimate(value=value, lower=value - half, upper=value + half, t_hat=0.2)


def test_pair_errors_cancel_a_shared_bias() -> None:
    # both predictions 10% high: the ratio is exact, no error
    assert pair_errors([2.2, 3.3], [2.0, 3.0]) == pytest.approx([0.0])
    # one of three 10% high: its two pairs are off by log(1.1)
    errs = pair_errors([2.2, 3.0, 4.0], [2.0, 3.0, 4.0])
    assert sorted(errs) == pytest.approx([0.0, math.log(1.1), math.log(1.1)])


def test_config_tolerance_lookup_and_validation() -> None:
    cfg = DecisionConfig(paired_tolerance={0.2: 0.02, 0.1: 0.05})
    assert cfg.paired_tolerance == ((0.1, 0.05), (0.2, 0.02))
    # below the first checkpoint: the first delta; otherwise the last one not after it
    assert cfg.tolerance(0.05) == 0.05
    assert cfg.tolerance(0.15) == 0.05
    assert cfg.tolerance(0.3) == 0.02
    assert DecisionConfig().tolerance(0.2) is None
    with pytest.raises(ValueError, match="paired_tolerance"):
        DecisionConfig(paired_tolerance={0.2: -0.1})
    with pytest.raises(ValueError, match="paired_finished_inflation"):
        DecisionConfig(paired_finished_inflation=-1.0)


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_paired_rule_stops_what_wide_intervals_keep(direction: str) -> None:
    s = 1.0 if direction == "minimize" else -1.0
    cfg = DecisionConfig(direction=direction, paired_tolerance={0.1: 0.03})
    # intervals +-0.5 overlap widely; the raw predictions differ by a factor 1.05 > e^0.03
    best = TrialSnapshot("best", True, _est(s * 2.0, 0.5), paired=s * 2.0, paired_cp=0.2)
    worse = TrialSnapshot("worse", True, _est(s * 2.1, 0.5), paired=s * 2.1, paired_cp=0.2)
    close = TrialSnapshot("close", True, _est(s * 2.04, 0.5), paired=s * 2.04, paired_cp=0.2)
    out = dominated([best, worse, close], ["best", "worse", "close"], cfg)
    assert out["worse"].stop and out["worse"].reason == "dominated (paired)"
    assert out["worse"].best == "best"
    # within the tolerance: kept; the best is never dominated
    assert not out["close"].stop and not out["best"].stop
    # without the paired rule the intervals keep everything
    plain = dominated([best, worse, close], ["worse"], DecisionConfig(direction=direction))
    assert not plain["worse"].stop


def test_paired_rule_compares_one_checkpoint_and_the_floor() -> None:
    cfg = DecisionConfig(paired_tolerance={0.1: 0.01, 0.2: 0.01})
    me = TrialSnapshot("me", True, _est(2.1, 1.0), paired=2.1, paired_cp=0.2)
    # a competitor that lags, predicted at 0.1 only: the tolerances hold for two predictions
    # from one checkpoint, so it does not enter, though log 1.05 exceeds both (in a Ray run a
    # best trial that ran ahead was stopped at t^ 0.25 by a lagging arm's t^ 0.1 prediction)
    old = TrialSnapshot("old", True, _est(2.0, 1.0), paired=2.0, paired_cp=0.1)
    assert paired_gap(me, [old], cfg) == (None, None)
    assert not dominated([me, old], ["me"], cfg)["me"].stop
    # from the same checkpoint: 0.01 applies and the trial is dominated
    new = TrialSnapshot("new", True, _est(2.0, 1.0), paired=2.0, paired_cp=0.2)
    gap, key = paired_gap(me, [new], cfg)
    assert gap > 0 and key == "new"
    # a floor above the gap (e.g. from the finished trials) keeps it
    gap, _ = paired_gap(me, [new], cfg, tolerance_floor=0.2)
    assert gap < 0
    # stopped trials do not compete
    dead = TrialSnapshot("new", False, None, alive=False, paired=2.0, paired_cp=0.2)
    assert not dominated([me, dead], ["me"], cfg)["me"].stop


def _done(key: str, predicted: float, final: float, counterparts: tuple[str, ...] = ()) -> (
    TrialSnapshot
):
    """A finished trial: its exact final and its raw prediction from t^ 0.2."""
    return TrialSnapshot(key, False, Estimate.exact_value(final), paired=predicted,
                         paired_cp=0.2, paired_counterparts=counterparts)


def test_finished_check_scales_by_the_worst_miss_against_its_delta() -> None:
    cfg = DecisionConfig(paired_tolerance={0.2: 0.05})
    # one finished trial: no pair, nothing to check
    assert finished_check([_done("a", 2.2, 2.0)], 0.2, cfg) == (1.0, 0.0)
    # a's prediction 10% high, b's and c's exact: two pairs off by log(1.1) against delta 0.05
    done = [_done("a", 2.2, 2.0), _done("b", 3.0, 3.0), _done("c", 4.0, 4.0)]
    scale, floor = finished_check(done, 0.2, cfg)
    assert scale == pytest.approx(math.log(1.1) / 0.05) and floor == 0.0
    # k scales the errors; 0 turns the check off; another checkpoint's trials do not count
    k2 = dataclasses.replace(cfg, paired_finished_inflation=2.0)
    assert finished_check(done, 0.2, k2)[0] == pytest.approx(2 * math.log(1.1) / 0.05)
    off = dataclasses.replace(cfg, paired_finished_inflation=0.0)
    assert finished_check(done, 0.2, off) == (1.0, 0.0)
    assert finished_check(done, 0.3, cfg) == (1.0, 0.0)
    # misses within the deltas: no scaling
    close = [_done("a", 2.04, 2.0), _done("b", 3.0, 3.0)]
    assert finished_check(close, 0.2, cfg) == (1.0, 0.0)
    # a zero delta (nothing calibrated at that checkpoint) floors at the error instead
    zero = DecisionConfig(paired_tolerance={0.2: 0.0})
    assert finished_check(done, 0.2, zero) == pytest.approx((1.0, math.log(1.1)))
    # a pair's delta needs both predictions' checkpoints
    assert pair_delta(done[0], done[1], cfg) == 0.05
    with pytest.raises(ValueError, match="paired_cp"):
        pair_delta(TrialSnapshot("x", True), done[0], cfg)


def _running(key: str, predicted: float, counterparts: tuple[str, ...]) -> TrialSnapshot:
    """A running trial predicted at t^ 0.2 (wide interval: only the paired rule can stop it)."""
    return TrialSnapshot(key, True, _est(predicted, 1.0), paired=predicted, paired_cp=0.2,
                         paired_counterparts=counterparts)


def test_finished_check_keeps_a_pair_delta_that_held() -> None:
    # pooled delta 0.05; trials "me" and "c" have counterparts at two proxy sizes that agree
    # within 0.01, so their pair's delta is 0.01
    pairs = [(0.2, "pm1", "pc1", 0.005), (0.2, "pm2", "pc2", 0.01)]
    cfg = DecisionConfig(paired_tolerance={0.2: 0.05}, paired_pairs=pairs)
    me = _running("me", 2.04, ("pm1", "pm2"))
    c = _running("c", 2.0, ("pc1", "pc2"))
    # two finished trials whose predicted ratio missed by log(1.03), within their delta 0.05:
    # the calibration held, me (2% behind c, over its 0.01) is stopped
    held = [_done("a", 2.06, 2.0), _done("b", 3.0, 3.0)]
    verdict = dominated([*held, me, c], ["me"], cfg)["me"]
    assert verdict.stop and verdict.reason == "dominated (paired)" and verdict.best == "c"
    # a miss of log(1.2), 3.6x its delta: every delta widens 3.6x, me (0.036 > log 1.02) is kept
    missed = [_done("a", 2.4, 2.0), _done("b", 3.0, 3.0)]
    assert finished_check(missed, 0.2, cfg)[0] == pytest.approx(math.log(1.2) / 0.05)
    assert not dominated([*missed, me, c], ["me"], cfg)["me"].stop
    # paired_gap applies the scale it is given
    assert paired_gap(me, [c], cfg)[0] > 0
    assert paired_gap(me, [c], cfg, scale=math.log(1.2) / 0.05)[0] < 0


class _Controls:
    total_steps = 10


def test_paired_tolerance_from_groups_with_a_known_predictor() -> None:
    # LastValuePredictor predicts the last value; runs end 10% below it, except one at 5%
    steps = np.arange(1, 11, dtype=float)
    group = []
    for final, drop in ((2.0, 1.1), (3.0, 1.1), (4.0, 1.05)):
        values = np.full(10, final * drop)
        group.append((steps, values, _Controls(), final))
    tol = paired_tolerance_from_groups([group], LastValuePredictor(half=0.1), [0.3, 0.5])
    # the worst pair error is log(1.1 / 1.05) at both checkpoints
    assert tol == pytest.approx({0.3: math.log(1.1 / 1.05), 0.5: math.log(1.1 / 1.05)})


def test_pruner_paired_rule_in_a_real_study() -> None:
    # intervals +-1 never separate these trials; the paired rule (tolerance 0.02) does
    pruner = CollapsePruner(
        predictor=LastValuePredictor(half=1.0), checkpoints=(0.3,),
        paired_tolerance={0.3: 0.02}, n_startup_trials=1,
    )
    study = optuna.create_study(pruner=pruner)
    levels = [2.0, 2.2, 2.01]

    def objective(trial: optuna.Trial) -> float:
        level = levels[trial.number]
        describe_trial(trial, total_steps=10, tau=0.2, tpp=20.0, schedule="linear",
                       warmup_steps=0)
        for step in range(1, 11):
            trial.report(level, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return level

    study.optimize(objective, n_trials=3)
    states = [t.state for t in study.trials]
    # 2.2 is e^0.095 worse than 2.0 at the same checkpoint: pruned; 2.01 is within 0.02: kept
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
                      optuna.trial.TrialState.COMPLETE]


def test_pruner_waits_for_a_lagging_trial_to_reach_the_checkpoint() -> None:
    # a trial ahead at t^ 0.5 is judged against the others' predictions from t^ 0.5 only: a
    # lagging trial's t^ 0.1 prediction does not stop it; once that trial reaches 0.5 it does
    pruner = CollapsePruner(
        predictor=LastValuePredictor(half=1.0), checkpoints=(0.1, 0.5),
        paired_tolerance={0.1: 0.02, 0.5: 0.02}, n_startup_trials=1,
    )
    study = optuna.create_study(pruner=pruner)
    ahead, behind = study.ask(), study.ask()
    for t in (ahead, behind):
        describe_trial(t, total_steps=100, tau=0.2, tpp=20.0, schedule="linear",
                       warmup_steps=0)

    def run(trial: optuna.Trial, steps: range, value: float) -> bool:
        for step in steps:
            trial.report(value, step)
            if trial.should_prune():
                return True
        return False

    assert not run(behind, range(1, 11), 2.0)
    assert not run(ahead, range(1, 11), 2.0)  # level with the other at t^ 0.1
    # e^0.14 above the lagging arm's t^ 0.1 prediction, but that is from another checkpoint
    assert not run(ahead, range(11, 51), 2.3)
    assert not run(behind, range(11, 51), 2.0)
    assert run(ahead, range(51, 55), 2.3)  # re-judged once the other has reached t^ 0.5


def test_paired_tolerance_widens_for_extrapolated_predictions() -> None:
    cfg = DecisionConfig(paired_tolerance={0.2: 0.04}, extrapolation_inflation=2.0)
    best = TrialSnapshot("best", True, _est(2.0, 1.0), paired=2.0, paired_cp=0.2)
    me = TrialSnapshot("me", True, _est(2.12, 1.0), paired=2.12, paired_cp=0.2)
    # log(1.06) = 0.058 > 0.04: dominated
    assert paired_gap(me, [best], cfg)[0] == pytest.approx(math.log(1.06) - 0.04)
    # a prediction outside the proxies' control range: 0.08 applies, kept
    far = TrialSnapshot("me", True, _est(2.12, 1.0), paired=2.12, paired_cp=0.2,
                        paired_extrapolated=True)
    assert paired_gap(far, [best], cfg)[0] == pytest.approx(math.log(1.06) - 0.08)


def test_a_schedule_no_proxy_ran_is_not_paired() -> None:
    from hpo._decision import NEW_SCHEDULE, estimate_at_checkpoint, new_schedule
    from predictors import CollapsePredictor, fit_universal_curve
    from predictors.io import runs_from_frame
    from tests.predictors._synth import make_run

    # proxies ran linear decay only; a constant-LR trial is predicted through the paper form
    frames = [make_run(f"p{i}", n, 2000, lr, tpp, final=4.0 - 0.1 * i)
              for i, (n, tpp, lr) in enumerate(
                  [(1e7, 10.0, 1e-3), (2e7, 20.0, 1e-3), (1e7, 10.0, 2e-3), (2e7, 20.0, 2e-3)])]
    predictor = CollapsePredictor(fit_universal_curve(pd.concat(frames, ignore_index=True)))
    cfg = DecisionConfig()
    linear, constant = (
        runs_from_frame(make_run(name, 1.5e7, 2000, 1.5e-3, 15.0, schedule=s))[0]
        for name, s in (("lin", "linear"), ("con", "constant"))
    )
    assert not new_schedule(predictor, linear.controls)
    assert new_schedule(predictor, constant.controls)
    for run, pairable in ((linear, True), (constant, False)):
        keep = run.t_hat <= 0.3
        est = estimate_at_checkpoint(run.steps[keep], run.losses[keep], run.controls,
                                     predictor, cfg, 0.3)
        assert est.usable and est.pairable is pairable
        assert (NEW_SCHEDULE in est.extrapolated) is not pairable
        assert NEW_SCHEDULE not in est.out_of_range
    # the paired rule ignores such a trial: a tight tolerance stops the paired one only
    cfg = DecisionConfig(paired_tolerance=((0.3, 0.01),), n_startup_trials=1)
    curves = [
        TrialCurve("best", np.arange(1, 601.0), np.full(600, 2.0), _Controls2("linear")),
        TrialCurve("lin", np.arange(1, 601.0), np.full(600, 2.1), _Controls2("linear")),
        TrialCurve("con", np.arange(1, 601.0), np.full(600, 2.1), _Controls2("constant")),
    ]
    verdicts = decide(curves, _SchedulePredictor(), cfg)
    assert verdicts["lin"].stop and verdicts["lin"].reason == "dominated (paired)"
    assert not verdicts["con"].stop


class _Controls2:
    total_steps = 2000

    def __init__(self, schedule: str) -> None:
        self.schedule = schedule


class _Curve:
    """A stand-in reference curve whose empirical part covers only ``linear``."""

    empirical = object()
    paper = object()

    def component(self, controls: object) -> object:
        return self.empirical if controls.schedule == "linear" else self.paper


class _SchedulePredictor(LastValuePredictor):
    def __init__(self) -> None:
        super().__init__(half=1.0)  # intervals +-1: the interval rule never separates them
        self.curve = _Curve()


def test_pruner_and_scheduler_calibrate_the_paired_rule_from_the_reference_by_default() -> None:
    from hpo import CollapseScheduler
    from predictors import fit_universal_curve, paired_tolerance
    from tests.predictors._synth import paper_family

    curve = fit_universal_curve(paper_family(every=40))
    expected = paired_tolerance(curve.calibration, DEFAULT_CHECKPOINTS)
    assert expected and all(math.isfinite(v) for v in expected.values())
    for adapter in (CollapsePruner, CollapseScheduler):
        assert dict(adapter(reference=curve).config.paired_tolerance) == pytest.approx(expected)
        assert adapter(reference=curve, paired_tolerance=None).config.paired_tolerance == ()
        # no reference curve to calibrate on: off
        assert adapter(predictor=LastValuePredictor()).config.paired_tolerance == ()
        assert adapter().config.paired_tolerance == ()
    # a curve without per-run calibration (an older file): off, and says so
    data = curve.to_dict()
    data["calibration"] = {k: v for k, v in data["calibration"].items() if k != "runs"}
    with pytest.warns(UserWarning, match="paired rule off.*refit"):
        assert CollapsePruner(reference=data).config.paired_tolerance == ()
    with pytest.raises(ValueError, match="paired_tolerance"):
        CollapsePruner(reference=curve, paired_tolerance="yes")


def test_pair_tolerance_for_settings_the_proxies_ran() -> None:
    pairs = [(0.2, "b1", "a1", 0.01), (0.2, "a2", "b2", 0.02), (0.2, "a1", "c1", 0.004),
             (0.1, "a1", "b1", 0.3), (0.1, "a2", "b2", 0.2)]
    cfg = DecisionConfig(paired_tolerance={0.1: 0.5, 0.2: 0.05}, paired_pairs=pairs)
    # the counterparts of a and b form two pairs: the larger error is the delta
    assert cfg.pair_tolerance(0.2, ("a1", "a2"), ("b1", "b2")) == pytest.approx(0.02)
    assert cfg.pair_tolerance(0.25, ("b2", "b1"), ("a2", "a1")) == pytest.approx(0.02)
    assert cfg.pair_tolerance(0.15, ("a1", "a2"), ("b1", "b2")) == pytest.approx(0.3)
    assert cfg.pair_tolerance(0.05, ("a1", "a2"), ("b1", "b2")) == pytest.approx(0.3)
    # a single pair is not enough; no counterparts, no pair-specific delta
    assert cfg.pair_tolerance(0.2, ("a1",), ("c1",)) is None
    assert cfg.pair_tolerance(0.2, (), ("b1", "b2")) is None
    assert DecisionConfig().pair_tolerance(0.2, ("a1", "a2"), ("b1", "b2")) is None
    with pytest.raises(ValueError, match="paired_pairs"):
        DecisionConfig(paired_pairs=[(0.2, "a", "b", -1.0)])


def test_pair_tolerance_from_the_largest_proxy_sizes_with_enough_pairs() -> None:
    # a and b ran at sizes 10 (a1, a2 / b1, b2) and 20 (a3, a4 / b3, b4); the small proxies
    # collapse worse, so their pairs' errors are larger
    small = [(0.2, f"a{i}", f"b{j}", 0.09, 10.0) for i in (1, 2) for j in (1, 2)]
    large = [(0.2, "a3", "b3", 0.01, 20.0), (0.2, "a4", "b4", 0.02, 20.0)]
    mine, theirs = ("a1", "a2", "a3", "a4"), ("b1", "b2", "b3", "b4")
    two = DecisionConfig(paired_tolerance={0.2: 0.5}, paired_pairs=small + large,
                         paired_min_pairs=2)
    assert two.pair_tolerance(0.2, mine, theirs) == pytest.approx(0.02)
    # one pair at the largest size is not enough: the next size down is added
    assert two.pair_tolerance(0.2, ("a1", "a2", "a3"), theirs) == pytest.approx(0.09)
    # the default wants 4 pairs: 2 at the largest size, so the smaller size's join them
    cfg = DecisionConfig(paired_tolerance={0.2: 0.5}, paired_pairs=small + large)
    assert cfg.paired_min_pairs == 4
    assert cfg.pair_tolerance(0.2, mine, theirs) == pytest.approx(0.09)
    # four pairs at the largest size are enough on their own
    full = large + [(0.2, "a3", "b4", 0.03, 20.0), (0.2, "a4", "b3", 0.015, 20.0)]
    assert DecisionConfig(paired_tolerance={0.2: 0.5}, paired_pairs=small + full).pair_tolerance(
        0.2, mine, theirs) == pytest.approx(0.03)
    with pytest.raises(ValueError, match="paired_min_pairs"):
        DecisionConfig(paired_min_pairs=1)
    # no size with two pairs: all of them (here one per size, as on multipowerlaw)
    one_each = DecisionConfig(paired_tolerance={0.2: 0.5}, paired_pairs=[
        (0.2, "a1", "b1", 0.09, 10.0), (0.2, "a3", "b3", 0.01, 20.0)])
    assert one_each.pair_tolerance(0.2, ("a1", "a3"), ("b1", "b3")) == pytest.approx(0.09)
    # a pair without a size: all pairs count, as before sizes were known
    mixed = DecisionConfig(paired_tolerance={0.2: 0.5},
                           paired_pairs=small + large + [(0.2, "a3", "b4", 0.03)])
    assert mixed.pair_tolerance(0.2, mine, theirs) == pytest.approx(0.09)
    # the sizes survive normalisation; a bad size names the field
    assert (0.2, "a3", "b3", 0.01, 20.0) in cfg.paired_pairs
    with pytest.raises(ValueError, match="paired_pairs"):
        DecisionConfig(paired_pairs=[(0.2, "a", "b", 0.1, -5.0)])
    with pytest.raises(ValueError, match="paired_pairs"):
        DecisionConfig(paired_pairs=[(0.2, "a", "b")])


def test_paired_rule_uses_the_pair_tolerance_below_the_pooled_one() -> None:
    pairs = [(0.2, "a1", "b1", 0.01), (0.2, "a2", "b2", 0.02)]
    cfg = DecisionConfig(paired_tolerance={0.2: 0.06}, paired_pairs=pairs)
    best = _running("best", 2.0, ("b1", "b2"))
    worse = _running("worse", 2.1, ("a1", "a2"))
    # log(2.1 / 2.0) = 0.049: within the pooled 0.06, beyond the pair's 0.02
    gap, key = paired_gap(worse, [best], cfg)
    assert gap == pytest.approx(math.log(1.05) - 0.02) and key == "best"
    assert dominated([best, worse], ["worse"], cfg)["worse"].stop
    # without counterparts the pooled delta keeps it
    plain = TrialSnapshot("worse", True, _est(2.1, 1.0), paired=2.1, paired_cp=0.2)
    assert paired_gap(plain, [best], cfg)[0] == pytest.approx(math.log(1.05) - 0.06)
    # a pair error above the pooled delta does not widen it
    loose = DecisionConfig(paired_tolerance={0.2: 0.03},
                           paired_pairs=[(0.2, "a1", "b1", 0.5), (0.2, "a2", "b2", 0.5)])
    assert paired_gap(worse, [best], loose)[0] == pytest.approx(math.log(1.05) - 0.03)
    # the counterparts survive the storage round trip of an estimate
    est = dataclasses.replace(_est(2.1, 1.0), counterparts=("a1", "a2"))
    assert Estimate.from_dict(est.to_dict()).counterparts == ("a1", "a2")


def test_adapters_take_the_pair_errors_from_the_reference_by_default() -> None:
    from hpo import CollapseScheduler
    from hpo._predict import auto_paired_pairs
    from predictors import fit_universal_curve
    from tests.predictors._synth import paper_family

    curve = fit_universal_curve(paper_family(every=40))
    expected = auto_paired_pairs(curve, DEFAULT_CHECKPOINTS)
    assert expected
    # each pair carries its proxies' size (the pair tolerance prefers the largest)
    size = {r["run_id"]: r["n_params"] for r in curve.calibration["runs"]}
    assert all(len(e) == 5 and e[4] == size[e[1]] == size[e[2]] for e in expected)
    for adapter in (CollapsePruner, CollapseScheduler):
        assert adapter(reference=curve).config.paired_pairs == DecisionConfig(
            paired_pairs=expected).paired_pairs
        assert adapter(reference=curve, paired_pairs=None).config.paired_pairs == ()
        # the paired rule off: no pairs either
        assert adapter(reference=curve, paired_tolerance=None).config.paired_pairs == ()
    with pytest.raises(ValueError, match="paired_pairs"):
        CollapsePruner(reference=curve, paired_pairs="yes")
    # a trial's estimate names its counterparts (what the pair tolerance is looked up by)
    from hpo._decision import estimate_at_checkpoint
    from predictors import runs_from_frame

    pruner = CollapsePruner(reference=curve)
    run = runs_from_frame(paper_family(every=40))[4]
    keep = run.steps <= 0.3 * run.controls.total_steps
    est = estimate_at_checkpoint(run.steps[keep], run.losses[keep],
                                 run.controls.with_(n_params=8e7), pruner._predictor,
                                 pruner.config, 0.3)
    assert est.usable and est.counterparts == ("r4",)
