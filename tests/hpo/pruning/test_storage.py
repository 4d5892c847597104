"""The Optuna storage access (hpo.pruning._storage) and what CollapsePruner reads from the
storage: a pruner with warm caches decides and stores exactly what one without caches or
shortcuts does, and a report costs the same storage reads whether the study holds few finished
trials or many."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from hpo import CollapsePruner, describe_trial
from hpo.pruning import (
    live_trial,
    read_trial,
    set_study_system_attr,
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


class _Uncached(optuna.pruners.BasePruner):
    """CollapsePruner without its caches and shortcuts: a new one for every call, handing the
    judge every other trial (stopped ones included), each view built anew from the storage."""

    def __init__(self, make: Callable[[], CollapsePruner]) -> None:
        self._make = make

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        import hpo.pruning._optuna as adapter

        pruner = self._make()
        pruner._others = lambda study, trials, number: [  # type: ignore[method-assign]
            adapter._view(t) for t in trials if t.number != number]
        return pruner.prune(study, trial)


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


def test_pruner_cost_per_report_does_not_grow_with_finished_trials(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import event

    import hpo.pruning._optuna as adapter

    # what one should_prune costs: the SQL statements it runs and the trial views it builds
    statements, views = [0], [0]
    build = adapter._view

    def counted_view(*args: object, **kwargs: object) -> object:
        views[0] += 1
        return build(*args, **kwargs)

    def counted_statement(*_: object) -> None:
        statements[0] += 1

    monkeypatch.setattr(adapter, "_view", counted_view)
    storage = optuna.storages.RDBStorage("sqlite:///:memory:")
    event.listen(storage.engine, "before_cursor_execute", counted_statement)
    # threshold 0: nothing is stopped, every trial is judged at every re-judging slot
    pruner = CollapsePruner(predictor=LinearDropPredictor(half=0.05), threshold=0.0)
    study = optuna.create_study(storage=storage, pruner=pruner)

    def one_trial(final: float) -> list[tuple[int, int]]:
        """(SQL statements, views built) of each should_prune of one trial."""
        trial = study.ask()
        describe_trial(trial, total_steps=T, tau=0.2, tpp=20.0, schedule="linear")
        costs = []
        for step in range(T):
            trial.report(_curve(final, step), step)
            statements[0] = views[0] = 0
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
    # ... and no SQL at all but at the reports that start a re-judging slot
    assert sum(1 for n, _ in early if n) <= T // 2


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
