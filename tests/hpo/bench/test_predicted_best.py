"""``predicted_best@f`` on a small synthetic sweep with a real universal curve and the real
``CollapsePredictor``: it finishes the trial with the lowest predicted final across a crossing
that ``current_best`` gets wrong, and it accounts compute as ``current_best`` does."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from hpo import bench
from hpo.bench import BenchGroup, BenchTrial
from hpo.predictors import CollapsePredictor, Controls, RunCurve, fit_universal_curve
from tests.hpo._fakes import FailingPredictor, synthetic_losses

T = 100
STEPS = np.arange(T, dtype=float)  # one report per step: t^ = 0.0 .. 0.99


def _controls(tau: float, warmup_steps: int = 5) -> Controls:
    return Controls(total_steps=T, tpp=20.0, tau=tau, schedule="linear",
                    warmup_steps=warmup_steps)


@pytest.fixture(scope="module")
def predictor() -> CollapsePredictor:
    """A ``CollapsePredictor`` on a universal curve fitted on six synthetic proxies that span
    tau 0.1 .. 0.4 (the tau of the trials below)."""
    proxies = [RunCurve(f"p{i}", STEPS, synthetic_losses(final, tau), _controls(tau), group="g")
               for i, (final, tau) in enumerate(((3.0, 0.1), (3.2, 0.1), (3.0, 0.4),
                                                 (3.3, 0.4), (3.1, 0.2), (3.4, 0.2)))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CollapsePredictor(fit_universal_curve(proxies))


def _trial(name: str, final: float, tau: float, warmup_steps: int = 5) -> BenchTrial:
    return BenchTrial(name, STEPS.copy(), synthetic_losses(final, tau), final, T,
                      _controls(tau, warmup_steps))


def _crossing() -> BenchGroup:
    """a (tau 0.1) leads early; b (tau 0.4, the higher LR) is the true best (2.95) but worse
    than a at t^ = 0.2; c (tau 0.2) is worse than a throughout."""
    return BenchGroup("crossing", (_trial("a", 3.0, 0.1), _trial("b", 2.95, 0.4),
                                   _trial("c", 3.05, 0.2)))


@pytest.mark.parametrize("mode", bench.MODES)
def test_predicted_best_finishes_the_lowest_prediction_across_a_crossing(
        mode: str, predictor: CollapsePredictor) -> None:
    g = _crossing()
    at_f = [float(t.values[20]) for t in g.trials]
    preds = [predictor.predict(t.steps[:21], t.values[:21], t.controls).final for t in g.trials]
    # the crossing: at t^ = 0.2 b's loss is above a's, yet its predicted final is the lowest
    assert at_f[1] > at_f[0] and int(np.argmin(preds)) == 1 == g.best
    out = bench.replay_predicted_best(g, 0.2, mode, predictor)
    m = bench.group_metrics(g, out)
    assert not out[1].stopped and not m.best_stopped and m.regret == 0.0
    # c is stopped at step 20 either way; lockstep stops a there too, sequential keeps a (it
    # ran first, with no earlier prediction to beat) and then b (predicted below a)
    assert out[2].stopped and out[2].steps_trained == 20
    assert out[0].stopped == (mode == "lockstep")
    assert m.compute == pytest.approx((100 + 20 + 20) / 300 if mode == "lockstep"
                                      else (100 + 100 + 20) / 300)
    # current best at 0.2 keeps a and loses b, the true best
    cb = bench.group_metrics(g, bench.replay_current_best(g, 0.2, mode))
    assert cb.best_stopped and cb.regret == pytest.approx(0.05 / 2.95)


@pytest.mark.parametrize("mode", bench.MODES)
@pytest.mark.parametrize("f", [0.1, 0.2, 0.3])
def test_predicted_best_accounts_as_current_best_when_they_keep_the_same_trials(
        mode: str, f: float, predictor: CollapsePredictor) -> None:
    # no crossing (one tau): the predictions rank the trials as their current losses do, so
    # both rules keep the same trials and every outcome (steps trained, value) is the same
    g = BenchGroup("same", (_trial("x", 3.1, 0.2), _trial("y", 3.0, 0.2),
                            _trial("z", 3.2, 0.2)))
    out = bench.replay_predicted_best(g, f, mode, predictor)
    assert out == bench.replay_current_best(g, f, mode)
    # a stopped trial trained to its first report at or after f (step 100 f)
    assert [o.steps_trained for o in out if o.stopped] == [pytest.approx(100 * f)] * (
        2 if mode == "lockstep" else 1)


@pytest.mark.parametrize("mode", bench.MODES)
def test_predicted_best_keeps_a_trial_it_cannot_predict(
        mode: str, predictor: CollapsePredictor) -> None:
    # every trial declined: every trial runs to its end
    g = _crossing()
    out = bench.replay_predicted_best(g, 0.2, mode, FailingPredictor())
    assert not any(o.stopped for o in out)
    assert bench.group_metrics(g, out).compute == 1.0
    # c's prefix at t^ <= 0.2 is all warmup: the predictor declines it, so c is kept while a
    # (predicted above b) still stops in lockstep
    late = BenchGroup("late", (g.trials[0], g.trials[1],
                               _trial("c", 3.05, 0.2, warmup_steps=50)))
    with pytest.raises(ValueError):
        predictor.predict(late.trials[2].steps[:21], late.trials[2].values[:21],
                          late.trials[2].controls)
    out = bench.replay_predicted_best(late, 0.2, mode, predictor)
    assert [o.stopped for o in out] == [mode == "lockstep", False, False]
    with pytest.raises(ValueError, match="mode"):
        bench.replay_predicted_best(g, 0.2, "parallel", predictor)


def test_run_bench_lists_predicted_best_as_a_peer(predictor: CollapsePredictor) -> None:
    g = _crossing()
    result = bench.run_bench([g], predictor.curve, modes=("lockstep",), ray=False, knobs=False,
                             current_best=(0.2,), shadow=False)
    block = result["modes"]["lockstep"]
    row = block["methods"]["predicted_best@0.2"]
    assert row["mean_regret"] == 0.0 and row["mean_compute"] == pytest.approx(140 / 300)
    assert row["knob"] == "f=0.2"
    # a peer beside current_best, not one of our rows
    assert {"predicted_best@0.2", "current_best@0.2"} <= set(block["comparison"]["peers"])
    assert "predicted_best@0.2" not in block["comparison"]["goal"]["met_by"]
    assert "predicted_best@0.2" in bench.format_table(result)
