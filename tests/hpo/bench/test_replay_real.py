"""End to end on real curves with the real predictors: a 124M LR sweep of lr_scheduling.csv.gz
replayed through a real Optuna study and a real local Ray Tune run, the reference curve fitted
on the 33M-93M proxies. Skips where ../shared is absent."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import optuna
import pytest

from hpo import predictors

REPO = Path(__file__).resolve().parents[3]
DATA = REPO.parent / "shared" / "data" / "curves" / "lr_scheduling.csv.gz"
GROUP = "123587328:slimpajama:cosine:0:50000"  # 5 LRs, 1e-4 .. 5e-3 (5e-3 diverges)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not DATA.exists(), reason=f"real curves not found: {DATA}"),
]


@pytest.fixture(scope="module")
def sweep():
    """(reference curve, arms sorted by LR as (RunCurve, true final loss))."""

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = predictors.read_curves(DATA)
        curve = predictors.fit_universal_curve(df[df["n_params"] <= 93.2e6])
        runs = predictors.runs_from_frame(df[df["group"] == GROUP])
    arms = sorted(
        ((r, predictors.final_loss_estimate(r.t_hat, r.losses, at=1.0)) for r in runs),
        key=lambda a: a[0].controls.peak_lr,
    )
    return curve, arms


def test_optuna_replay_keeps_best_and_stops_diverged_run(sweep) -> None:
    from hpo import CollapsePruner, describe_trial

    curve, arms = sweep
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(pruner=CollapsePruner(reference=curve))

    def objective(trial: optuna.Trial) -> float:
        run, final = arms[trial.number]
        describe_trial(trial, total_steps=run.controls.total_steps, controls=run.controls)
        for step, loss in zip(run.steps, run.losses, strict=True):
            trial.report(float(loss), int(step))
            if trial.should_prune():
                raise optuna.TrialPruned()
        return final

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.optimize(objective, n_trials=len(arms))
    finals = np.array([f for _, f in arms])
    states = [t.state for t in sorted(study.trials, key=lambda t: t.number)]
    # the best run is kept (regret 0) and the diverged 5e-3 run is stopped by t^ = 0.3
    assert states[int(np.argmin(finals))] == optuna.trial.TrialState.COMPLETE
    assert study.best_value == pytest.approx(finals.min())
    diverged = study.trials[-1]
    assert diverged.state == optuna.trial.TrialState.PRUNED
    assert diverged.last_step <= 0.3 * arms[-1][0].controls.total_steps + 50
    # it carries its predicted final loss, far above the best
    assert diverged.user_attrs["predicted_final_loss"] > finals.min() + 1.0


def test_ray_replay_keeps_best_and_stops_diverged_run(sweep, ray_session, tmp_path: Path) -> None:
    from ray import tune

    from hpo import CollapseScheduler

    curve, arms = sweep
    controls = [r.controls for r, _ in arms]
    curves = [(r.steps.tolist(), r.losses.tolist(), f) for r, f in arms]

    def train(config: dict, curves: list) -> None:
        import time

        steps, losses, final = curves[config["arm"]]
        for i, (step, loss) in enumerate(zip(steps, losses, strict=True)):
            tune.report({"loss": final if i == len(steps) - 1 else loss, "step": step})
            time.sleep(3.0 / len(steps))

    scheduler = CollapseScheduler(
        reference=curve, time_attr="step", controls=lambda config: controls[config["arm"]]
    )
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(train, curves=curves), {"cpu": 0.4}),
        param_space={"arm": tune.grid_search(list(range(len(arms))))},
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=scheduler),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="real", verbose=0),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = tuner.fit()
    steps = {r.config["arm"]: r.metrics["step"] for r in results}
    finals = np.array([f for _, f in arms])
    best = int(np.argmin(finals))
    total = arms[0][0].controls.total_steps
    # the best run ran to the end; the diverged 5e-3 run was stopped by t^ = 0.3
    assert steps[best] == total
    assert steps[len(arms) - 1] <= 0.3 * total + 50
    assert results.get_best_result().config["arm"] == best
