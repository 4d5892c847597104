"""CollapseScheduler: metric/mode handling, decisions and save/restore driven directly (fast),
and real local Ray Tune runs (slow): stopping, OptunaSearch, state restored with the experiment.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray.tune")

from ray.tune.schedulers import FIFOScheduler, TrialScheduler  # noqa: E402

from hpo import CollapseScheduler  # noqa: E402
from hpo.pruning._ray import PREDICTED_FINAL_KEY, REASON_KEY, STATE_FILE  # noqa: E402
from tests.hpo._fakes import (  # noqa: E402
    LastValuePredictor,
    LinearDropPredictor,
    synthetic_losses,
)

REPO = Path(__file__).resolve().parents[3]
T = 100
CONTROLS = {"total_steps": T, "tau": 0.2, "tpp": 20.0, "schedule": "linear"}


def _trial(trial_id: str, config: dict | None = None) -> types.SimpleNamespace:
    # the scheduler reads only trial_id, config (and storage, absent here: no persistence)
    return types.SimpleNamespace(trial_id=trial_id, config=config or {})


def _feed(
    sched: CollapseScheduler, trial: types.SimpleNamespace, losses, sign: float = 1.0
) -> int | None:
    """Report losses at steps 0..; returns the step of a STOP decision (None: completed)."""
    for step, loss in enumerate(np.broadcast_to(np.asarray(losses, dtype=float), (T + 1,))):
        decision = sched.on_trial_result(None, trial, {"loss": sign * loss, "step": step})
        if decision == TrialScheduler.STOP:
            sched.on_trial_complete(None, trial, {"loss": sign * loss, "step": step})
            return step
    sched.on_trial_complete(None, trial, {"loss": sign * float(loss), "step": T})
    return None


def test_scheduler_is_fifo_and_handles_metric_mode_like_asha() -> None:
    sched = CollapseScheduler(predictor=LastValuePredictor())
    assert isinstance(sched, FIFOScheduler)
    # metric and mode come from TuneConfig when not given
    assert sched.set_search_properties("loss", "min")
    assert sched.metric == "loss" and sched._mode == "min"
    # ...but never override what the user set
    assert not sched.set_search_properties("acc", None)
    fixed = CollapseScheduler(predictor=LastValuePredictor(), metric="acc", mode="max")
    assert not fixed.set_search_properties("loss", "min")
    assert fixed._mode == "max"
    with pytest.raises(ValueError, match="mode"):
        CollapseScheduler(predictor=LastValuePredictor(), mode="down")
    with pytest.raises(ValueError, match="threshold"):
        CollapseScheduler(predictor=LastValuePredictor(), threshold=2.0)
    # the pruner's arguments (its settings by name), plus Ray's metric, mode, time_attr and
    # the controls
    import inspect

    assert list(inspect.signature(CollapseScheduler).parameters) == [
        "reference", "metric", "mode", "time_attr", "controls", "predictor", "on_verdict",
        "settings"]
    with pytest.raises(TypeError, match="CollapseScheduler got an unexpected keyword"):
        CollapseScheduler(predictor=LastValuePredictor(), treshold=0.1)


def test_scheduler_without_metric_says_how_to_fix() -> None:
    sched = CollapseScheduler(predictor=LastValuePredictor())
    with pytest.raises(ValueError, match="TuneConfig"):
        sched.on_trial_add(None, _trial("a"))


@pytest.mark.parametrize("mode", ["min", "max"])
def test_scheduler_stops_dominated_trial_at_first_checkpoint(mode: str) -> None:
    sign = 1.0 if mode == "min" else -1.0
    sched = CollapseScheduler(
        predictor=LastValuePredictor(0.1), metric="loss", mode=mode, time_attr="step"
    )
    good, bad = _trial("good", CONTROLS), _trial("bad", CONTROLS)
    sched.on_trial_add(None, good)
    sched.on_trial_add(None, bad)
    assert _feed(sched, good, 3.0, sign) is None
    # nothing before t^ = 0.1, then stopped
    assert _feed(sched, bad, 4.0, sign) == 10
    state = sched.state_dict()["trials"]
    assert state["bad"]["status"] == "stopped" and state["good"]["status"] == "completed"
    record = state["bad"]["checkpoints"]["0.1"]
    assert record["against"]["label"] == "good"
    assert record["estimate"]["value"] == pytest.approx(sign * 4.0)
    # the reason is in Ray's output: the stopped trial's last result and the debug string
    assert record["explanation"].startswith("stopped at t^ 0.10: ")
    assert "bad stopped at t^ 0.10" in sched.debug_string()
    worse = _trial("worse", CONTROLS)
    sched.on_trial_add(None, worse)
    results = [{"loss": sign * 5.0, "step": step} for step in range(11)]
    decisions = [sched.on_trial_result(None, worse, r) for r in results]
    assert decisions[-1] == TrialScheduler.STOP and REASON_KEY not in results[-2]
    assert results[-1][REASON_KEY].startswith("stopped at t^ 0.10: ")


def test_scheduler_puts_the_sentence_where_tune_stores_results(
        caplog: pytest.LogCaptureFixture) -> None:
    """Each trial's latest verdict is in the results its callback sees (before Tune's loggers)
    and in its last result once it ends; each stop is one line in the log."""
    import logging

    caplog.set_level(logging.INFO, logger="hpo.pruning._ray")
    sched = CollapseScheduler(predictor=LastValuePredictor(0.1), metric="loss", mode="min",
                              time_attr="step")
    callback = sched.callback()
    stored: dict[str, list[dict]] = {}

    def run(trial_id: str, loss: float) -> types.SimpleNamespace:
        trial = _trial(trial_id, CONTROLS)
        trial.last_result = {}
        sched.on_trial_add(None, trial)
        for step in range(T):
            result = {"loss": loss, "step": step}  # Tune's result; the scheduler gets a copy
            decision = sched.on_trial_result(None, trial, dict(result))
            callback.on_trial_result(iteration=step, trials=[], trial=trial, result=result)
            trial.last_result = {**result, "done": decision == TrialScheduler.STOP}
            stored.setdefault(trial_id, []).append(result)
            if decision == TrialScheduler.STOP:
                break
        sched.on_trial_complete(None, trial, dict(trial.last_result))
        return trial

    good, bad = run("good", 3.0), run("bad", 4.0)
    # before its first verdict a result has no sentence; from it on, the latest verdict
    assert REASON_KEY not in stored["good"][9]
    assert stored["good"][10][REASON_KEY].startswith("kept at t^ 0.10: ")
    assert stored["bad"][-1][REASON_KEY].startswith("stopped at t^ 0.10: ")
    assert stored["bad"][-1][REASON_KEY] == sched.reason("bad")
    # the last result of each trial (Result.metrics) carries its latest verdict
    assert good.last_result[REASON_KEY] == sched.reason("good") == stored["good"][-1][REASON_KEY]
    # re-judged up to t^ 0.60 with the same verdict: the sentence says when it was reached
    assert good.last_result[REASON_KEY].startswith("kept at t^ 0.50: ")
    assert bad.last_result[REASON_KEY] == stored["bad"][-1][REASON_KEY]
    # one line per stop in the driver's log
    assert [r.getMessage() for r in caplog.records] == [
        f"CollapseScheduler: stopping trial bad: {sched.reason('bad')}"]


def test_scheduler_compares_running_trials_by_their_predictions() -> None:
    sched = CollapseScheduler(
        predictor=LinearDropPredictor(0.5, 0.05), metric="loss", mode="min", time_attr="step"
    )
    trials = [_trial(k, CONTROLS) for k in ("a", "b", "c")]
    for t in trials:
        sched.on_trial_add(None, t)
    finals = {"a": 3.0, "b": 3.02, "c": 3.5}
    stops = {}
    # interleaved, as concurrent trials report
    for step in range(T + 1):
        for t in trials:
            if t.trial_id in stops:
                continue
            loss = finals[t.trial_id] + 0.5 * (1 - step / T)
            if sched.on_trial_result(None, t, {"loss": loss, "step": step}) == "STOP":
                stops[t.trial_id] = step
    # the clearly worse trial is stopped at the first checkpoint; the near tie survives
    assert stops == {"c": 10}


def test_scheduler_controls_sources_and_fail_open() -> None:
    def from_config(config: dict) -> dict:
        return dict(total_steps=T, schedule="linear", tau=1.0 / (config["lr"] * 0.1 * T))

    sched = CollapseScheduler(
        predictor=LastValuePredictor(0.1),
        metric="loss",
        mode="min",
        time_attr="step",
        controls=from_config,
    )
    sched.on_trial_add(None, _trial("a", {"lr": 0.01}))
    assert sched.state_dict()["trials"]["a"]["controls"]["tau"] == pytest.approx(10.0)
    # a config the function cannot read: warned once; nothing has finished, nothing is judged
    with pytest.warns(UserWarning, match="no usable controls") as record:
        sched.on_trial_add(None, _trial("b", {}))
        sched.on_trial_add(None, _trial("c", {}))
    assert len([w for w in record if "no usable controls" in str(w.message)]) == 1
    assert _feed(sched, _trial("a", {"lr": 0.01}), 3.0) is None
    assert _feed(sched, _trial("b", {}), 9.0) is None



def test_scheduler_without_controls_judges_on_the_same_step() -> None:
    # no controls anywhere: the same-step evidence decides, read against the study's length
    sched = CollapseScheduler(metric="loss", mode="min", time_attr="step", controls={},
                              threshold=0.1)
    decay = 1.0 + np.exp(-np.arange(T + 1) / 20.0)
    with pytest.warns(UserWarning, match="same-step evidence alone"):
        for i, level in enumerate(np.linspace(1.5, 1.0, 10)):
            trial = _trial(f"t{i}")
            sched.on_trial_add(None, trial)
            assert _feed(sched, trial, level * decay) is None
        far = _trial("far")
        sched.on_trial_add(None, far)
        assert _feed(sched, far, 3.0 * decay) == 10
    record = sched.state_dict()["trials"]["far"]["checkpoints"]["0.1"]
    assert record["decided_by"] == "same_step" and record["against"]["label"] == "t0"
    assert "from the same step alone" in record["explanation"]


def test_scheduler_controls_warmup_fraction_means_a_fraction_of_total_steps() -> None:
    sched = CollapseScheduler(predictor=LastValuePredictor(0.1), metric="loss", mode="min",
                              time_attr="step", controls={**CONTROLS, "warmup_steps": 0.05})
    sched.on_trial_add(None, _trial("a"))
    # the same rule as describe_trial: 0.05 of T = 100 steps is 5 steps
    assert sched.state_dict()["trials"]["a"]["controls"]["warmup_steps"] == 5

def test_scheduler_nan_rule() -> None:
    sched = CollapseScheduler(
        predictor=LastValuePredictor(0.1), metric="loss", mode="min", time_attr="step"
    )
    first = _trial("first", CONTROLS)
    sched.on_trial_add(None, first)
    losses = np.full(T + 1, 2.0)
    losses[7:] = np.nan
    # a trial whose latest value is NaN at a checkpoint diverged: stopped, even alone
    assert _feed(sched, first, losses) == 10
    assert sched.state_dict()["trials"]["first"]["checkpoints"]["0.1"]["reason"] == "diverged"


def test_scheduler_save_and_restore(tmp_path: Path) -> None:
    sched = CollapseScheduler(
        predictor=LastValuePredictor(0.1), metric="loss", mode="min", time_attr="step"
    )
    done = _trial("done", CONTROLS)
    sched.on_trial_add(None, done)
    _feed(sched, done, 3.0)
    path = tmp_path / "state.json"
    sched.save(str(path))
    json.loads(path.read_text())  # plain JSON
    # a fresh scheduler knows nothing; restored, it stops a worse trial against "done"
    fresh = CollapseScheduler(
        predictor=LastValuePredictor(0.1), metric="loss", mode="min", time_attr="step"
    )
    fresh.restore(str(path))
    newcomer = _trial("new", CONTROLS)
    fresh.on_trial_add(None, newcomer)
    assert _feed(fresh, newcomer, 4.0) == 10


def test_scheduler_state_file_keeps_its_status_spelling() -> None:
    from hpo.pruning import TrialState
    from hpo.pruning._ray import _TrialRecord

    # each status is written as the state file spells it ("completed" for COMPLETE) and read
    # back as the same state
    for state, spelled in [(TrialState.RUNNING, "running"), (TrialState.COMPLETE, "completed"),
                           (TrialState.STOPPED, "stopped"), (TrialState.ENDED, "ended")]:
        data = json.loads(json.dumps(_TrialRecord("t", status=state).to_dict()))
        assert data["status"] == spelled
        assert _TrialRecord.from_dict(data).status is state


def test_scheduler_self_calibrating_mode_waits_for_completed_trials() -> None:
    import warnings

    sched = CollapseScheduler(metric="loss", mode="min", time_attr="step", n_calibration_trials=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # before 2 completed trials nothing is stopped, however bad
        for i, final in enumerate((3.0, 6.0)):
            trial = _trial(f"t{i}", CONTROLS)
            sched.on_trial_add(None, trial)
            assert _feed(sched, trial, np.append(synthetic_losses(final, 0.2), final)) is None
        # then a curve fitted on them predicts the bad trial's final value and stops it
        bad = _trial("bad", CONTROLS)
        sched.on_trial_add(None, bad)
        assert _feed(sched, bad, np.append(synthetic_losses(6.0, 0.2), 6.0)) is not None
    latest = sched.latest_record("bad")
    assert latest.estimate.value == pytest.approx(6.0, rel=0.05)
    # the latest record cannot be changed, and is None for a trial the scheduler does not know
    with pytest.raises(dataclasses.FrozenInstanceError):
        latest.stop = False  # type: ignore[misc]
    assert sched.latest_record("bad").stop is True and sched.latest_record("nope") is None
    # the self-calibrated curve is kept with the state (restored with the experiment)
    assert sched.state_dict()["reference"]["trials"] == ["t0", "t1"]


def test_the_driver_finds_the_scheduler_a_tuner_runs(tmp_path: Path) -> None:
    """``CollapseScheduler.of``: the scheduler a Tuner runs; for a restored Tuner, the one
    restored with the experiment, not one built for the new call (no Ray started)."""
    from ray import tune

    def train(config: dict) -> None:
        return None

    sched = CollapseScheduler(predictor=LastValuePredictor())
    tuner = tune.Tuner(train, tune_config=tune.TuneConfig(metric="loss", mode="min",
                                                          scheduler=sched),
                       run_config=tune.RunConfig(storage_path=str(tmp_path), name="exp"))
    assert CollapseScheduler.of(tuner) is sched
    restored = CollapseScheduler.of(tune.Tuner.restore(str(tmp_path / "exp"), trainable=train))
    assert isinstance(restored, CollapseScheduler) and restored is not sched
    # another scheduler, or no Tuner: None
    assert CollapseScheduler.of(tune.Tuner(train)) is None
    assert CollapseScheduler.of(object()) is None


# ---------------------------------------------------------------------------- real Ray Tune


def _make_trainable():
    from ray import tune

    def train(config: dict) -> None:
        marker = config.get("fail_once")
        for step in range(T + 1):
            if marker and config["x"] > 1 and step == 5 and not os.path.exists(marker):
                Path(marker).write_text("failed once")
                raise RuntimeError("simulated crash")
            loss = 3.0 + config["x"] + 0.5 * (1 - step / T)
            tune.report({"loss": loss, "step": step})

    return train


@pytest.mark.slow
def test_tuner_with_optuna_search_stops_dominated_trials(ray_session, tmp_path: Path) -> None:
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    sched = CollapseScheduler(
        predictor=LinearDropPredictor(0.5, 0.05),
        time_attr="step",
        controls=dict(CONTROLS),
    )
    search = OptunaSearch(points_to_evaluate=[{"x": 0.0}, {"x": 0.01}, {"x": 1.0}, {"x": 0.9}])
    tuner = tune.Tuner(
        tune.with_resources(_make_trainable(), {"cpu": 1}),
        param_space={"x": tune.uniform(0.0, 1.0)},
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            scheduler=sched,
            # the searcher learns a stopped trial's predicted final, not its early loss
            search_alg=sched.searcher(search),
            num_samples=4,
            max_concurrent_trials=2,
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="optuna_search", verbose=0),
    )
    results = tuner.fit()
    steps = {round(r.config["x"], 2): r.metrics["step"] for r in results}
    # metric and mode came from TuneConfig through set_search_properties
    assert sched.metric == "loss"
    # the two good trials ran to the end, the two bad ones were stopped at a checkpoint
    assert steps[0.0] == T and steps[0.01] == T
    assert steps[1.0] < T and steps[0.9] < T
    # without the scheduler's callback too, a stopped trial's last result has its sentence
    reasons = {round(r.config["x"], 2): r.metrics.get(REASON_KEY) for r in results}
    assert reasons[1.0].startswith("stopped at t^") and reasons[0.9].startswith("stopped at t^")
    best = results.get_best_result()
    assert best.config["x"] == pytest.approx(0.0)
    # a stopped trial's last result keeps its measured loss and carries its predicted final;
    # the searcher's Optuna study holds the prediction as the trial's value
    told = {round(t.params["x"], 2): t.value for t in search._ot_study.trials}
    for r in results:
        x = round(r.config["x"], 2)
        if x in (1.0, 0.9):
            predicted = r.metrics[PREDICTED_FINAL_KEY]
            assert predicted != pytest.approx(r.metrics["loss"])
            assert told[x] == pytest.approx(predicted)
        else:
            assert PREDICTED_FINAL_KEY not in r.metrics
            assert told[x] == pytest.approx(r.metrics["loss"])


@pytest.mark.slow
def test_tuner_restore_restores_scheduler_state(ray_session, tmp_path: Path) -> None:
    from ray import tune

    marker = str(tmp_path / "crashed")
    sched = CollapseScheduler(
        predictor=LinearDropPredictor(0.5, 0.05),
        time_attr="step",
        controls=dict(CONTROLS),
    )
    trainable = _make_trainable()
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"x": tune.grid_search([0.0, 2.0]), "fail_once": marker},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", scheduler=sched, max_concurrent_trials=1
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="resume", verbose=0),
    )
    results = tuner.fit()
    # x=0 completed; x=2 crashed at step 5, before its first checkpoint
    assert len(results.errors) == 1
    exp_dir = tmp_path / "resume"
    assert (exp_dir / STATE_FILE).exists()
    # Tuner.restore unpickles the scheduler as it was before the run (empty); it reads its
    # state back from the experiment directory, so it still knows x=0's exact final value
    restored = tune.Tuner.restore(str(exp_dir), trainable=trainable, restart_errored=True)
    results = restored.fit()
    assert not results.errors
    steps = {r.config["x"]: r.metrics["step"] for r in results}
    # without the restored state x=2 would run alone (startup) to the end
    assert steps[0.0] == T and steps[2.0] == 10
    state = json.loads((exp_dir / STATE_FILE).read_text())
    stopped = [r for r in state["trials"].values() if r["status"] == "stopped"]
    assert len(stopped) == 1 and stopped[0]["checkpoints"]["0.1"]["reason"] == "unlikely_to_win"


def _ahead_and_behind(
    checkpoints: tuple[float, ...] = (0.1, 0.2, 0.3),
) -> tuple[CollapseScheduler, Callable[[str, int], str]]:
    """A scheduler with trials "ahead" (final 3.5) and "behind" (final 3.0) on the fake curves
    ``final + 0.5 (1 - t^)``, judged at ``checkpoints``; and ``report(trial_id, step)``."""
    sched = CollapseScheduler(
        predictor=LinearDropPredictor(0.5, 0.05), metric="loss", mode="min", time_attr="step",
        checkpoints=checkpoints,
    )
    trials = {k: _trial(k, CONTROLS) for k in ("ahead", "behind")}
    for trial in trials.values():
        sched.on_trial_add(None, trial)
    finals = {"ahead": 3.5, "behind": 3.0}

    def report(trial_id: str, step: int) -> str:
        loss = finals[trial_id] + 0.5 * (1 - step / T)
        return sched.on_trial_result(None, trials[trial_id], {"loss": loss, "step": step})

    return sched, report


def test_scheduler_rejudges_when_a_lagging_trial_catches_up() -> None:
    """A trial ahead is not stopped by a laggard's early prediction, and is stopped by re-judging
    once the laggard's prediction from the same checkpoint beats it."""
    sched, report = _ahead_and_behind()
    ahead, behind = "ahead", "behind"
    for step in range(35):  # "ahead" reaches t^ 0.34, past its last checkpoint
        assert report(ahead, step) == TrialScheduler.CONTINUE
    for step in range(31):  # "behind" reaches 0.3: it is better, and is judged against "ahead"
        assert report(behind, step) == TrialScheduler.CONTINUE
    # the next report of "ahead" in a new re-judging interval stops it
    assert report(ahead, 35) == TrialScheduler.CONTINUE
    assert report(ahead, 36) == TrialScheduler.STOP
    record = sched.state_dict()["trials"]["ahead"]["checkpoints"]["0.3"]
    assert record["stop"] and record["against"]["label"] == "behind"
    # the stop in one sentence, naming the trial it is unlikely to beat
    assert record["explanation"].startswith("stopped at t^ 0.36 (predicted at t^ 0.30): ")
    assert "chance to end more than 0.2% below trial behind" in record["explanation"]


def test_scheduler_a_lagging_trial_never_stops_one_ahead() -> None:
    """A competitor counts once its prediction is from the judged trial's checkpoint or a
    later one: a lagging trial's earlier prediction never stops a trial ahead (a best trial
    that Ray ran ahead would be stopped at t^ 0.5 by a t^ 0.1 prediction)."""
    sched = CollapseScheduler(
        predictor=LastValuePredictor(half=0.1), metric="loss", mode="min", time_attr="step",
        checkpoints=(0.1, 0.5), n_startup_trials=1,
    )
    trials = {k: _trial(k, CONTROLS) for k in ("ahead", "behind")}
    for trial in trials.values():
        sched.on_trial_add(None, trial)

    def run(trial_id: str, steps: range, value: float) -> int | None:
        for step in steps:
            decision = sched.on_trial_result(None, trials[trial_id],
                                             {"loss": value, "step": step})
            if decision == TrialScheduler.STOP:
                return step
        return None

    assert run("behind", range(1, 11), 2.0) is None
    assert run("ahead", range(1, 11), 2.0) is None
    assert run("ahead", range(11, 51), 2.4) is None  # the other is still at t^ 0.1
    record = sched.state_dict()["trials"]["ahead"]["checkpoints"]["0.5"]
    assert record["reason"] == "no_competitor"
    assert run("behind", range(11, 51), 2.0) is None
    assert run("ahead", range(51, 55), 2.4) == 52  # re-judged against its t^ 0.5 prediction
    record = sched.state_dict()["trials"]["ahead"]["checkpoints"]["0.5"]
    assert record["reason"] == "unlikely_to_win" and record["against"]["label"] == "behind"


def test_scheduler_warns_when_time_attr_does_not_count_steps() -> None:
    """A ``time_attr`` that passes ``total_steps`` is warned about once, naming the fix; a
    trial that finishes before it is finished (with its last value), and warned about once
    when it competes."""
    sched = CollapseScheduler(predictor=LastValuePredictor(0.1), metric="loss", mode="min",
                              time_attr="step", controls={**CONTROLS, "total_steps": 10})
    fast = _trial("fast")
    sched.on_trial_add(None, fast)
    with pytest.warns(UserWarning, match="set time_attr= to the result key") as record:
        for step in range(0, 40, 2):
            sched.on_trial_result(None, fast, {"loss": 3.0, "step": step})
    assert sum("beyond total_steps=10" in str(w.message) for w in record) == 1
    short = CollapseScheduler(predictor=LastValuePredictor(0.1), metric="loss", mode="min",
                              time_attr="step", controls=CONTROLS)
    early = _trial("early")
    short.on_trial_add(None, early)
    for step in range(5):
        short.on_trial_result(None, early, {"loss": 3.0, "step": step})
    short.on_trial_complete(None, early, {"loss": 3.0, "step": 5})
    state = short.state_dict()["trials"]["early"]
    assert state["status"] == "completed" and state["final"] == 3.0
    later = _trial("later")
    short.on_trial_add(None, later)
    with pytest.warns(UserWarning, match="finished before its total_steps.*set time_attr="):
        # it competes with its final value 3.0: a clearly worse trial is stopped against it
        assert _feed(short, later, 4.0) == 10


@pytest.mark.parametrize("last", [T - 2, T - 1])
def test_scheduler_never_stops_a_trial_at_its_last_report(last: int) -> None:
    """As in the re-judging test above: "ahead" is stopped at its next report once "behind"
    is judged, except when that report is its last (stopping it would save nothing)."""
    _, report = _ahead_and_behind(checkpoints=(0.9,))
    ahead, behind = "ahead", "behind"
    for step in range(T - 4):  # to step 95, in the re-judging interval before steps 98 and 99
        assert report(ahead, step) == TrialScheduler.CONTINUE
    for step in range(91):
        assert report(behind, step) == TrialScheduler.CONTINUE
    expected = TrialScheduler.STOP if last < T - 1 else TrialScheduler.CONTINUE
    assert report(ahead, last) == expected
