"""The Optuna pruner and the Ray Tune scheduler are two translations of one judge: replaying
one sweep through both gives the same stops at the same steps, in both launch orders and
directions, with a fake predictor and with a real universal curve; and a real Optuna study and
a real ``Tuner.fit()`` of a sweep with a trial that returns early and one that fails give the
same stops and the same sentences."""

from __future__ import annotations

import logging
import re
import types
import warnings
from pathlib import Path

import numpy as np
import optuna
import pytest

pytest.importorskip("ray.tune")

from ray.tune.schedulers import TrialScheduler  # noqa: E402

from hpo import CollapsePruner, CollapseScheduler, describe_trial  # noqa: E402
from hpo.pruning._ray import REASON_KEY  # noqa: E402
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


@pytest.mark.parametrize(("rejudge_every", "stale_after", "due"), [
    (0.02, 0.1, list(range(10, 61, 2))),  # the defaults: every 0.02 for 0.1 after each checkpoint
    (0.05, 0.1, list(range(10, 61, 5))),
    (0.02, 0.0, [10, 20, 30, 40, 50]),  # once per checkpoint
])
def test_maybe_judge_asks_for_the_others_only_when_a_judgment_is_due(
        rejudge_every: float, stale_after: float, due: list[int]) -> None:
    from hpo.pruning import Judge, PrunerSettings, TrialView
    from hpo.pruning._predict import build_controls, controls_to_json

    controls = controls_to_json(build_controls(**CONTROLS))
    judge = Judge(predictor=LinearDropPredictor(0.5, 0.05), settings=PrunerSettings(
        threshold=0.0, rejudge_every=rejudge_every, stale_after=stale_after))
    finished = TrialView("done", "done", "complete", {}, 3.0, controls,
                         lambda: (np.arange(T, dtype=float), np.full(T, 3.0)))
    losses = _sweep()[1]
    records: dict[str, dict] = {}
    asked, judged = [], []

    def others() -> list[TrialView]:
        asked.append(step)
        return [finished]

    for step in range(T):
        me = TrialView("me", "me", "running", dict(records), None, controls,
                       lambda step=step: (np.arange(step + 1.0), losses[:step + 1]))
        stop, record = judge.maybe_judge(me, step, float(losses[step]), others)
        assert not stop  # threshold 0 stops nothing
        if record is not None:
            judged.append(step)
            records[f"{record.checkpoint:g}"] = record
    # the other trials are asked for once per judgment, and only then
    assert asked == judged == due


# ----------------------------------------------------------------- a real study, a real Tuner

#: the sweep run in order: (final, last step reported, fails after that report); the curves are
#: final + 0.5 (1 - step / T), which LinearDropPredictor knows
REAL_SWEEP = (
    (3.0, T - 1, False),  # runs to the end
    (2.5, 15, False),  # returns early: finished with its value at step 15, 2.925
    (3.5, T - 1, False),  # clearly worse than trial 1's value: stopped against it
    (2.9, 25, True),  # raises after its report at step 25: failed, then no competitor
    (2.95, T - 1, False),  # within trial 1's whole interval: kept
    (3.6, T - 1, False),  # stopped
)


def _real_value(i: int, step: int, sign: float) -> float:
    final = REAL_SWEEP[i][0]
    return sign * (final + 0.5 * (1 - step / T) + 0.001 * np.sin(step + i))


def _real_optuna(sign: float) -> dict[int, tuple[str, int, str | None]]:
    """``{i: (state, last step, collapse_reason)}`` of the sweep as a real Optuna study."""
    study = optuna.create_study(direction="minimize" if sign > 0 else "maximize",
                                pruner=CollapsePruner(predictor=LinearDropPredictor(0.5, 0.05)))

    def objective(trial: optuna.Trial) -> float:
        i = trial.number
        _, last, fails = REAL_SWEEP[i]
        describe_trial(trial, **CONTROLS)
        for step in range(last + 1):
            trial.report(_real_value(i, step, sign), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        if fails:
            raise RuntimeError("simulated crash")
        return _real_value(i, last, sign)

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study.optimize(objective, n_trials=len(REAL_SWEEP), catch=(RuntimeError,))
    return {t.number: (t.state.name, t.last_step, t.user_attrs.get("collapse_reason"))
            for t in study.get_trials()}


def _real_ray(sign: float, tmp_path: Path):
    """The sweep through a real ``Tuner.fit()`` (one trial at a time, in order); returns
    ``({i: (state, last step, collapse_reason)}, the ResultGrid, {trial id: i})``."""
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    sweep = REAL_SWEEP

    def train(config: dict) -> None:
        i = config["i"]
        _, last, fails = sweep[i]
        for step in range(last + 1):
            tune.report({"loss": _real_value(i, step, sign), "step": step})
        if fails:
            raise RuntimeError("simulated crash")

    sched = CollapseScheduler(predictor=LinearDropPredictor(0.5, 0.05), time_attr="step",
                              controls=CONTROLS)
    tuner = tune.Tuner(
        tune.with_resources(train, {"cpu": 1}),
        param_space={"i": tune.grid_search(list(range(len(sweep))))},
        tune_config=tune.TuneConfig(metric="loss", mode="min" if sign > 0 else "max",
                                    scheduler=sched, max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="same_sweep", verbose=0,
                                  callbacks=[sched.callback(), JsonLoggerCallback()]),
    )
    results = tuner.fit()
    status = {k: r["status"] for k, r in sched.state_dict()["trials"].items()}
    index = {r.metrics["trial_id"]: r.config["i"] for r in results}
    out = {}
    for r in results:
        trial_id = r.metrics["trial_id"]
        state = ("FAIL" if r.error is not None else
                 "PRUNED" if status[trial_id] == "stopped" else "COMPLETE")
        out[r.config["i"]] = (state, int(r.metrics["step"]), r.metrics.get(REASON_KEY))
    return out, results, index


def _by_index(sentence: str | None, index: dict[str, int]) -> str | None:
    """A Ray sentence with each trial id replaced by the trial's place in the sweep (its Optuna
    trial number)."""
    if sentence is None:
        return None
    return re.sub(r"trial (\S+?)([,):]|$)",
                  lambda m: f"trial {index.get(m.group(1), m.group(1))}{m.group(2)}", sentence)


@pytest.mark.slow
def test_real_optuna_study_and_real_tuner_fit_agree(ray_session, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    sign = 1.0
    caplog.set_level(logging.INFO, logger="hpo.pruning._ray")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the warning on trial 1 ending early, tested below
        expected = _real_optuna(sign)
        got, results, index = _real_ray(sign, tmp_path)
    # the rule: trial 1 returned at step 15 and is finished with its value there; trial 3
    # raised and does not compete; trials 2 and 5 are stopped at the first checkpoint, against
    # trial 1's value (its whole interval: no pairing with a trial that ended early)
    assert {i: v[:2] for i, v in expected.items()} == {
        0: ("COMPLETE", T - 1), 1: ("COMPLETE", 15), 2: ("PRUNED", 10), 3: ("FAIL", 25),
        4: ("COMPLETE", T - 1), 5: ("PRUNED", 10)}
    assert "chance to end more than 0.2% below trial 1" in expected[2][2]
    assert "against its final 2.925" in expected[2][2]
    # the same stops and the same sentences through a real Tuner.fit()
    assert {i: v[:2] for i, v in got.items()} == {i: v[:2] for i, v in expected.items()}
    assert {i: _by_index(v[2], index) for i, v in got.items()} == {
        i: v[2] for i, v in expected.items()}
    # the sentence is in each trial's last result and in get_dataframe() (the result files)
    df = results.get_dataframe().set_index("config/i").sort_index()
    for i, (_, _, sentence) in expected.items():
        assert _by_index(df.loc[i, REASON_KEY], index) == sentence
    # one line per stop in the driver's log
    stops = sorted(_by_index(r.getMessage(), index) for r in caplog.records
                   if "stopping trial" in r.getMessage())
    assert stops == [f"CollapseScheduler: stopping trial {i}: {expected[i][2]}" for i in (2, 5)]
