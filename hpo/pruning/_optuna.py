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
in its user attrs. The pruner object holds only caches of what is in the storage: the decision
at each checkpoint and re-judging slot already taken, and the views of finished trials (which
never change in the storage).

A call reads the study only when a judgment can be due (the report starts a checkpoint or a
re-judging slot), once, through ``study.get_trials(deepcopy=False)`` (Optuna's storages then read
again only the unfinished and the new trials), and writes only the attrs whose stored value
changes; the private storage access Optuna's API lacks is :mod:`hpo.pruning._storage`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from hpo.pruning._judge import (
    COMPLETE,
    DEFAULT_CHECKPOINTS,
    DEFAULT_MARGIN,
    DEFAULT_N_CALIBRATION_TRIALS,
    DEFAULT_N_STARTUP_TRIALS,
    DEFAULT_THRESHOLD,
    RUNNING,
    STOPPED,
    Judge,
    TrialView,
    checkpoint_key,
    latest,
)
from hpo.pruning._predict import build_controls, controls_to_json
from hpo.pruning._storage import (
    set_study_system_attr,
    set_trial_system_attr,
    set_trial_user_attr,
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
    "RECORD_PREFIX",
    "record_attrs",
    "latest_record",
]

CONTROLS_ATTR = "collapse_controls"
PREDICTION_ATTR = "predicted_final_loss"
INTERVAL_ATTR = "predicted_final_loss_interval"
T_HAT_ATTR = "predicted_final_loss_t_hat"
#: user attr: the latest verdict on the trial in one sentence with its numbers
REASON_ATTR = "collapse_reason"
#: system attr prefix of the judge's record at each checkpoint (``collapse:cp:0.2``)
RECORD_PREFIX = "collapse:cp:"
_REFERENCE_KEY = "collapse:reference"
_MISSING = object()
_STATES = {TrialState.RUNNING: RUNNING, TrialState.COMPLETE: COMPLETE,
           TrialState.PRUNED: STOPPED, TrialState.FAIL: STOPPED}


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
    better than its strongest competitor (a completed trial, or a running one predicted at
    the same checkpoint or later) by ``margin`` is below ``threshold``. The probability comes
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
        checkpoints: fractions of training at which trials are predicted and judged.
        threshold: prune when the chance to beat the strongest competitor is below this; 0
            prunes nothing and records every verdict (a shadow run).
        margin: objective units: a trial is pruned only when unlikely to end better than the
            competitor's value plus ``margin``.
        n_startup_trials: no pruning until this many trials (the judged one included) have a
            prediction or a final value.
        n_calibration_trials: completed trials needed in self-calibrating mode.
        prior: the pair prior (``hpo.predictors.PairPrior``, its JSON path or dict) the
            collapse predictor reads its pair errors from; ``None``: the one shipped with the
            package, learned on every source's targets.
        on_verdict: called as ``on_verdict(trial_number, record)`` with every new verdict
            record (its sentence in ``record["explanation"]``): a hook for logging or
            dashboards; it cannot change a decision.

    For ``direction="maximize"`` the reported values are taken to be negated losses (e.g.
    ``-loss``): the predictor sees ``-value``.
    """

    def __init__(
        self,
        reference: str | Path | Mapping[str, Any] | Any | None = None,
        *,
        predictor: Any | None = None,
        checkpoints: Sequence[float] = DEFAULT_CHECKPOINTS,
        threshold: float = DEFAULT_THRESHOLD,
        margin: float = DEFAULT_MARGIN,
        n_startup_trials: int = DEFAULT_N_STARTUP_TRIALS,
        n_calibration_trials: int = DEFAULT_N_CALIBRATION_TRIALS,
        prior: Any | None = None,
        on_verdict: Callable[[Any, Mapping[str, Any]], None] | None = None,
    ) -> None:
        self._judge = Judge(
            reference, predictor=predictor, checkpoints=checkpoints, threshold=threshold,
            margin=margin, n_startup_trials=n_startup_trials,
            n_calibration_trials=n_calibration_trials, prior=prior,
            on_verdict=on_verdict, owner="CollapsePruner",
            hints={"controls": "call hpo.describe_trial(trial, ...) before reporting; ",
                   "progress": "the pruner reads progress from the step of "
                               "trial.report(value, step); report the optimizer step, and "
                               "give describe_trial the planned total_steps"},
        )
        # caches of what is in the storage (never the source of truth): the decision taken at
        # each (study, trial number, moment), and each study's finished trials' views by number
        self._decided: dict[tuple[Any, ...], bool] = {}
        self._finished: dict[Hashable, dict[int, TrialView]] = {}

    @property
    def judge(self) -> Judge:
        """The decision this pruner translates (its parameters and constants)."""
        return self._judge

    def prune(self, study: optuna.study.Study, trial: FrozenTrial) -> bool:
        """Whether to prune ``trial`` now (see the class docstring). Never raises on bad data.

        The study is read only when the report starts a checkpoint or a re-judging slot
        (:meth:`Judge.moment`) not decided yet; the judged trial's records are then taken from
        that one read, with the other trials."""
        step = trial.last_step
        if step is None:
            return False
        total = self._judge.total_steps(_view(trial, {}))
        if total is None:
            return False
        moment = self._judge.moment(step, total)
        if moment is None:
            return False
        cache_key = (study_key(study), trial.number, moment)
        if cache_key in self._decided:
            return self._decided[cache_key]
        trials = study.get_trials(deepcopy=False)
        stored = _find(trials, trial.number)
        me = _view(trial, None if stored is None else stored.system_attrs)
        direction = ("maximize" if study.direction == optuna.study.StudyDirection.MAXIMIZE
                     else "minimize")
        stop, record = self._judge.on_report(me, self._others(study, trials, trial.number),
                                             direction, _StudyStore(study))
        if record is not None:
            _write(study, trial, record, stored)
        self._decided[cache_key] = stop
        return stop

    def _others(self, study: optuna.study.Study, trials: Sequence[FrozenTrial],
                number: int) -> list[TrialView]:
        """The views of ``trials`` but trial ``number`` that the judge reads: the running and
        complete ones (stopped, failed and waiting trials neither compete nor count,
        :class:`TrialView`). A finished trial's view is built once per study and reused."""
        finished = self._finished.setdefault(study_key(study), {})
        views = []
        for t in trials:
            if t.number == number:
                continue
            view = finished.get(t.number)
            if view is None:
                view = _view(t)
                if t.state.is_finished():
                    finished[t.number] = view
            if view.state in (RUNNING, COMPLETE):
                views.append(view)
        return views


def _find(trials: Sequence[FrozenTrial], number: int) -> FrozenTrial | None:
    """Trial ``number`` of ``trials`` (a study's, sorted by number as Optuna returns them)."""
    if 0 <= number < len(trials) and trials[number].number == number:
        return trials[number]
    return next((t for t in trials if t.number == number), None)


def _view(t: FrozenTrial, system_attrs: Mapping[str, Any] | None = None) -> TrialView:
    """An Optuna trial as the judge sees it; its records from ``system_attrs`` (default
    ``t.system_attrs``)."""
    attrs = t.system_attrs if system_attrs is None else system_attrs
    records = {k[len(RECORD_PREFIX):]: v for k, v in attrs.items()
               if k.startswith(RECORD_PREFIX)}
    state = _STATES.get(t.state, "waiting")
    values = t.intermediate_values

    def curve() -> tuple[np.ndarray, np.ndarray]:
        items = sorted(values.items())
        return (np.array([s for s, _ in items], dtype=float),
                np.array([v for _, v in items], dtype=float))

    final = t.value if state == COMPLETE else None
    return TrialView(t.number, t.number, state, records, final,
                     t.user_attrs.get(CONTROLS_ATTR), curve)


def record_attrs(record: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``(system_attrs, user_attrs)`` that store a judge's record on an Optuna trial: the
    record under ``collapse:cp:<t>``, the verdict's sentence and the latest prediction with its
    interval and t^."""
    system = {RECORD_PREFIX + checkpoint_key(record["checkpoint"]): dict(record)}
    user: dict[str, Any] = {}
    if record.get("explanation"):
        user[REASON_ATTR] = record["explanation"]
    est = record.get("estimate") or {}
    if est.get("value") is not None:
        user.update({PREDICTION_ATTR: est["value"],
                     INTERVAL_ATTR: [est.get("lower"), est.get("upper")],
                     T_HAT_ATTR: est.get("t_hat")})
    return system, user


def latest_record(system_attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The judge's record at the latest checkpoint a trial reached, ``None`` before the first."""
    rec = latest(v for k, v in system_attrs.items()
                 if k.startswith(RECORD_PREFIX) and isinstance(v, dict))
    return None if rec is None else dict(rec)


def _write(study: optuna.study.Study, trial: FrozenTrial, record: Mapping[str, Any],
           stored: FrozenTrial | None) -> None:
    """Store the judge's record on the trial (:func:`record_attrs`), but the attrs whose value
    in ``stored`` (the trial as read for this judgment) is already the same."""
    system, user = record_attrs(record)
    old_system = {} if stored is None else stored.system_attrs
    old_user = {} if stored is None else stored.user_attrs
    for key, value in system.items():
        if old_system.get(key, _MISSING) != value:
            set_trial_system_attr(study, trial, key, value)
    for key, value in user.items():
        if old_user.get(key, _MISSING) != value:
            set_trial_user_attr(study, trial, key, value)


class _StudyStore:
    """The self-calibrated curve in the study's system attrs."""

    def __init__(self, study: optuna.study.Study) -> None:
        self._study = study

    def get(self) -> Mapping[str, Any] | None:
        return study_system_attrs(self._study).get(_REFERENCE_KEY)

    def set(self, data: Mapping[str, Any]) -> None:
        set_study_system_attr(self._study, _REFERENCE_KEY, dict(data))
