"""The judge on its own, without a framework: a trial's state, a trial's latest record, and the
judgment's word on whether its verdict is new (the adapters write only new ones)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hpo.pruning import (
    Competitor,
    Estimate,
    Judge,
    PrunerSettings,
    Record,
    TrialState,
    TrialView,
    latest_record,
)
from hpo.pruning._evidence import SameStep
from hpo.pruning._predict import build_controls, controls_to_json
from hpo.pruning._rule import KEEP, STARTUP, STOP
from tests.hpo._fakes import LinearDropPredictor

T = 100
CONTROLS = {"total_steps": T, "tau": 0.2, "tpp": 20.0, "schedule": "linear", "warmup_steps": 5}


def test_trial_state_is_its_string() -> None:
    # a state compares equal to, prints and serializes as its value, and is read back from it
    assert TrialState.COMPLETE == "complete" and str(TrialState.RUNNING) == "running"
    assert json.dumps([TrialState.STOPPED]) == '["stopped"]'
    assert TrialState("ended") is TrialState.ENDED


def test_latest_record_is_the_latest_checkpoints_record() -> None:
    records = {k: Record.from_dict({"checkpoint": float(k), "stop": k == "0.3"})
               for k in ("0.1", "0.3", "0.2")}
    # the record of the latest checkpoint, whatever the order
    assert latest_record(records) is records["0.3"]
    assert latest_record({}) is None


def test_a_record_round_trips_through_the_dict_a_trial_stores() -> None:
    est = Estimate(3.0, 2.9, 3.1, 0.2, pair_scale=0.01, lr=1e-3, tau=0.2)
    theirs = Estimate(2.8, 2.7, 2.9, 0.2)
    record = Record(est, True, STOP, 0.02, checkpoint=0.2, slot=4, step=40.0, t_hat=0.2,
                    probability=0.01, against=Competitor(7, 7, theirs, None), tolerance=0.002,
                    decided_by="curve", same_step=SameStep(0.1, 0.2, 3, 1, 0),
                    study_scale=1.5, study_distance_slope=0.1, study_trials=4,
                    explanation="stopped")
    stored = json.loads(json.dumps(record.to_dict()))  # as storage keeps it: JSON
    assert Record.from_dict(stored) == record
    # a record without a competitor or evidence stores none, and reads back as it was
    plain = Record(est, False, STARTUP, 0.02, checkpoint=0.2, step=20.0, t_hat=0.2, have=1,
                   needed=2)
    assert "against" not in plain.to_dict() and "same_step" not in plain.to_dict()
    assert Record.from_dict(json.loads(json.dumps(plain.to_dict()))) == plain


def test_maybe_judge_says_whether_a_verdict_is_new() -> None:
    controls = controls_to_json(build_controls(**CONTROLS))
    seen: list[str] = []
    judge = Judge(predictor=LinearDropPredictor(0.5, 0.05),
                  settings=PrunerSettings(threshold=0.0, n_startup_trials=2),
                  on_verdict=lambda label, record: seen.append(record.reason))
    finished = TrialView("done", "done", TrialState.COMPLETE, {}, 3.0, controls,
                         lambda: (np.arange(T, dtype=float), np.full(T, 3.0)))
    losses = 3.1 + 0.5 * (1 - np.arange(T) / T)
    records: dict[str, Record] = {}

    def judged(step: int, others: list[TrialView]):
        me = TrialView("me", "me", TrialState.RUNNING, dict(records), None, controls,
                       lambda: (np.arange(step + 1.0), losses[:step + 1]))
        judgment = judge.maybe_judge(me, step, float(losses[step]), lambda: others)
        if judgment.record is not None:
            records[f"{judgment.record.checkpoint:g}"] = judgment.record
        return judgment

    # the first verdict at a checkpoint is new (alone: too few trials to judge)
    first = judged(10, [])
    assert first.new and first.record.reason == STARTUP and first.record.slot == 5
    # a re-judgment that repeats it is not: the stored record with only its slot advanced
    repeat = judged(12, [])
    assert not repeat.new and repeat.record == first.record.replace(slot=6)
    # a changed reason is new again (a finished competitor arrived)
    changed = judged(14, [finished])
    assert changed.new and changed.record.reason == KEEP and changed.record.step == 14
    # no judgment due: no record, nothing new; it unpacks as (stop, record)
    assert tuple(judged(15, [finished])) == (False, None)
    # on_verdict sees every judgment, the repeat too
    assert seen == [STARTUP, STARTUP, KEEP]


def test_every_verdict_carries_the_same_step_evidence_against_its_competitor() -> None:
    # three finished trials whose order at t^ 0.2 never changed, and a judged trial 30% behind
    # the best of them at the same step
    controls = controls_to_json(build_controls(**CONTROLS))
    steps = np.arange(1, T + 1, dtype=float)
    judge = Judge(predictor=LinearDropPredictor(0.5, 0.05),
                  settings=PrunerSettings(threshold=0.0))

    def view(key: str, level: float, state: TrialState = TrialState.COMPLETE) -> TrialView:
        curve = level * (1.5 - 0.5 * steps / T)
        final = float(curve[-1]) if state == TrialState.COMPLETE else None
        return TrialView(key, key, state, {}, final, controls, lambda: (steps, curve))

    done = [view("a", 1.0), view("b", 1.1), view("c", 1.2)]
    mine = 1.3 * (1.5 - 0.5 * steps[:20] / T)
    me = TrialView("me", "me", TrialState.RUNNING, {}, None, controls, lambda: (steps[:20], mine))
    record = judge.maybe_judge(me, 20, float(mine[-1]), lambda: done).record
    same = record.same_step
    # the gap to the strongest competitor at the same step (trial a), the study's three
    # finished pairs, none of which had a gap as large, and a chance from the crossing law
    assert record.against.label == "a"
    assert same.gap == pytest.approx(math.log(1.3), abs=0.01)
    assert (same.pairs, same.such, same.closed) == (3, 0, 0)
    assert 0.0 < same.probability < 0.5
    # the sentence says it beside the curve's verdict
    assert "at the same step it is 30.0% behind trial a" in record.explanation
    assert "no finished pair in this study had a gap as large" in record.explanation


def test_a_predictor_that_returns_no_prediction_fails_open_and_says_what_it_must_return() -> None:
    class Tuple:
        def predict(self, steps: np.ndarray, losses: np.ndarray, controls: object) -> object:
            return (3.0, 2.9, 3.1)

    controls = controls_to_json(build_controls(**CONTROLS))
    judge = Judge(predictor=Tuple(), settings=PrunerSettings(n_startup_trials=1))
    me = TrialView("me", "me", TrialState.RUNNING, {}, None, controls,
                   lambda: (np.arange(21.0), np.full(21, 3.0)))
    with pytest.warns(UserWarning, match="must return a hpo.predictors.Prediction, but got tuple"):
        stop, record = judge.maybe_judge(me, 20, 3.0, lambda: [])
    assert not stop and record.reason == "no_estimate"
    assert record.estimate.status == "fit_failed"
