"""The Optuna storage access (hpo.pruning._storage) and what CollapsePruner reads from the
storage: a pruner with warm caches decides and stores exactly what one without caches or
shortcuts does, and a report costs the same storage reads whether the study holds few finished
trials or many."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from hpo import CollapsePruner, describe_trial
from hpo.pruning import (
    CONTROLS_ATTR,
    RECORD_PREFIX,
    Record,
    TrialView,
    live_trial,
    read_trial,
    record_attrs,
    set_study_system_attr,
    set_trial_attrs,
    set_trial_state,
    set_trial_system_attr,
    set_trial_user_attr,
    study_key,
    study_system_attrs,
)
from tests.hpo._fakes import LinearDropPredictor

optuna.logging.set_verbosity(optuna.logging.WARNING)

T = 100  # total steps of every fake trial


def _curve(final: float, step: int) -> float:
    """The fake curves' shape, which LinearDropPredictor knows: ``final + 0.5 (1 - t^)``."""
    return final + 0.5 * (1.0 - step / T)


def _drive(study: optuna.Study, finals: list[float], sign: float,
           width: int = 2) -> list[tuple[int, int, bool]]:
    """Run trials ``width`` at a time with interleaved reports (so that running trials compete
    with each other), pruning those the study's pruner stops; returns every ``(trial number,
    step, should_prune)``."""
    decisions = []
    for i in range(0, len(finals), width):
        live = []
        for final in finals[i:i + width]:
            trial = study.ask()
            describe_trial(trial, total_steps=T, tau=0.2, tpp=20.0, schedule="linear",
                           warmup_steps=5)
            live.append((trial, final))
        for step in range(T):
            for trial, final in list(live):
                trial.report(sign * _curve(final, step), step)
                stop = trial.should_prune()
                decisions.append((trial.number, step, stop))
                if stop:
                    study.tell(trial, state=TrialState.PRUNED)
                    live.remove((trial, final))
        for trial, final in live:
            study.tell(trial, sign * _curve(final, T - 1))
    return decisions


_STATES = {TrialState.RUNNING: "running", TrialState.COMPLETE: "complete",
           TrialState.PRUNED: "stopped", TrialState.FAIL: "stopped"}


def _trial_view(t: optuna.trial.FrozenTrial, unstored: dict[str, Record] | None = None
                ) -> TrialView:
    """A stored trial as the judge sees it, built from Optuna's public fields alone, with the
    ``unstored`` records over the stored ones."""
    records = {k[len(RECORD_PREFIX):]: Record.from_dict(v) for k, v in t.system_attrs.items()
               if k.startswith(RECORD_PREFIX)}
    records.update(unstored or {})
    state = _STATES.get(t.state, "waiting")
    items = sorted(t.intermediate_values.items())

    def curve() -> tuple[np.ndarray, np.ndarray]:
        return (np.array([s for s, _ in items], dtype=float),
                np.array([v for _, v in items], dtype=float))

    return TrialView(t.number, t.number, state, records, t.value if state == "complete" else None,
                     t.user_attrs.get(CONTROLS_ATTR), curve)


class _Uncached(optuna.pruners.BasePruner):
    """CollapsePruner's decision without its caches and shortcuts, from public parts: a new
    judge for every call, the study read at every call, every other trial handed to it
    (stopped ones included), each view built anew from the storage, and every attr of a new
    record written unless it repeats the stored verdict (decision and reason) at its checkpoint;
    a repeated one is kept in memory, over the stored records of its trial."""

    def __init__(self, make: Callable[[], CollapsePruner]) -> None:
        self._make = make
        self._repeats: dict[int, dict[str, Record]] = {}

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        judge = self._make().judge
        trials = study.get_trials(deepcopy=False)
        stored = next(t for t in trials if t.number == trial.number)
        me = _trial_view(stored, self._repeats.get(trial.number))
        others = [_trial_view(t) for t in trials if t.number != trial.number]
        step = trial.last_step
        if step is None:
            return False
        direction = "minimize" if study.direction == optuna.study.StudyDirection.MINIMIZE \
            else "maximize"
        stop, record = judge.maybe_judge(me, step, trial.intermediate_values[step],
                                         lambda: others, direction)
        if record is not None:
            key = f"{record.checkpoint:g}"
            before = stored.system_attrs.get(RECORD_PREFIX + key)
            if before is not None and (before["stop"], before["reason"]) == (record.stop,
                                                                            record.reason):
                self._repeats.setdefault(trial.number, {})[key] = record
                return stop
            self._repeats.get(trial.number, {}).pop(key, None)
            system, user = record_attrs(record)
            for key, value in system.items():
                set_trial_system_attr(study, trial, key, value)
            for key, value in user.items():
                set_trial_user_attr(study, trial, key, value)
        return stop


@contextlib.contextmanager
def _calls_to(func: Callable[..., Any]) -> Iterator[list[int]]:
    """Count the calls to ``func`` while the block runs, in ``count[0]``: a profile hook
    observes them (nothing is patched)."""
    count, code = [0], func.__code__

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code:
            count[0] += 1

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield count
    finally:
        sys.setprofile(previous)


def _stored(study: optuna.Study) -> list[tuple]:
    return [(t.number, t.state, t.value, t.intermediate_values, t.system_attrs, t.user_attrs)
            for t in study.get_trials()]


@pytest.mark.parametrize(("direction", "kind"),
                         [("minimize", "memory"), ("maximize", "memory"), ("minimize", "sqlite")])
def test_cached_pruner_decides_and_stores_as_an_uncached_one(direction: str, kind: str) -> None:
    sign = 1.0 if direction == "minimize" else -1.0
    rng = np.random.default_rng(0)
    finals = [float(f) for f in 3.0 + 0.4 * rng.random(10)]

    def make() -> CollapsePruner:
        return CollapsePruner(predictor=LinearDropPredictor(half=0.05),
                              checkpoints=(0.1, 0.3, 0.5))

    # SQLite (in memory: the same SQL without the disk's commits) stores JSON, behind Optuna's
    # cache of finished trials; the in-memory storage hands out its own trial objects
    storage = (optuna.storages.RDBStorage("sqlite:///:memory:") if kind == "sqlite"
               else optuna.storages.InMemoryStorage())
    reused = optuna.create_study(storage=storage, study_name="reused", direction=direction,
                                 pruner=make())
    uncached = optuna.create_study(storage=storage, study_name="uncached", direction=direction,
                                   pruner=_Uncached(make))
    decisions = _drive(reused, finals, sign)
    # the sweep exercises stops, keeps and re-judging against trials that finished meanwhile
    assert sum(stop for _, _, stop in decisions) >= 3
    assert any(t.state == TrialState.COMPLETE for t in reused.get_trials()[2:])
    # every call's answer and everything stored is the same as without caches and shortcuts
    assert _drive(uncached, finals, sign) == decisions
    assert _stored(uncached) == _stored(reused)


def test_pruner_cost_per_report_does_not_grow_with_finished_trials() -> None:
    from sqlalchemy import event

    import hpo.pruning._optuna as adapter

    # what one should_prune costs: the SQL statements it runs and the trial views it builds
    statements = [0]

    def counted_statement(*_: object) -> None:
        statements[0] += 1

    storage = optuna.storages.RDBStorage("sqlite:///:memory:")
    event.listen(storage.engine, "before_cursor_execute", counted_statement)
    # threshold 0: nothing is stopped, every trial is judged whenever a judgment is due
    pruner = CollapsePruner(predictor=LinearDropPredictor(half=0.05), threshold=0.0)
    study = optuna.create_study(storage=storage, pruner=pruner)

    def one_trial(final: float) -> list[tuple[int, int]]:
        """(SQL statements, views built) of each should_prune of one trial."""
        trial = study.ask()
        describe_trial(trial, total_steps=T, tau=0.2, tpp=20.0, schedule="linear")
        costs = []
        for step in range(T):
            trial.report(_curve(final, step), step)
            statements[0] = 0
            with _calls_to(adapter._view) as views:
                assert not trial.should_prune()
            costs.append((statements[0], views[0]))
        study.tell(trial, _curve(final, T - 1))
        return costs

    for _ in range(2):
        one_trial(3.0)
    early = one_trial(3.1)
    for _ in range(6):
        one_trial(3.0)
    late = one_trial(3.1)
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 10
    # the same reads, writes and views per report with 9 finished trials as with 2 ...
    assert late == early
    # ... and no SQL at all but at the reports that start a re-judging slot ...
    assert sum(1 for n, _ in early if n) <= T // 2
    # ... nor once the last prediction (t^ 0.5) is stale_after (0.1) behind: nothing is due
    assert not any(n for n, _ in early[61:])


def test_storage_access_reads_and_writes_trials_and_studies() -> None:
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    # a trial's system and user attrs, written through any handle on it, read back fresh
    set_trial_system_attr(study, trial, "k", {"a": 1})
    frozen = read_trial(study, trial)
    set_trial_user_attr(study, frozen, "u", [1, 2])
    frozen = read_trial(study, trial)
    assert frozen.system_attrs["k"] == {"a": 1} and frozen.user_attrs["u"] == [1, 2]
    # the study's system attrs
    set_study_system_attr(study, "s", "v")
    assert study_system_attrs(study)["s"] == "v"
    # one key per study and storage, whatever Study object reaches it
    again = optuna.load_study(study_name=study.study_name, storage=storage)
    assert study_key(again) == study_key(study) != study_key(optuna.create_study())
    # a waiting trial claimed once (WAITING -> RUNNING), then run through its live Trial
    study.enqueue_trial({"x": 0.5})
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))[0]
    assert set_trial_state(study, waiting, TrialState.RUNNING) is True
    assert set_trial_state(study, waiting, TrialState.RUNNING) is False
    claimed = live_trial(study, waiting)
    assert claimed.number == waiting.number
    assert claimed.suggest_float("x", 0.0, 1.0) == 0.5
    study.tell(claimed, 1.0)
    assert study.trials[waiting.number].state == TrialState.COMPLETE


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_set_trial_attrs_writes_them_all_in_one_transaction(kind: str) -> None:
    from sqlalchemy import event

    storage = (optuna.storages.RDBStorage("sqlite:///:memory:") if kind == "sqlite"
               else optuna.storages.InMemoryStorage())
    commits = [0]
    if kind == "sqlite":
        event.listen(storage.engine, "commit", lambda *_: commits.__setitem__(0, commits[0] + 1))
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    set_trial_system_attr(study, trial, "a", 0)  # an attr written again is replaced
    commits[0] = 0
    set_trial_attrs(study, trial, {"a": {"x": 1}, "b": [1, 2]}, {"u": "one", "v": 2.5})
    # on an RDB storage, one commit; every attr as the one-attr functions store it
    assert commits[0] == (1 if kind == "sqlite" else 0)
    frozen = read_trial(study, trial)
    assert frozen.system_attrs == {"a": {"x": 1}, "b": [1, 2]}
    assert frozen.user_attrs == {"u": "one", "v": 2.5}
    # a finished trial is not written, as with Optuna's own writes
    study.tell(trial, 1.0)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        set_trial_attrs(study, trial, {"c": 1}, {})


def test_a_rejudgment_that_repeats_the_stored_verdict_writes_nothing() -> None:
    verdicts: list[tuple[int, Record]] = []
    pruner = CollapsePruner(predictor=LinearDropPredictor(half=0.05), threshold=0.0,
                            on_verdict=lambda number, record: verdicts.append((number, record)))
    study = optuna.create_study(pruner=pruner)
    _drive(study, [3.0, 3.1, 3.2, 3.05], 1.0, width=2)
    checked = 0
    for t in study.get_trials():
        mine = [r for n, r in verdicts if n == t.number]
        stored = {k[len(RECORD_PREFIX):]: v for k, v in t.system_attrs.items()
                  if k.startswith(RECORD_PREFIX)}
        assert stored and len(mine) > len(stored)  # judged again between checkpoints
        for key, record in stored.items():
            at = [r for r in mine if f"{r.checkpoint:g}" == key]
            # the stored verdict is the one that first said what the last one says
            run = len(at) - 1
            while run > 0 and at[run - 1].repeats(at[-1]):
                run -= 1
            assert record == at[run].to_dict()
            checked += len(at) - 1 - run
    assert checked > 0  # some re-judgments repeated a verdict and were not written
