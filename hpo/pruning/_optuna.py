"""``CollapsePruner``: the collapse decision (:mod:`hpo.pruning._judge`) as an Optuna pruner.

Use it in any existing study::

    pruner = CollapsePruner(reference="curve.json")
    study = optuna.create_study(direction="minimize", pruner=pruner)

    def objective(trial):
        lr = trial.suggest_float("lr", 1e-3, 1e-1, log=True)
        describe_trial(trial, total_steps=T, tau=tau, tpp=tpp, schedule="linear", warmup_steps=W)
        for step in range(T):
            loss = train_step()
            trial.report(loss, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return loss

Where things live (so that several workers on one storage agree, and any storage works):

========================================  =================================================
trial user attr ``collapse_controls``      the controls written by :func:`describe_trial`
trial system attr ``collapse:cp:<t>``      the judge's record at checkpoint ``t`` (its
                                           prediction, the latest verdict on it)
trial user attrs ``predicted_final_loss``,  the latest prediction, its interval ``[lower,
``predicted_final_loss_interval``,         upper]`` and the progress t^ it was made at (shown
``predicted_final_loss_t_hat``             by optuna-dashboard; a pruned trial keeps them)
trial user attr ``collapse_reason``         the latest verdict in one sentence
study system attr ``collapse:reference``   self-calibrating mode: the curve fitted on the
                                           study's completed trials, with their numbers
========================================  =================================================

A pruned trial's value stays Optuna's (its last intermediate value); the predicted final value is
in its user attrs. The pruner object holds only caches of what is in the storage: the records of
the trials it judges (read from the storage once per trial, at its first report past a
checkpoint; then kept as it writes them: a trial is judged by the pruner of the process that
runs it) and the views of finished trials (which never change in the storage).

Whether a report is judged is :meth:`Judge.maybe_judge`'s decision, from the trial's own records.
A call reads the study only when a judgment is due (a new checkpoint, or a re-judging slot
within ``stale_after`` of the prediction), once, through ``study.get_trials(deepcopy=False)``
(Optuna's storages then read again only the unfinished and the new trials), and writes only the
attrs whose value changes; the private storage access Optuna's API lacks is
:mod:`hpo.pruning._storage`.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial

from hpo.pruning._judge import (
    Judge,
    TrialState,
    TrialView,
    checkpoint_key,
    latest_record,
)
from hpo.pruning._predict import build_controls, controls_to_json
from hpo.pruning._record import Record
from hpo.pruning._settings import PrunerSettings, with_settings_table
from hpo.pruning._storage import (
    set_study_system_attr,
    set_trial_attrs,
    study_key,
    study_system_attrs,
)

if TYPE_CHECKING:
    from hpo.predictors import Controls

__all__ = [
    "CollapsePruner",
    "describe_trial",
    "CONTROLS_ATTR",
    "PREDICTION_ATTR",
    "INTERVAL_ATTR",
    "T_HAT_ATTR",
    "REASON_ATTR",
    "PREDICTED_VALUE_ATTR",
    "stop_with_prediction",
    "value_is_predicted",
    "measured_trials",
    "RECORD_PREFIX",
    "record_attrs",
    "trial_records",
]

CONTROLS_ATTR = "collapse_controls"
PREDICTION_ATTR = "predicted_final_loss"
INTERVAL_ATTR = "predicted_final_loss_interval"
T_HAT_ATTR = "predicted_final_loss_t_hat"
#: user attr: the latest verdict on the trial in one sentence with its numbers
REASON_ATTR = "collapse_reason"
#: user attr: true on a trial whose value is its predicted final, handed to the sampler by
#: :func:`stop_with_prediction` (not a measured final)
PREDICTED_VALUE_ATTR = "collapse_value_is_predicted"
#: system attr prefix of the judge's record at each checkpoint (``collapse:cp:0.2``)
RECORD_PREFIX = "collapse:cp:"
_REFERENCE_KEY = "collapse:reference"
_MISSING = object()
#: one line per stop, beside Optuna's own "Trial 3 pruned." (through Optuna's handler and
#: verbosity: ``optuna.logging.set_verbosity``)
_log = optuna.logging.get_logger("optuna.hpo.CollapsePruner")


class _PredictedValueLog(logging.Filter):
    """Optuna's "Trial 4 finished with value: 2.2556 ..." for a trial that
    :func:`stop_with_prediction` ended says the value is a prediction: "Trial 4 finished with
    its predicted value (stopped by CollapsePruner, not measured): 2.2556 ...". The trials are
    named by ``(number, value)`` when they end and forgotten when their line is logged."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: set[tuple[int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.pending and isinstance(record.msg, str):
            head, sep, rest = record.msg.partition(" finished with value: ")
            number = head.removeprefix("Trial ")
            value = rest.split(" and parameters", 1)[0]
            key = (int(number), value) if sep and number.isdigit() else None
            if key in self.pending:
                self.pending.discard(key)
                record.msg = (f"{head} finished with its predicted value (stopped by "
                              f"CollapsePruner, not measured): {rest}")
        return True


_predicted_log = _PredictedValueLog()
optuna.logging.get_logger("optuna.study.study").addFilter(_predicted_log)
#: an Optuna trial's state as the judge reads it (every Optuna state)
_STATES = {optuna.trial.TrialState.RUNNING: TrialState.RUNNING,
           optuna.trial.TrialState.COMPLETE: TrialState.COMPLETE,
           optuna.trial.TrialState.PRUNED: TrialState.STOPPED,
           optuna.trial.TrialState.FAIL: TrialState.ENDED,
           optuna.trial.TrialState.WAITING: TrialState.WAITING}


def describe_trial(
    trial: optuna.trial.BaseTrial,
    *,
    total_steps: int,
    tau: float | None = None,
    tpp: float | None = None,
    schedule: str | None = None,
    warmup_steps: float | None = None,
    lr_schedule: Sequence[float] | np.ndarray | None = None,
    controls: Controls | None = None,
    **optional: float | None,
) -> Controls:
    """Store the trial's controls (what shapes its loss curve) in its user attrs.

    ``total_steps`` is the planned number of optimizer steps T: the pruner takes the ``step`` of
    ``trial.report(value, step)`` as the optimizer step, so progress is ``step / T``. ``tau`` =
    1 / (peak_lr * weight_decay * T), the normalized AdamW timescale (peak_lr and weight_decay as
    applied to the hidden weights), and ``tpp`` = tokens / parameters, as in "Scaling with
    Collapse" (Bergsma et al. 2025, arXiv 2509.25087);
    ``schedule`` a curve-format name (``"linear"``, ``"cosine:0.1"``, ``"wsd:linear:0.2"``,
    ``"constant"``) with ``warmup_steps``: a value in (0, 1) is a fraction of T, stored as
    ``round(warmup_steps * T)`` steps (as ``hpo train --warmup`` and the study YAML's ``warmup``
    read it), 0 or a value >= 1 a number of steps, fewer than T (the Ray scheduler's
    ``controls`` read it the same way); or ``lr_schedule``, the LR at every step (T or T + 1
    values, any units; normalized to its peak) for schedules without a name. ``optional``:
    ``n_params``, ``batch_tokens``, ``peak_lr``, ``weight_decay``, ``base_lr`` (the LR the
    sweep sets, where CompleteP or muP scale it into ``peak_lr``). Or pass a ready
    ``controls=predictors.Controls`` instead of the fields.

    Validates up front (``ValueError`` naming the bad value); returns the ``Controls``. Call it
    once per trial, before the first ``trial.report``.
    """
    if controls is None:
        controls = build_controls(
            total_steps=total_steps,
            tau=tau,
            tpp=tpp,
            schedule=schedule,
            warmup_steps=warmup_steps,
            lr_schedule=lr_schedule,
            **optional,
        )
    elif not controls.has_schedule:
        raise ValueError("controls has no LR schedule (give schedule or lr_schedule)")
    trial.set_user_attr(CONTROLS_ATTR, controls_to_json(controls))
    return controls


class CollapsePruner(BasePruner):
    """Prune trials unlikely to end better than the best other trial (the early stopping of
    "Scaling with Collapse", Bergsma et al. 2025, arXiv 2509.25087).

    At each checkpoint t^ (a fraction of the trial's ``total_steps``) the trial's final value
    is predicted from everything it reported; it is pruned when the probability that it ends
    more than ``tolerance`` below its strongest competitor (a completed trial, or a running one
    predicted at the same checkpoint or later) is below ``threshold``. The probability comes
    from the pair law: the error of the predicted log ratio of two trials' finals, measured
    on cross-fitted pairs of the reference curve's proxies from one sweep and re-estimated
    from the study's finished trials. The whole rule, and what fails
    open, is :mod:`hpo.pruning._judge`'s; each verdict is stored on the trial in one sentence
    (user attr ``collapse_reason``).

    Args:
        reference: the universal curve: a path to its JSON file, its dict, or a fitted
            ``hpo.predictors.UniversalCurve``. ``None``: self-calibrating, a curve is fitted on the
            study's own completed trials (with controls) once there are
            ``n_calibration_trials`` of them; nothing is pruned before that.
        predictor: any object with ``predict(steps, losses, controls) -> Prediction`` (a
            ``hpo.predictors.FinalLossPredictor``); overrides ``reference``.
        on_verdict: called as ``on_verdict(trial_number, record)`` with every judgment's
            :class:`hpo.pruning.Record` (its sentence in ``record.explanation``; a re-judgment
            that repeats the
            stored verdict too): a hook for logging or dashboards; it cannot change a decision.
        **settings: the settings of :class:`hpo.PrunerSettings`, by name (below). An unknown
            name raises ``TypeError``, a bad value ``ValueError`` naming it.

    For ``direction="maximize"`` the reported values are taken to be negated losses (e.g.
    ``-loss``): the predictor sees ``-value``.

    The settings (:class:`hpo.PrunerSettings`):
    """

    def __init__(
        self,
        reference: str | Path | Mapping[str, Any] | Any | None = None,
        *,
        predictor: Any | None = None,
        on_verdict: Callable[[Any, Record], None] | None = None,
        **settings: Any,
    ) -> None:
        self._judge = Judge(
            reference, predictor=predictor,
            settings=PrunerSettings.of("CollapsePruner", settings),
            on_verdict=on_verdict, owner="CollapsePruner",
            hints={"controls": "call hpo.describe_trial(trial, ...) before reporting; ",
                   "progress": "the pruner reads progress from the step of "
                               "trial.report(value, step); report the optimizer step, and "
                               "give describe_trial the planned total_steps"},
        )
        # caches of what is in the storage (never the source of truth): the records of the trials
        # this pruner judges, by (study, trial number), and each study's finished trials' views
        self._records: dict[tuple[Hashable, int], Mapping[str, Record]] = {}
        self._finished: dict[Hashable, dict[int, TrialView]] = {}
        # re-judgments that repeated the stored verdict, by (study, trial number): not written,
        # kept here so that the judge knows which re-judging slot the trial has reached
        self._repeats: dict[tuple[Hashable, int], dict[str, Record]] = {}

    @property
    def judge(self) -> Judge:
        """The decision this pruner translates (its parameters and constants)."""
        return self._judge

    def prune(self, study: optuna.study.Study, trial: FrozenTrial) -> bool:
        """Whether to prune ``trial`` now (see the class docstring). Never raises on bad data.

        :meth:`Judge.maybe_judge` decides from the trial's records whether a judgment is due;
        only then is the study read, once, for the other trials. The judge also says whether
        its verdict is new (:attr:`hpo.pruning.Judgment.new`): a new one
        (the first at its checkpoint, or a decision or a reason that differs from the stored
        one) is written to the trial; a re-judgment that repeats the stored verdict (the stored
        record with its re-judging slot advanced) writes nothing."""
        step = trial.last_step
        if step is None:
            return False
        key = (study_key(study), trial.number)
        records = self._records.get(key)
        if records is None:
            records = self._records[key] = _StoredRecords(trial)
        repeats = self._repeats.get(key)
        me = _view(trial, {**records, **repeats} if repeats else records)
        direction = ("maximize" if study.direction == optuna.study.StudyDirection.MAXIMIZE
                     else "minimize")
        judgment = self._judge.maybe_judge(
            me, step, trial.intermediate_values[step],
            lambda: self._others(study, trial.number), direction, _StudyStore(study))
        stop, record = judgment
        if record is None:
            return stop
        cp = checkpoint_key(record.checkpoint)
        if not judgment.new:  # a repeat: only its slot advanced, kept for the judge
            self._repeats.setdefault(key, {})[cp] = record
            return stop
        _write(study, trial, record, records)
        self._records[key] = {**records, cp: record}
        if repeats:
            repeats.pop(cp, None)
        if stop:
            _log.info("Trial %d stopped by CollapsePruner: %s", trial.number,
                      record.explanation)
        return stop

    def _others(self, study: optuna.study.Study, number: int) -> list[TrialView]:
        """The views of the study's trials but trial ``number`` that the judge reads (one read
        of the study): the running and complete ones (stopped, failed and waiting trials
        neither compete nor count, :class:`TrialView`). A finished trial's view is built once
        per study and reused; the records of a finished trial are no longer cached."""
        skey = study_key(study)
        finished = self._finished.setdefault(skey, {})
        views = []
        for t in study.get_trials(deepcopy=False):
            if t.number == number:
                continue
            view = finished.get(t.number)
            if view is None:
                view = _view(t)
                if t.state.is_finished():
                    finished[t.number] = view
                    self._records.pop((skey, t.number), None)
                    self._repeats.pop((skey, t.number), None)
            if view.state in (TrialState.RUNNING, TrialState.COMPLETE):
                views.append(view)
        return views


class _StoredRecords(Mapping[str, Record]):
    """A trial's records as stored, read from its system attrs on first access (a report
    before the first checkpoint reads nothing)."""

    def __init__(self, trial: FrozenTrial) -> None:
        self._trial = trial

    @functools.cached_property
    def _data(self) -> dict[str, Record]:
        return trial_records(self._trial)

    def __getitem__(self, key: str) -> Record:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def trial_records(trial: FrozenTrial) -> dict[str, Record]:
    """The judge's records stored on the Optuna ``trial`` (its system attrs
    ``collapse:cp:<t>``), by :func:`checkpoint_key`, each a :class:`hpo.pruning.Record`: the
    inverse of :func:`record_attrs`; ``hpo.pruning.latest_record(trial_records(trial))`` is its
    latest one."""
    return {k[len(RECORD_PREFIX):]: Record.from_dict(v) for k, v in trial.system_attrs.items()
            if k.startswith(RECORD_PREFIX) and isinstance(v, Mapping)}


def _view(t: FrozenTrial, records: Mapping[str, Record] | None = None) -> TrialView:
    """An Optuna trial as the judge sees it; its ``records`` (default: from
    ``t.system_attrs``)."""
    records = trial_records(t) if records is None else records
    state = trial_state(t)
    values = t.intermediate_values

    def curve() -> tuple[np.ndarray, np.ndarray]:
        items = sorted(values.items())
        return (np.array([s for s, _ in items], dtype=float),
                np.array([v for _, v in items], dtype=float))

    final = t.value if state == TrialState.COMPLETE else None
    return TrialView(t.number, t.number, state, records, final,
                     t.user_attrs.get(CONTROLS_ATTR), curve)


def record_attrs(record: Record) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``(system_attrs, user_attrs)`` that store a judge's record on an Optuna trial: the
    record (:meth:`Record.to_dict`) under ``collapse:cp:<t>``, the verdict's sentence and the
    latest prediction with its interval and t^; the one place a record becomes storage."""
    data = record.to_dict()
    system = {RECORD_PREFIX + checkpoint_key(record.checkpoint): data}
    user: dict[str, Any] = {}
    if record.explanation:
        user[REASON_ATTR] = record.explanation
    est = data["estimate"]
    if est["value"] is not None:
        user.update({PREDICTION_ATTR: est["value"], INTERVAL_ATTR: [est["lower"], est["upper"]],
                     T_HAT_ATTR: est["t_hat"]})
    return system, user


def _write(study: optuna.study.Study, trial: FrozenTrial, record: Record,
           records: Mapping[str, Record]) -> None:
    """Store the judge's record on the trial (:func:`record_attrs`), in one transaction, but
    the attrs whose value is already the same: ``records`` are the trial's stored records, and
    its user attrs are those that :func:`record_attrs` made of the latest of them."""
    system, user = record_attrs(record)
    before = latest_record(records)
    old_system = {RECORD_PREFIX + k: v.to_dict() for k, v in records.items()}
    old_user = {} if before is None else record_attrs(before)[1]
    system = {k: v for k, v in system.items() if old_system.get(k, _MISSING) != v}
    user = {k: v for k, v in user.items() if old_user.get(k, _MISSING) != v}
    if system or user:
        set_trial_attrs(study, trial, system, user)


class _StudyStore:
    """The self-calibrated curve in the study's system attrs."""

    def __init__(self, study: optuna.study.Study) -> None:
        self._study = study

    def get(self) -> Mapping[str, Any] | None:
        return study_system_attrs(self._study).get(_REFERENCE_KEY)

    def set(self, data: Mapping[str, Any]) -> None:
        set_study_system_attr(self._study, _REFERENCE_KEY, dict(data))


CollapsePruner.__doc__ = with_settings_table(CollapsePruner.__doc__)


def trial_state(trial: FrozenTrial) -> TrialState:
    """An Optuna trial's state in the product's one vocabulary (:class:`TrialState`): the one
    place Optuna's states are read. ``PRUNED``, and ``COMPLETE`` with a value that
    :func:`stop_with_prediction` handed the sampler, are ``STOPPED``; ``FAIL`` is ``ENDED``."""
    if value_is_predicted(trial):
        return TrialState.STOPPED  # its value is a prediction, not a final
    return _STATES[trial.state]


def value_is_predicted(trial: FrozenTrial) -> bool:
    """Whether ``trial`` is COMPLETE with its predicted final, not a measured one: a stopped
    trial ended by :func:`stop_with_prediction`."""
    return (trial.state == optuna.trial.TrialState.COMPLETE
            and bool(trial.user_attrs.get(PREDICTED_VALUE_ATTR)))


def measured_trials(study: optuna.study.Study) -> list[FrozenTrial]:
    """The study's complete trials whose value was measured: all but those a stopped trial's
    prediction completed (:func:`value_is_predicted`)."""
    return [t for t in study.get_trials(deepcopy=False,
                                        states=(optuna.trial.TrialState.COMPLETE,))
            if not value_is_predicted(t)]


def stop_with_prediction(trial: optuna.Trial) -> float:
    """End a trial the pruner stopped with its predicted final value, for the sampler to learn
    from: ``return hpo.stop_with_prediction(trial)`` in place of ``raise optuna.TrialPruned()``.

    Optuna's samplers rank a pruned trial below every complete one, by how far it got: TPE
    learns nothing from where a stopped setting would have ended. A trial ended this way is
    COMPLETE with the final :class:`CollapsePruner` predicted for it, so the sampler sees the
    landscape of finals, not of early losses (which the LR decay reorders). It is marked, so
    that nothing mistakes the prediction for a measurement:

    * user attr ``collapse_value_is_predicted`` is true (it shows in optuna-dashboard beside
      the trial's ``collapse_reason`` and ``predicted_final_loss``);
    * the value is never better than the study's best measured final: the prediction, or the
      next float above that best (below it, for ``maximize``) when the prediction is better
      (the rule stopped the trial as unlikely to beat its competitor, so this is rare), so
      ``study.best_trial`` never chooses it; :func:`measured_trials` leaves such trials out;
    * :class:`CollapsePruner` does not count it as a competitor or as a finished trial.

    Raises ``optuna.TrialPruned`` (the trial ends PRUNED, as without this helper) when the
    trial has no usable prediction from the collapse pruner or the study has no measured
    final yet: a prediction is then handed over only where it cannot become the best."""
    from hpo.pruning._storage import read_trial

    study = trial.study
    frozen = read_trial(study, trial)
    rec = latest_record(trial_records(frozen))
    value = math.nan if rec is None else rec.estimate.value
    if not math.isfinite(value):
        raise optuna.TrialPruned(frozen.user_attrs.get(REASON_ATTR) or "no prediction")
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    measured = [t.value for t in measured_trials(study) if t.value is not None]
    if not measured:
        raise optuna.TrialPruned(frozen.user_attrs.get(REASON_ATTR) or "no measured final")
    best = max(measured) if maximize else min(measured)
    value = float(value)
    if maximize:
        value = min(value, math.nextafter(best, -math.inf))
    else:
        value = max(value, math.nextafter(best, math.inf))
    trial.set_user_attr(PREDICTED_VALUE_ATTR, True)
    _predicted_log.pending.add((trial.number, str(value)))
    return value
