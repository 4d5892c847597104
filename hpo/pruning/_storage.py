"""Optuna's storage where its public API ends: the one module of ``hpo`` that touches Optuna's
private attributes (``Study._storage``, ``Study._study_id`` and the ``_trial_id`` of a
``Trial`` or ``FrozenTrial``).

Optuna's public API reads a study's trials (``Study.get_trials(deepcopy=False, states=...)``),
names them (``trial.number``), writes a live trial's reports and user attrs
(``Trial.report``, ``Trial.set_user_attr``) and ends it (``Study.tell``). It has no public way
to write a trial's system attrs, to write the attrs of a trial held only as a ``FrozenTrial``
(what a pruner is given), to write several attrs in one transaction, to move a trial to another
state outside ``tell``, to read one trial's latest state alone, to turn a stored trial back into
a live ``Trial``, or to read and write a study's system attrs. Those are the functions here.

The contract of every function: it reads or writes the storage when called (nothing is
cached here) with the effect of the storage method it names, and raises what that method
raises (``optuna.exceptions.UpdateFinishedTrialError`` for a write to a finished trial).
``trial`` is a ``Trial`` or a ``FrozenTrial`` of ``study``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

__all__ = [
    "study_key",
    "read_trial",
    "set_trial_system_attr",
    "set_trial_user_attr",
    "set_trial_attrs",
    "set_trial_state",
    "live_trial",
    "study_system_attrs",
    "set_study_system_attr",
]

AnyTrial = optuna.trial.Trial | FrozenTrial


def study_key(study: optuna.Study) -> Hashable:
    """A key equal for every ``Study`` object on the same storage object and study, for caches
    of what that storage holds. Holding the key keeps the storage object alive, so no other
    storage can take its identity meanwhile."""
    return study._storage, study._study_id


def read_trial(study: optuna.Study, trial: AnyTrial) -> FrozenTrial:
    """The trial as stored now (one read; ``BaseStorage.get_trial``)."""
    return study._storage.get_trial(trial._trial_id)


def set_trial_system_attr(study: optuna.Study, trial: AnyTrial, key: str, value: Any) -> None:
    """Store ``value`` (JSON-serializable) under the trial's system attr ``key``
    (``BaseStorage.set_trial_system_attr``)."""
    study._storage.set_trial_system_attr(trial._trial_id, key, value)


def set_trial_user_attr(study: optuna.Study, trial: AnyTrial, key: str, value: Any) -> None:
    """Store ``value`` (JSON-serializable) under the trial's user attr ``key``, for a trial held
    as a ``FrozenTrial`` (``BaseStorage.set_trial_user_attr``; a live ``Trial`` has
    ``Trial.set_user_attr``)."""
    study._storage.set_trial_user_attr(trial._trial_id, key, value)


def set_trial_attrs(study: optuna.Study, trial: AnyTrial, system: Mapping[str, Any],
                    user: Mapping[str, Any]) -> None:
    """Store the trial's system attrs ``system`` and user attrs ``user`` (JSON-serializable):
    the effect of :func:`set_trial_system_attr` and :func:`set_trial_user_attr` for each, in
    one transaction, so one commit, on an ``RDBStorage`` (its
    ``_set_trial_attr_without_commit`` for each attr in one session, as its own
    ``set_trial_*_attr`` do for one); one call per attr on other storages."""
    backend = getattr(study._storage, "_backend", study._storage)
    batch = _rdb_batch(backend)
    if batch is None:
        for key, value in system.items():
            set_trial_system_attr(study, trial, key, value)
        for key, value in user.items():
            set_trial_user_attr(study, trial, key, value)
        return
    session_of, models = batch
    with session_of(backend.scoped_session, True) as session:
        for model, attrs in ((models.TrialSystemAttributeModel, system),
                             (models.TrialUserAttributeModel, user)):
            for key, value in attrs.items():
                backend._set_trial_attr_without_commit(session, model, trial._trial_id, key,
                                                       value)


def _rdb_batch(backend: Any) -> tuple[Any, Any] | None:
    """``(_create_scoped_session, models)`` of Optuna's RDB storage when ``backend`` is one
    that writes attrs without commit; ``None`` otherwise."""
    if not (isinstance(backend, optuna.storages.RDBStorage)
            and hasattr(backend, "_set_trial_attr_without_commit")):
        return None
    try:
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session
    except ImportError:
        return None
    return _create_scoped_session, models


def set_trial_state(study: optuna.Study, trial: AnyTrial, state: TrialState) -> bool:
    """Move the trial to ``state`` (``BaseStorage.set_trial_state_values``, no values): ``True``
    when this call moved it, ``False`` when another worker moved it first (to ``RUNNING``)."""
    return study._storage.set_trial_state_values(trial._trial_id, state)


def live_trial(study: optuna.Study, trial: FrozenTrial) -> optuna.Trial:
    """The live ``Trial`` of a stored trial that this worker runs (one it moved to
    ``RUNNING``), to suggest, report and ``tell`` through."""
    return optuna.Trial(study, trial._trial_id)


def study_system_attrs(study: optuna.Study) -> dict[str, Any]:
    """The study's system attrs as stored now (``BaseStorage.get_study_system_attrs``)."""
    return study._storage.get_study_system_attrs(study._study_id)


def set_study_system_attr(study: optuna.Study, key: str, value: Any) -> None:
    """Store ``value`` (JSON-serializable) under the study's system attr ``key``
    (``BaseStorage.set_study_system_attr``)."""
    study._storage.set_study_system_attr(study._study_id, key, value)
