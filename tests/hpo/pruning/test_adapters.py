"""The Optuna pruner and the Ray Tune scheduler are two translations of one judge: replaying
one sweep through both gives the same stops at the same steps, in both launch orders and
directions, with a fake predictor and with a real universal curve."""

from __future__ import annotations

import types
import warnings

import numpy as np
import optuna
import pytest

pytest.importorskip("ray.tune")

from ray.tune.schedulers import TrialScheduler  # noqa: E402

from hpo import CollapsePruner, CollapseScheduler, describe_trial  # noqa: E402
from tests.hpo._fakes import LinearDropPredictor, synthetic_losses  # noqa: E402

T = 100
CONTROLS = {"total_steps": T, "tau": 0.2, "tpp": 20.0, "schedule": "linear", "warmup_steps": 5}


def _sweep() -> list[np.ndarray]:
    """Losses at steps 0..T-1 of six trials: near ties, clear losers, and a best one late."""
    finals = [3.05, 3.4, 3.0, 3.02, 3.8, 2.98]
    rng = np.random.default_rng(0)
    return [f + 0.5 * (1 - np.arange(T) / T) + rng.normal(0, 0.002, T) for f in finals]


def _optuna_stops(curves, mode, sign, **kwargs) -> dict[int, int]:
    study = optuna.create_study(direction="minimize" if sign > 0 else "maximize",
                                pruner=CollapsePruner(**kwargs))
    stops: dict[int, int] = {}

    def start():
        trial = study.ask()
        describe_trial(trial, **CONTROLS)
        return trial

    def step(trial, i, k) -> bool:
        trial.report(sign * float(curves[i][k]), k)
        if trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            stops[i] = k
            return True
        if k == T - 1:
            study.tell(trial, sign * float(curves[i][k]))
        return False

    if mode == "sequential":
        for i in range(len(curves)):
            trial = start()
            for k in range(T):
                if step(trial, i, k):
                    break
    else:
        trials = [start() for _ in curves]
        for k in range(T):
            for i, trial in enumerate(trials):
                if i not in stops:
                    step(trial, i, k)
    return stops


def _ray_stops(curves, mode, sign, **kwargs) -> dict[int, int]:
    sched = CollapseScheduler(metric="loss", mode="min" if sign > 0 else "max",
                              time_attr="step", controls=CONTROLS, **kwargs)
    trials = [types.SimpleNamespace(trial_id=f"t{i}", config={}) for i in range(len(curves))]
    stops: dict[int, int] = {}

    def step(i, k) -> bool:
        result = {"loss": sign * float(curves[i][k]), "step": k}
        if sched.on_trial_result(None, trials[i], result) == TrialScheduler.STOP:
            sched.on_trial_complete(None, trials[i], result)
            stops[i] = k
            return True
        if k == T - 1:
            sched.on_trial_complete(None, trials[i], result)
        return False

    if mode == "sequential":
        for i, trial in enumerate(trials):
            sched.on_trial_add(None, trial)
            for k in range(T):
                if step(i, k):
                    break
    else:
        for trial in trials:
            sched.on_trial_add(None, trial)
        for k in range(T):
            for i in range(len(trials)):
                if i not in stops:
                    step(i, k)
    return stops


@pytest.mark.parametrize("mode", ["lockstep", "sequential"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_both_adapters_stop_the_same_trials_at_the_same_steps(mode: str, sign: float) -> None:
    curves = _sweep()
    kwargs = dict(predictor=LinearDropPredictor(0.5, 0.05))
    stops = _optuna_stops(curves, mode, sign, **kwargs)
    assert stops == _ray_stops(curves, mode, sign, **kwargs)
    # the sweep is one that needs the rule: clear losers stopped, the best (trial 5) kept
    assert 4 in stops and 1 in stops and 5 not in stops


@pytest.mark.parametrize("mode", ["lockstep", "sequential"])
def test_same_stops_with_a_real_universal_curve(mode: str) -> None:
    from hpo.predictors import Controls, RunCurve, fit_universal_curve

    controls = Controls.from_dict(CONTROLS)
    steps = np.arange(T, dtype=float)
    proxies = [RunCurve(f"p{i}", steps, synthetic_losses(f, 0.2), controls, group="g")
               for i, f in enumerate((3.0, 3.2, 3.4, 3.6))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        curve = fit_universal_curve(proxies)
        curves = [synthetic_losses(f, 0.2) * (1 + 0.002 * np.sin(steps / 7 + f))
                  for f in (3.1, 3.9, 3.0, 3.5, 3.02)]
        stops = _optuna_stops(curves, mode, 1.0, reference=curve)
        assert stops == _ray_stops(curves, mode, 1.0, reference=curve)
    assert 1 in stops and 2 not in stops
