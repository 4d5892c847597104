"""CollapsePruner and describe_trial on real Optuna studies (in the manner of optuna's
tests/pruners_tests): startup, warm-up, intervals, both directions, the NaN rule, fail open,
storage-backed state and several worker processes on one storage."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import optuna
import pytest

from hpo import CollapsePruner, describe_trial
from hpo.predictors.shift import study_shift
from hpo.pruning import Record
from hpo.pruning._optuna import (
    CONTROLS_ATTR,
    INTERVAL_ATTR,
    PREDICTION_ATTR,
    REASON_ATTR,
    T_HAT_ATTR,
)
from tests.hpo._fakes import FailingPredictor, LastValuePredictor, synthetic_losses

optuna.logging.set_verbosity(optuna.logging.WARNING)

T = 100  # total steps of every fake trial
DIRS = ["minimize", "maximize"]
REPO = Path(__file__).resolve().parents[3]


def _sign(direction: str) -> float:
    return 1.0 if direction == "minimize" else -1.0


def _run(
    study: optuna.Study,
    losses: np.ndarray | float,
    *,
    describe: bool = True,
    n_steps: int = T,
) -> tuple[optuna.trial.FrozenTrial, int | None]:
    """Run one trial reporting ``sign * losses`` at steps 0..n_steps-1; returns the frozen
    trial and the step it was pruned at (``None`` when it completed)."""
    sign = _sign("minimize" if study.direction == optuna.study.StudyDirection.MINIMIZE else "max")
    values = np.broadcast_to(np.asarray(losses, dtype=float), (n_steps,))
    trial = study.ask()
    if describe:
        describe_trial(trial, total_steps=T, tau=0.2, tpp=20.0, schedule="linear", warmup_steps=5)
    for step in range(n_steps):
        trial.report(sign * float(values[step]), step)
        if trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return study.trials[-1], step
    study.tell(trial, sign * float(values[-1]))
    return study.trials[-1], None


@pytest.mark.parametrize("direction", DIRS)
def test_pruner_prunes_dominated_trial_at_first_checkpoint(direction: str) -> None:
    pruner = CollapsePruner(predictor=LastValuePredictor(0.1))
    study = optuna.create_study(direction=direction, pruner=pruner)
    _, pruned_at = _run(study, 3.0)
    assert pruned_at is None
    frozen, pruned_at = _run(study, 4.0)
    # warm-up: nothing before t^ = 0.1, then pruned right at the first checkpoint
    assert pruned_at == 10
    assert frozen.state == optuna.trial.TrialState.PRUNED
    # the pruned trial carries its predicted final value, interval and t^ (dashboard-visible)
    assert frozen.user_attrs[PREDICTION_ATTR] == pytest.approx(_sign(direction) * 4.0)
    lo, hi = frozen.user_attrs[INTERVAL_ATTR]
    assert lo < frozen.user_attrs[PREDICTION_ATTR] < hi
    assert frozen.user_attrs[T_HAT_ATTR] == pytest.approx(0.1)
    record = frozen.system_attrs["collapse:cp:0.1"]
    assert record["stop"] and record["reason"] == "unlikely_to_win"
    assert record["against"]["label"] == 0 and record["probability"] < 1e-6
    # the verdict in one sentence with its numbers, where the user looks (a user attr)
    why = frozen.user_attrs[REASON_ATTR]
    assert why.startswith("stopped at t^ 0.10: ")
    assert "chance to end more than 0.2% below trial 0" in why
    assert f"against its final {_sign(direction) * 3.0:.4g}" in why
    # Optuna's semantics kept: the pruned trial's value is its last intermediate value
    assert frozen.intermediate_values[10] == pytest.approx(_sign(direction) * 4.0)


def test_on_verdict_sees_every_record_and_cannot_change_a_decision() -> None:
    seen: list[tuple[int, Record]] = []
    pruner = CollapsePruner(predictor=LastValuePredictor(0.1),
                            on_verdict=lambda label, rec: seen.append((label, rec)))
    study = optuna.create_study(pruner=pruner)
    _run(study, 3.0)
    frozen, pruned_at = _run(study, 4.0)
    # the stop's record, as stored on the trial, reached the observer with its trial number
    assert pruned_at == 10 and seen[-1][0] == 1
    assert seen[-1][1].to_dict() == frozen.system_attrs["collapse:cp:0.1"]
    assert seen[-1][1].explanation == frozen.user_attrs[REASON_ATTR]

    def broken(label: int, rec: Record) -> None:
        raise RuntimeError("dashboard down")

    study = optuna.create_study(pruner=CollapsePruner(predictor=LastValuePredictor(0.1),
                                                      on_verdict=broken))
    with pytest.warns(UserWarning, match="on_verdict raised RuntimeError: dashboard down"):
        _run(study, 3.0)
        _, pruned_at = _run(study, 4.0)
    assert pruned_at == 10  # the same decision
    with pytest.raises(TypeError, match="on_verdict must be callable"):
        CollapsePruner(predictor=LastValuePredictor(), on_verdict="print")


@pytest.mark.parametrize("direction", DIRS)
def test_pruner_keeps_trial_whose_interval_overlaps(direction: str) -> None:
    study = optuna.create_study(
        direction=direction, pruner=CollapsePruner(predictor=LastValuePredictor(0.1))
    )
    _run(study, 3.0)
    # 3.08 +- 0.1 at 80%: a 13.6% chance to end more than the tolerance (0.2%) below 3.0,
    # above the threshold 0.05
    frozen, pruned_at = _run(study, 3.08)
    assert pruned_at is None
    # a kept trial's latest verdict says why it was kept
    why = frozen.user_attrs[REASON_ATTR]
    assert why.startswith("kept at t^") and "13.6%" in why
    assert "chance to end more than 0.2% below trial 0" in why
    # a threshold above that chance stops it
    strict = optuna.create_study(direction=direction, pruner=CollapsePruner(
        predictor=LastValuePredictor(0.1), threshold=0.2))
    _run(strict, 3.0)
    assert _run(strict, 3.08)[1] == 10
    # with a wider interval on the predictor a clearly worse trial survives too
    study = optuna.create_study(
        direction=direction, pruner=CollapsePruner(predictor=LastValuePredictor(2.0))
    )
    _run(study, 3.0)
    assert _run(study, 4.0)[1] is None


@pytest.mark.parametrize("direction", DIRS)
def test_finished_trials_shift_the_predictions_by_their_shared_error(direction: str) -> None:
    # a predictor that says 10% too high for every trial: once trials finish, the study's
    # shared error moves the next prediction (and its interval) toward where they ended
    sign = _sign(direction)
    study = optuna.create_study(direction=direction, pruner=CollapsePruner(
        predictor=LastValuePredictor(0.1, bias=0.3), threshold=0.0))  # it sees losses
    first, _ = _run(study, 3.0)
    raw = first.system_attrs["collapse:cp:0.1"]["estimate"]
    assert raw["shift_trials"] == 0 and raw["value"] == pytest.approx(sign * 3.3)
    for _ in range(3):
        _run(study, 3.0)
    frozen, _ = _run(study, 3.0)
    est = frozen.system_attrs["collapse:cp:0.1"]["estimate"]
    errors = [math.log(3.3 / 3.0)] * 4
    shift = study_shift(errors).shift
    assert est["shift_trials"] == 4 and est["shift"] == pytest.approx(shift)
    assert est["value"] == pytest.approx(sign * 3.3 * math.exp(-shift))
    assert est["upper"] - est["lower"] == pytest.approx(0.2 * math.exp(-shift))
    assert abs(est["value"]) < 3.05  # within 2% of where the trial ends (3.0), from 10%
    assert frozen.system_attrs["collapse:cp:0.1"]["explanation"].endswith(
        f"; the prediction is the curve's {sign * 3.3:.4g} moved 9.0% down, as the study's 4 "
        "finished trials ended below their predictions")


def test_pruner_margin() -> None:
    study = optuna.create_study(
        pruner=CollapsePruner(predictor=LastValuePredictor(0.1), margin=1.0)
    )
    _run(study, 3.0)
    # 4.0 against 3.0 + margin 1.0: an even chance to end "better", kept; 4.2 is not
    assert _run(study, 4.0)[1] is None
    assert _run(study, 4.2)[1] == 10


def test_pruner_startup() -> None:
    study = optuna.create_study(
        pruner=CollapsePruner(predictor=LastValuePredictor(0.1), n_startup_trials=3)
    )
    _run(study, 3.0)
    # only 2 trials with a prediction or a value (< 3): no pruning
    assert _run(study, 4.0)[1] is None
    assert _run(study, 4.0)[1] == 10


def test_pruner_judges_only_at_checkpoints_and_predicts_once_per_checkpoint() -> None:
    predictor = LastValuePredictor(0.1)
    study = optuna.create_study(pruner=CollapsePruner(predictor=predictor, checkpoints=(0.2, 0.5)))
    _run(study, 3.0)
    assert predictor.calls == 2  # the completed trial: once at t^ = 0.2 and once at 0.5
    # a trial that is good until 0.2 and bad afterwards is pruned at the next checkpoint 0.5
    losses = np.where(np.arange(T) < 30, 2.9, 4.0)
    frozen, pruned_at = _run(study, losses)
    assert pruned_at == 50
    assert predictor.calls == 4
    assert frozen.system_attrs["collapse:cp:0.2"]["stop"] is False
    assert frozen.system_attrs["collapse:cp:0.5"]["stop"] is True


def test_pruner_nan_rule() -> None:
    study = optuna.create_study(pruner=CollapsePruner(predictor=LastValuePredictor(0.1)))
    _run(study, 3.0)
    # an isolated NaN is dropped from the curve: the good trial is not pruned
    losses = np.full(T, 2.95)
    losses[3] = np.nan
    assert _run(study, losses)[1] is None
    # a trial whose latest value is NaN at a checkpoint has diverged: pruned, even first
    losses = np.full(T, 2.0)
    losses[8:] = np.nan
    study2 = optuna.create_study(pruner=CollapsePruner(predictor=LastValuePredictor(0.1)))
    frozen, pruned_at = _run(study2, losses)
    assert pruned_at == 10
    assert frozen.system_attrs["collapse:cp:0.1"]["reason"] == "diverged"
    assert frozen.user_attrs[REASON_ATTR] == (
        "stopped at t^ 0.10: its latest value is not finite (diverged)")


def test_a_fail_open_warning_reaches_the_terminal_once() -> None:
    # one channel (warnings), so a user without logging set up does not read it twice
    code = textwrap.dedent("""
        import optuna
        from hpo import CollapsePruner
        from tests.hpo._fakes import FailingPredictor
        from tests.hpo.pruning.test_optuna import _run
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        study = optuna.create_study(pruner=CollapsePruner(predictor=FailingPredictor()))
        _run(study, 3.0)
        _run(study, 9.0)
    """)
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[3]).stderr
    assert err.count("fit_failed") == 1, err


def test_pruner_fails_open_and_warns_once() -> None:
    study = optuna.create_study(pruner=CollapsePruner(predictor=FailingPredictor()))
    with pytest.warns(UserWarning, match="fit_failed") as record:
        _run(study, 3.0)
        frozen, pruned_at = _run(study, 9.0)
    assert pruned_at is None
    assert sum("fit_failed" in str(w.message) for w in record) == 1
    # the failed prediction is stored with its reason, and the trial says why it was kept
    rec = frozen.system_attrs["collapse:cp:0.5"]
    assert rec["reason"] == "no_estimate" and rec["estimate"]["status"] == "fit_failed"
    assert frozen.user_attrs[REASON_ATTR] == (
        "kept at t^ 0.50: no prediction (ValueError: cannot predict this curve); a trial is "
        "never stopped without one")
    # missing controls: never pruned, one warning naming describe_trial
    study = optuna.create_study(pruner=CollapsePruner(predictor=LastValuePredictor(0.1)))
    _run(study, 3.0)
    with pytest.warns(UserWarning, match="describe_trial") as record:
        assert _run(study, 9.0, describe=False)[1] is None
        assert _run(study, 9.0, describe=False)[1] is None
    assert sum("describe_trial" in str(w.message) for w in record) == 1


def test_without_controls_the_same_step_decides_against_the_studys_length() -> None:
    # no describe_trial anywhere: progress is read against the finished trials' last step and
    # the same-step evidence decides; curves that never cross make a far gap unlikely to close
    study = optuna.create_study(pruner=CollapsePruner(threshold=0.1))
    decay = 1.0 + np.exp(-np.arange(T) / 20.0)
    with pytest.warns(UserWarning, match="same-step evidence alone") as record:
        for level in np.linspace(1.5, 1.0, 10):  # each trial ahead of the ones before
            assert _run(study, level * decay, describe=False)[1] is None
        frozen, stopped_at = _run(study, 3.0 * decay, describe=False)
    assert sum("no usable controls" in str(w.message) for w in record) == 1
    assert stopped_at == 10  # the first checkpoint, t^ 0.1 of the study's 99 steps
    rec = frozen.system_attrs["collapse:cp:0.1"]
    assert rec["decided_by"] == "same_step" and rec["stop"] and rec["probability"] < 0.1
    assert rec["estimate"]["status"] == "missing_controls"
    # the strongest competitor: the finished trial it is least likely to end below
    assert rec["same_step"] == pytest.approx({"gap": math.log(2.0), "probability":
                                              rec["probability"], "pairs": 45, "such": 0,
                                              "closed": 0})
    assert frozen.user_attrs[REASON_ATTR] == (
        "stopped at t^ 0.10: 7.8% chance to end more than 0.2% below trial 0 (its final "
        "1.511), below the threshold 0.1, from the same step alone (no controls: no curve "
        "prediction); at the same step it is 100.0% behind trial 0: no finished pair in this "
        "study had a gap as large")
    # a near tie is kept, and the first trial of a study (nothing finished) is never judged
    assert _run(study, 1.01 * decay, describe=False)[1] is None
    fresh = optuna.create_study(pruner=CollapsePruner(threshold=0.99))
    with pytest.warns(UserWarning, match="same-step evidence alone"):
        first, stopped_at = _run(fresh, 3.0 * decay, describe=False)
    assert stopped_at is None and not first.system_attrs


def test_pruner_warns_once_when_steps_pass_total_steps() -> None:
    study = optuna.create_study(pruner=CollapsePruner(predictor=LastValuePredictor(0.1)))
    trial = study.ask()
    describe_trial(trial, total_steps=10, schedule="linear")
    with pytest.warns(UserWarning, match="beyond total_steps=10") as record:
        for step in range(0, 40, 2):
            trial.report(3.0, step)
            trial.should_prune()
    assert sum("total_steps" in str(w.message) for w in record) == 1
    assert "report the optimizer step" in str(record[0].message)


def test_pruner_state_lives_in_storage(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(
        storage=url, study_name="s", pruner=CollapsePruner(predictor=LastValuePredictor(0.1))
    )
    _run(study, 3.0)
    frozen, pruned_at = _run(study, 4.0)
    assert pruned_at == 10
    # a fresh pruner in a fresh study object reads the decision from the storage
    fresh = CollapsePruner(predictor=FailingPredictor())
    again = optuna.load_study(study_name="s", storage=url, pruner=fresh)
    trial = again.trials[1]
    assert fresh.prune(again, trial) is True


def test_describe_trial_validates_and_round_trips() -> None:
    from hpo.pruning._predict import controls_from_json

    study = optuna.create_study()
    trial = study.ask()
    with pytest.raises(ValueError, match="schedule"):
        describe_trial(trial, total_steps=100, tau=0.2)
    with pytest.raises(ValueError, match="total_steps"):
        describe_trial(trial, total_steps=0, schedule="linear")
    with pytest.raises(ValueError, match="but got schedule=.triangle."):
        describe_trial(trial, total_steps=100, schedule="triangle")
    with pytest.raises(ValueError, match="lr_schedule"):
        describe_trial(trial, total_steps=100, lr_schedule=[1.0, 2.0])
    # an exact schedule in any units, normalized to its peak; long ones stored as knots
    total = 20_000
    lr = (
        3e-3
        * np.minimum(np.arange(total) / 500, 1.0)
        * np.where(np.arange(total) < 16_000, 1.0, (total - np.arange(total)) / 4_000)
    )
    controls = describe_trial(trial, total_steps=total, tau=0.1, lr_schedule=lr)
    stored = trial.user_attrs[CONTROLS_ATTR]
    assert len(stored["lr_knots"]) < 2_100
    back = controls_from_json(stored)
    assert back.total_steps == total and back.tau == pytest.approx(0.1)
    t = np.linspace(0, 1, 997)
    np.testing.assert_allclose(back.eta(t), controls.eta(t), atol=1e-3)
    assert controls.eta(np.array([0.5]))[0] == pytest.approx(1.0)
    # the base LR (the LR the sweep sets, shared across widths) is stored like the other
    # fields
    other = study.ask()
    describe_trial(other, total_steps=100, schedule="linear", peak_lr=0.005, base_lr=0.01)
    assert controls_from_json(other.user_attrs[CONTROLS_ATTR]).base_lr == pytest.approx(0.01)



def test_describe_trial_warmup_fraction_means_a_fraction_of_total_steps() -> None:
    from hpo.pruning._predict import controls_from_json

    study = optuna.create_study()
    frac, steps, none = study.ask(), study.ask(), study.ask()
    # 0.05 means 5% of training, as `hpo train --warmup 0.05` and YAML `warmup: 0.05`
    assert describe_trial(frac, total_steps=400, schedule="linear",
                          warmup_steps=0.05).warmup_steps == 20
    assert controls_from_json(frac.user_attrs[CONTROLS_ATTR]).warmup_steps == 20
    # a value >= 1 is a number of steps, 0 is no warmup
    assert describe_trial(steps, total_steps=400, schedule="linear",
                          warmup_steps=30).warmup_steps == 30
    assert describe_trial(none, total_steps=400, schedule="linear",
                          warmup_steps=0).warmup_steps == 0
    # a negative warmup is rejected up front, naming the field
    with pytest.raises(ValueError, match="warmup_steps"):
        describe_trial(study.ask(), total_steps=400, schedule="linear", warmup_steps=-0.1)
    # and so is a warmup as long as the run: no step would follow the schedule after it
    with pytest.raises(ValueError, match="warmup_steps must be fewer than total_steps=100"):
        describe_trial(study.ask(), total_steps=100, schedule="linear", warmup_steps=500)

def test_pruner_self_calibrating_mode_waits_for_completed_trials() -> None:
    from hpo.pruning import study_system_attrs

    study = optuna.create_study(pruner=CollapsePruner(n_calibration_trials=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # before 2 completed trials nothing is pruned, however bad
        for final in (3.0, 6.0):
            assert _run(study, synthetic_losses(final, 0.2))[1] is None
        frozen, pruned_at = _run(study, synthetic_losses(6.0, 0.2))
    # now a curve is fitted on the completed trials and the bad trial is pruned
    assert pruned_at is not None
    assert "collapse:reference" in study_system_attrs(study)
    assert frozen.user_attrs[PREDICTION_ATTR] == pytest.approx(6.0, rel=0.05)


_WORKER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import optuna
    from hpo import CollapsePruner, describe_trial
    from tests.hpo._fakes import LinearDropPredictor

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    kind, where = sys.argv[1], sys.argv[2]
    if kind == "journal":
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend
        storage = JournalStorage(JournalFileBackend(where))
    else:
        storage = where
    pruner = CollapsePruner(predictor=LinearDropPredictor(0.5, 0.05))
    study = optuna.load_study(study_name="shared", storage=storage, pruner=pruner)

    def objective(trial):
        # trials 0 and 1 are good, the others clearly worse
        final = 3.0 + 0.01 * trial.number if trial.number < 2 else 4.0 + 0.1 * trial.number
        describe_trial(trial, total_steps=100, tau=0.2, schedule="linear")
        for step in range(100):
            trial.report(final + 0.5 * (1 - step / 100), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return final

    study.optimize(objective, n_trials=3)
    """
)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_pruner_workers_on_one_storage_agree(tmp_path: Path, kind: str) -> None:
    if kind == "sqlite":
        where = f"sqlite:///{tmp_path / 'shared.db'}"
        storage: object = where
    else:
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        where = str(tmp_path / "journal.log")
        storage = JournalStorage(JournalFileBackend(where))
    optuna.create_study(study_name="shared", storage=storage)
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen([sys.executable, str(script), kind, where], cwd=REPO, env=env)
        for _ in range(2)
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    study = optuna.load_study(study_name="shared", storage=storage)
    trials = study.get_trials()
    assert len(trials) == 6
    by_number = {t.number: t for t in trials}
    # the best trial completed; the clearly worse ones that had a competitor were pruned
    assert by_number[0].state == optuna.trial.TrialState.COMPLETE
    pruned = [t for t in trials if t.state == optuna.trial.TrialState.PRUNED]
    assert len(pruned) >= 3
    for t in pruned:
        assert t.number >= 2
        assert math.isfinite(t.user_attrs[PREDICTION_ATTR])
    # every decision is in the storage: a pruner in another process returns the same answers
    judge = CollapsePruner(predictor=FailingPredictor())
    for t in trials:
        if t.last_step is not None and t.last_step >= 10:
            assert judge.prune(study, t) is (t.state == optuna.trial.TrialState.PRUNED)


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("stale_after", [0.1, 0.0])
def test_pruner_rejudges_after_the_last_checkpoint(direction: str, stale_after: float) -> None:
    """A trial past its last checkpoint is pruned once a competitor that started later
    completes with a better value (re-judging its t^ 0.3 prediction); without re-judging it
    runs on."""
    sign = _sign(direction)
    pruner = CollapsePruner(predictor=LastValuePredictor(0.1), checkpoints=(0.1, 0.2, 0.3),
                            stale_after=stale_after)
    study = optuna.create_study(direction=direction, pruner=pruner)
    slow = study.ask()
    describe_trial(slow, total_steps=T, tau=0.2, tpp=20.0, schedule="linear", warmup_steps=5)
    for step in range(36):
        slow.report(sign * 4.0, step)
        assert not slow.should_prune()  # alone: startup
    _, pruned_at = _run(study, 3.0)  # a better trial starts later and completes
    assert pruned_at is None
    stopped = None
    for step in range(36, T):
        slow.report(sign * 4.0, step)
        if slow.should_prune():
            stopped = step
            break
    if stale_after:
        assert stopped == 36  # the first report of a new re-judging interval
        record = study.trials[0].system_attrs["collapse:cp:0.3"]
        assert record["stop"] is True and record["against"]["label"] == 1
        assert study.trials[0].user_attrs[REASON_ATTR].startswith(
            "stopped at t^ 0.36 (predicted at t^ 0.30): ")
    else:
        assert stopped is None


def test_pruner_with_optimize_n_jobs_threads() -> None:
    """``study.optimize(n_jobs=2)``: two threads share the pruner and the in-memory storage;
    the best setting completes, dominated ones are pruned, each with its prediction, and
    every decision agrees with a fresh pruner reading the same storage."""
    from tests.hpo._fakes import LinearDropPredictor

    finals = [3.0, 3.0, 3.6, 3.0, 3.7, 2.9, 3.8, 3.5]
    pruner = CollapsePruner(predictor=LinearDropPredictor(half=0.05))
    study = optuna.create_study(pruner=pruner)
    for f in finals:
        study.enqueue_trial({"final": f})

    def objective(trial: optuna.Trial) -> float:
        final = trial.suggest_float("final", 2.0, 4.0)
        describe_trial(trial, total_steps=T, tau=0.2, tpp=20.0, schedule="linear")
        for step in range(T):
            trial.report(final + 0.5 * (1 - step / T), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return final

    study.optimize(objective, n_trials=8, n_jobs=2)
    trials = study.get_trials()
    assert len(trials) == 8
    best = min(t.params["final"] for t in trials)
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    pruned = [t for t in trials if t.state == optuna.trial.TrialState.PRUNED]
    assert study.best_value == pytest.approx(best)
    assert pruned, "some dominated setting must be pruned"
    for t in pruned:
        assert t.params["final"] > best
        assert t.user_attrs[PREDICTION_ATTR] == pytest.approx(t.params["final"], abs=1e-6)
    assert len(done) + len(pruned) == 8
    judge = CollapsePruner(predictor=FailingPredictor())
    for t in trials:
        assert judge.prune(study, t) is (t.state == optuna.trial.TrialState.PRUNED)


@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("last", [T - 2, T - 1])
def test_pruner_never_prunes_at_the_last_report(direction: str, last: int) -> None:
    """Re-judging prunes a worse trial at its next report after a better one completes, but
    not when that is its last report (step T - 1 of steps counted from 0): that saves nothing."""
    sign = _sign(direction)
    study = optuna.create_study(
        direction=direction,
        pruner=CollapsePruner(predictor=LastValuePredictor(0.1), checkpoints=(0.9,)),
    )
    slow = study.ask()
    describe_trial(slow, total_steps=T, tau=0.2, tpp=20.0, schedule="linear", warmup_steps=5)
    for step in range(T - 4):  # to step 95, in the re-judging interval before steps 98 and 99
        slow.report(sign * 4.0, step)
        assert not slow.should_prune()  # alone: startup
    assert _run(study, 3.0)[1] is None  # a better trial completes meanwhile
    slow.report(sign * 4.0, last)
    assert slow.should_prune() is (last < T - 1)


def test_pruner_takes_its_arguments_and_names_a_bad_one() -> None:
    import inspect

    names = list(inspect.signature(CollapsePruner).parameters)
    # the curve or predictor, the observer, and the settings of PrunerSettings by name
    assert names == ["reference", "predictor", "on_verdict", "settings"]
    with pytest.raises(TypeError, match="CollapsePruner got an unexpected keyword argument "
                                        "'treshold'; its settings are checkpoints, threshold"):
        CollapsePruner(treshold=0.1)
    assert CollapsePruner(tolerance=0.002).judge.tolerance == 0.002
    for kwargs, field in (({"threshold": -0.1}, "threshold"), ({"threshold": 1.5}, "threshold"),
                          ({"tolerance": 1.0}, "tolerance"),
                          ({"margin": -1.0}, "margin"), ({"checkpoints": (0.5, 0.2)},
                                                         "checkpoints"),
                          ({"n_startup_trials": 0}, "n_startup_trials"),
                          ({"rejudge_every": 0.0}, "rejudge_every"),
                          ({"stale_after": -0.1}, "stale_after"),
                          ({"prior": {"coef": {}}}, "pair prior: missing field 'intercept'"),
                          ({"prior": {"intercept": -3, "coef": {"colour": 1}}}, "colour")):
        with pytest.raises(ValueError, match=field):
            CollapsePruner(predictor=LastValuePredictor(), **kwargs)


def _reference_curve():
    from hpo.predictors import fit_universal_curve
    from tests.predictors._synth import paper_family

    return fit_universal_curve(paper_family(noise=0.002), form="paper")


def test_the_pruner_predicts_with_the_prior_it_is_given(tmp_path: Path) -> None:
    import json

    from hpo.predictors import PairPrior, default_prior

    prior = PairPrior(-2.0, {"inv_points": 1.0}, distance_slope=0.3, dof=3.0)
    path = tmp_path / "prior.json"
    path.write_text(json.dumps(prior.to_dict()))
    # a PairPrior, its dict or its file: the judge's collapse predictor reads that one
    for given in (prior, prior.to_dict(), str(path)):
        pruner = CollapsePruner(reference=_reference_curve(), prior=given)
        assert pruner.judge.predictor.prior == prior
    assert CollapsePruner(reference=_reference_curve()).judge.predictor.prior is \
        default_prior()


def test_pruner_reference_not_a_curve_raises_naming_the_file(tmp_path: Path) -> None:
    csv = tmp_path / "proxies.csv"
    csv.write_text("run_id,step,loss\nr0,0,5.0\n")
    with pytest.raises(ValueError) as info:
        CollapsePruner(reference=str(csv))
    # a ValueError naming the file and saying how to get a curve, not a bare JSONDecodeError
    assert type(info.value) is ValueError
    assert str(csv) in str(info.value) and "not a universal-curve JSON" in str(info.value)
    assert "hpo fit-curve" in str(info.value)
    with pytest.raises(ValueError, match="universal-curve file not found"):
        CollapsePruner(reference=tmp_path / "missing.json")


@pytest.mark.parametrize("direction", DIRS)
def test_a_trial_that_returns_early_competes_with_its_value_alone(direction: str) -> None:
    """A trial that completes before its total_steps is finished with its value: it stops a
    clearly worse trial, against the latter's whole interval (its own prediction, of a final
    it never reached, is not paired), and it is warned about once."""
    study = optuna.create_study(direction=direction,
                                pruner=CollapsePruner(predictor=LastValuePredictor(0.1)))
    early, pruned_at = _run(study, 3.0, n_steps=16)
    assert pruned_at is None and early.state == optuna.trial.TrialState.COMPLETE
    with pytest.warns(UserWarning, match="trial 0 finished before its total_steps") as caught:
        frozen, pruned_at = _run(study, 4.0)
        _run(study, 5.0)
    assert sum("finished before" in str(w.message) for w in caught) == 1
    assert pruned_at == 10
    record = frozen.system_attrs["collapse:cp:0.1"]
    assert record["against"]["label"] == 0 and record["against"]["estimate"] is None
    assert record["study_trials"] == 0
    final = _sign(direction) * 3.0
    assert f"against its final {final:.4g})" in frozen.user_attrs[REASON_ATTR]


@pytest.mark.parametrize("direction", DIRS)
def test_a_stopped_trial_hands_its_predicted_final_to_the_sampler(direction: str) -> None:
    """``return stop_with_prediction(trial)`` in place of ``raise TrialPruned()``: the trial is
    COMPLETE with its predicted final (marked), so TPE ranks it among the finals, and it never
    becomes ``study.best_trial`` nor a competitor."""
    from optuna.samplers._tpe.sampler import _split_trials

    from hpo import PREDICTED_VALUE_ATTR, measured_trials, stop_with_prediction, value_is_predicted

    sign = _sign(direction)
    study = optuna.create_study(direction=direction, sampler=optuna.samplers.TPESampler(seed=0),
                                pruner=CollapsePruner(predictor=LastValuePredictor(0.1)))

    def run(loss: float) -> float:
        trial = study.ask()
        describe_trial(trial, total_steps=T, tau=0.2, tpp=20.0, schedule="linear",
                       warmup_steps=5)
        for step in range(T):
            trial.report(sign * loss, step)
            if trial.should_prune():
                value = stop_with_prediction(trial)
                study.tell(trial, value)
                return value
        study.tell(trial, sign * loss)
        return sign * loss

    assert run(3.0) == sign * 3.0
    # a clearly worse trial stops at t^ 0.1 and ends with its predicted final, 4.0
    assert run(4.0) == pytest.approx(sign * 4.0)
    stopped = study.trials[-1]
    assert stopped.state == optuna.trial.TrialState.COMPLETE
    assert stopped.user_attrs[PREDICTED_VALUE_ATTR] is True
    assert value_is_predicted(stopped) and not value_is_predicted(study.trials[0])
    assert stopped.intermediate_values and max(stopped.intermediate_values) == 10
    # the sampler sees it as a complete trial ranked by that value: below the measured best,
    # above the worse ones
    run(5.0)
    below, above = _split_trials(study, study.trials, 2)
    assert [t.number for t in below] == [0, 1] and [t.number for t in above] == [2]
    # the best trial is always a measured one; the predicted trials are left out of
    # measured_trials and never compete
    assert study.best_trial.number == 0
    assert [t.number for t in measured_trials(study)] == [0]
    assert study.trials[-1].system_attrs["collapse:cp:0.1"]["against"]["label"] == 0


@pytest.mark.parametrize("direction", DIRS)
def test_a_predicted_final_is_never_better_than_the_best_measured_one(direction: str) -> None:
    from hpo import stop_with_prediction

    sign = _sign(direction)
    # a stopped trial whose stored prediction (rewritten below) beats the measured best is
    # held just behind it
    study = optuna.create_study(direction=direction, pruner=CollapsePruner(
        predictor=LastValuePredictor(0.01)))
    _run(study, 3.0)
    trial = study.ask()
    describe_trial(trial, total_steps=T, tau=0.2, tpp=20.0, schedule="linear", warmup_steps=5)
    for step in range(T):
        trial.report(sign * 3.5, step)
        if trial.should_prune():
            break
    else:
        pytest.fail("the worse trial was not stopped")
    # rewrite its stored prediction to one better than the best measured final
    from hpo.pruning._storage import read_trial, set_trial_system_attr

    rec = dict(read_trial(study, trial).system_attrs["collapse:cp:0.1"])
    rec["estimate"] = {**rec["estimate"], "value": sign * 2.0}
    set_trial_system_attr(study, trial, "collapse:cp:0.1", rec)
    value = stop_with_prediction(trial)
    study.tell(trial, value)
    assert sign * value > 3.0 and value == pytest.approx(sign * 3.0)
    assert study.best_trial.number == 0
    # without a measured final (or a prediction) it ends PRUNED, as without the helper
    fresh = optuna.create_study(direction=direction, pruner=CollapsePruner(
        predictor=LastValuePredictor(0.1)))
    lone = fresh.ask()
    with pytest.raises(optuna.TrialPruned):
        stop_with_prediction(lone)


def test_each_stop_is_one_line_in_optunas_log(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    study = optuna.create_study(pruner=CollapsePruner(predictor=LastValuePredictor(0.1)))
    _run(study, 3.0)
    with caplog.at_level(logging.INFO, logger="optuna.hpo.CollapsePruner"):
        frozen, pruned_at = _run(study, 4.0)
    lines = [r.getMessage() for r in caplog.records if r.name == "optuna.hpo.CollapsePruner"]
    # one line for the stop, with the stored sentence; none for the judgments that kept it
    assert pruned_at is not None
    assert lines == [f"Trial 1 stopped by CollapsePruner: {frozen.user_attrs[REASON_ATTR]}"]


def test_optunas_line_for_a_predicted_value_says_it_is_one(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from hpo import stop_with_prediction

    study = optuna.create_study(pruner=CollapsePruner(predictor=LastValuePredictor(0.1)))

    def objective(trial: optuna.Trial) -> float:
        loss = trial.suggest_categorical("loss", [3.0, 4.0])
        describe_trial(trial, total_steps=T, tau=0.2, tpp=20.0, schedule="linear",
                       warmup_steps=5)
        for step in range(T):
            trial.report(loss, step)
            if trial.should_prune():
                return stop_with_prediction(trial)
        return loss

    study.enqueue_trial({"loss": 3.0})
    study.enqueue_trial({"loss": 4.0})
    with caplog.at_level(logging.INFO, logger="optuna.study.study"):
        study.optimize(objective, n_trials=2)
    lines = [r.getMessage() for r in caplog.records if r.name == "optuna.study.study"]
    # the measured trial's line is Optuna's own; the stopped one's says its value is predicted
    assert lines[0].startswith("Trial 0 finished with value: 3.0 and parameters")
    assert lines[1].startswith("Trial 1 finished with its predicted value (stopped by "
                               "CollapsePruner, not measured): 4.0")
