"""The judge on its own, without a framework: a trial's state, a trial's latest record, and the
judgment's word on whether its verdict is new (the adapters write only new ones)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hpo.pruning import Judge, PrunerSettings, TrialState, TrialView, latest_record
from hpo.pruning._predict import build_controls, controls_to_json
from hpo.pruning._rule import KEEP, STARTUP
from tests.hpo._fakes import LinearDropPredictor

T = 100
CONTROLS = {"total_steps": T, "tau": 0.2, "tpp": 20.0, "schedule": "linear", "warmup_steps": 5}


def test_trial_state_is_its_string() -> None:
    # a state compares equal to, prints and serializes as its value, and is read back from it
    assert TrialState.COMPLETE == "complete" and str(TrialState.RUNNING) == "running"
    assert json.dumps([TrialState.STOPPED]) == '["stopped"]'
    assert TrialState("ended") is TrialState.ENDED


def test_latest_record_is_a_copy_of_the_latest_checkpoints_record() -> None:
    records = {"0.1": {"checkpoint": 0.1, "stop": False}, "0.3": {"checkpoint": 0.3, "stop": True},
               "0.2": {"checkpoint": 0.2, "stop": False}}
    latest = latest_record(records)
    # the record of the latest checkpoint, whatever the order, as a copy
    assert latest == records["0.3"] and latest is not records["0.3"]
    assert latest_record({}) is None


def test_maybe_judge_says_whether_a_verdict_is_new() -> None:
    controls = controls_to_json(build_controls(**CONTROLS))
    seen: list[str] = []
    judge = Judge(predictor=LinearDropPredictor(0.5, 0.05),
                  settings=PrunerSettings(threshold=0.0, n_startup_trials=2),
                  on_verdict=lambda label, record: seen.append(record["reason"]))
    finished = TrialView("done", "done", TrialState.COMPLETE, {}, 3.0, controls,
                         lambda: (np.arange(T, dtype=float), np.full(T, 3.0)))
    losses = 3.1 + 0.5 * (1 - np.arange(T) / T)
    records: dict[str, dict] = {}

    def judged(step: int, others: list[TrialView]):
        me = TrialView("me", "me", TrialState.RUNNING, dict(records), None, controls,
                       lambda: (np.arange(step + 1.0), losses[:step + 1]))
        judgment = judge.maybe_judge(me, step, float(losses[step]), lambda: others)
        if judgment.record is not None:
            records[f"{judgment.record['checkpoint']:g}"] = judgment.record
        return judgment

    # the first verdict at a checkpoint is new (alone: too few trials to judge)
    first = judged(10, [])
    assert first.new and first.record["reason"] == STARTUP and first.record["slot"] == 5
    # a re-judgment that repeats it is not: the stored record with only its slot advanced
    repeat = judged(12, [])
    assert not repeat.new and repeat.record == {**first.record, "slot": 6}
    # a changed reason is new again (a finished competitor arrived)
    changed = judged(14, [finished])
    assert changed.new and changed.record["reason"] == KEEP and changed.record["step"] == 14
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
    same = record["same_step"]
    # the gap to the strongest competitor at the same step (trial a), the study's three
    # finished pairs, none of which had a gap as large, and a chance from the crossing law
    assert record["against"]["label"] == "a"
    assert same["gap"] == pytest.approx(math.log(1.3), abs=0.01)
    assert (same["pairs"], same["such"], same["closed"]) == (3, 0, 0)
    assert 0.0 < same["probability"] < 0.5
    # the sentence says it beside the curve's verdict
    assert "at the same step it is 30.0% behind trial a" in record["explanation"]
    assert "no finished pair in this study had a gap as large" in record["explanation"]
