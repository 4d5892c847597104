"""``CollapsePruner``: an Optuna pruner that predicts each trial's final value.

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
trial system attr ``collapse:cp:<t>``      estimate and decision at checkpoint ``t`` (made
                                           once, by the trial's own worker; the latest one is
                                           what the other trials compare with)
trial user attrs ``predicted_final_loss``,  the latest prediction, its interval ``[lower,
``predicted_final_loss_interval``,         upper]`` and the progress t^ it was made at (shown
``predicted_final_loss_t_hat``             by optuna-dashboard; a pruned trial keeps them)
study system attr ``collapse:reference``   self-calibrating mode: the curve fitted on the
                                           study's completed trials, with their numbers
========================================  =================================================

A pruned trial's value stays Optuna's (its last intermediate value); the predicted final value is
in its user attrs. The pruner object holds only caches of what is in the storage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from hpo._decision import (
    DEFAULT_CHECKPOINTS,
    DIVERGED,
    FIT_FAILED,
    MISSING_CONTROLS,
    OK,
    DecisionConfig,
    Estimate,
    TrialSnapshot,
    Verdict,
    at_last_report,
    estimate_at_checkpoint,
    explain,
    judge_estimate,
    latest_checkpoint,
)
from hpo._predict import (
    WarnOnce,
    build_controls,
    controls_from_json,
    controls_to_json,
    fit_reference,
    load_reference,
    make_predictor,
    setup_decision,
)

if TYPE_CHECKING:
    from predictors import Controls

__all__ = [
    "CollapsePruner",
    "describe_trial",
    "CONTROLS_ATTR",
    "PREDICTION_ATTR",
    "INTERVAL_ATTR",
    "T_HAT_ATTR",
]

CONTROLS_ATTR = "collapse_controls"
PREDICTION_ATTR = "predicted_final_loss"
INTERVAL_ATTR = "predicted_final_loss_interval"
T_HAT_ATTR = "predicted_final_loss_t_hat"
#: user attr: the latest verdict on the trial in one sentence with its numbers
REASON_ATTR = "collapse_reason"
_CP_PREFIX = "collapse:cp:"
_REFERENCE_KEY = "collapse:reference"


def _checkpoint_key(cp: float) -> str:
    return f"{_CP_PREFIX}{cp:g}"


def _latest_record(system_attrs: dict[str, Any]) -> dict[str, Any] | None:
    """The record of the trial's latest judged checkpoint (``None`` before the first)."""
    records = [v for k, v in system_attrs.items() if k.startswith(_CP_PREFIX)]
    return max(records, key=lambda r: r.get("checkpoint", 0.0)) if records else None


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
    read it), 0 or a value >= 1 a number of steps (``hpo._predict.warmup_steps_for``, which the
    Ray scheduler's ``controls`` use too); or ``lr_schedule``, the LR at every step (T or T + 1
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
    """Prune trials whose predicted final value is dominated (the early stopping of "Scaling
    with Collapse", Bergsma et al. 2025, arXiv 2509.25087).

    At each checkpoint t^ (default 0.1, 0.2, 0.3, 0.4, 0.5 of the trial's ``total_steps``), the
    trial's final value is predicted once from everything it reported so far, with an interval;
    it is pruned when the optimistic end of that interval is worse than the pessimistic end of
    the best other trial (completed trials count with their exact value) by more than
    ``margin``.
    The rule, the startup and the NaN/fail-open behaviour are those of :mod:`hpo._decision`.
    Between checkpoints the trial is judged again every ``rejudge_every`` of progress from its
    latest prediction (no new one); otherwise ``prune`` returns the last decision without
    reading the storage. A trial is not pruned at its last report (``step >= total_steps -
    1``) nor while its latest reported value is as good as the best other trial's expected end.

    Args:
        reference: the universal curve: a path to its JSON file, its dict, or a fitted
            ``predictors.UniversalCurve``. ``None``: self-calibrating mode, a curve is fitted on
            the study's own completed trials (with controls) once there are
            ``n_calibration_trials`` of them; nothing is pruned before that.
        predictor: any object with ``predict(steps, losses, controls) -> Prediction`` (a
            ``predictors.FinalLossPredictor``); overrides ``reference``.
        checkpoints: fractions of training at which trials are judged (a new prediction at
            each). The default reaches t^ 0.5: on every ``hpo bench`` file and mode, judging
            again at 0.4 and 0.5 stopped more losers, never a best trial.
        margin: how much worse (objective units) before a trial is pruned.
        n_startup_trials: no pruning until this many trials (the judged one included) have a
            prediction or a final value.
        n_min_trials: never prune below this many alive (running or completed) trials.
        level: the prediction interval's coverage level, passed to the predictor.
        min_points: fewest finite reported points a prediction needs.
        n_calibration_trials: completed trials needed in self-calibrating mode.
        stop_diverged: prune a trial whose latest reported value is NaN or infinite.
        debias: rescale each prediction by the median ratio final / predicted of the study's
            completed trials at the same checkpoint (their predictions are stored), so that a
            bias the predictor has on the whole sweep does not count against predictions
            compared with exact values. Off by default: where the completed trials' errors
            are not shared, it moves the other predictions by their noise (see
            :mod:`hpo._decision`).
        extrapolation_inflation: widen the interval of a trial whose ``tau`` is outside the
            reference curve's fitted range by this factor (>= 1; 1 turns it off).
        paired_tolerance: the paired rule of :mod:`hpo._decision`: a map checkpoint -> delta;
            a trial is also pruned when its raw prediction exceeds another alive trial's
            (a completed trial's prediction from the same checkpoint) by a factor
            ``exp(delta)``. ``"auto"`` (default): calibrated from the ``reference`` curve's
            leave-one-out errors on its proxies (:func:`predictors.paired_tolerance`, proxies
            of one size and horizon paired); off, with a warning, when the curve holds no
            per-run calibration, and off with a ``predictor`` or in self-calibrating mode.
            ``None``: off.
        paired_pairs: a tighter delta for pairs of settings the proxies ran: entries
            ``(checkpoint, proxy run a, proxy run b, |error a - error b|[, n_params])`` for
            proxies of one size; two trials whose counterparts (the proxies that ran their
            setting at another size, :func:`predictors.counterparts`) form at least two such
            pairs are compared with the largest of those errors when it is below
            ``paired_tolerance``'s delta; with sizes given, the pairs of the largest size
            count, with those of the next sizes down added until ``paired_min_pairs`` count.
            ``"auto"`` (default): from the ``reference`` curve's calibration
            (:func:`predictors.paired_errors`) when the paired rule is on; ``None``: off.
        paired_min_pairs: how many proxy pairs (at least 2) the per-pair delta is the largest
            of, gathered from the largest size down; the default 4 makes the largest of them
            cover a new pair's error with probability 4/5, the interval level's 0.8.
        paired_finished_inflation: self-check of the paired rule on the completed trials:
            when this times the error of two completed trials' predicted log-ratio exceeds
            the delta of that pair, every delta is scaled up by the largest such ratio (0
            turns it off).
        rejudge_every: after its first checkpoint, a trial that was not pruned is judged
            again each time its progress advances by this fraction of ``total_steps`` (its
            latest prediction, no new one, against the other trials' current state: a
            competitor that caught up or completed); 0 judges only at checkpoints. Each
            re-judging reads the study's trials from the storage, as ``MedianPruner`` does at
            every report.

    For ``direction="maximize"`` the reported values are taken to be negated losses (e.g.
    ``-loss``): the predictor sees ``-value``.
    """

    def __init__(
        self,
        reference: str | Path | dict[str, Any] | Any | None = None,
        *,
        predictor: Any | None = None,
        checkpoints: Sequence[float] = DEFAULT_CHECKPOINTS,
        margin: float = 0.0,
        n_startup_trials: int = 2,
        n_min_trials: int = 1,
        level: float = 0.8,
        min_points: int = 3,
        n_calibration_trials: int = 3,
        stop_diverged: bool = True,
        debias: bool = False,
        extrapolation_inflation: float = 2.0,
        paired_tolerance: Mapping[float, float] | str | None = "auto",
        paired_pairs: Sequence[tuple[Any, ...]] | str | None = "auto",
        paired_min_pairs: int = 4,
        paired_finished_inflation: float = 1.0,
        rejudge_every: float = 0.02,
    ) -> None:
        self._config, self._predictor = setup_decision(
            reference=reference, predictor=predictor, level=level,
            n_calibration_trials=n_calibration_trials, checkpoints=checkpoints, margin=margin,
            paired_tolerance=paired_tolerance, paired_pairs=paired_pairs,
            n_startup_trials=n_startup_trials,
            n_min_trials=n_min_trials, min_points=min_points, stop_diverged=stop_diverged,
            debias=debias, extrapolation_inflation=extrapolation_inflation,
            paired_finished_inflation=paired_finished_inflation, rejudge_every=rejudge_every,
            paired_min_pairs=paired_min_pairs,
        )
        self._level = float(level)
        self._n_calibration = int(n_calibration_trials)
        self._self_calibrating = predictor is None and reference is None
        self._warn = WarnOnce("CollapsePruner")
        # caches of what is in the storage (never the source of truth)
        self._decided: dict[tuple[int, int, int, float], bool] = {}
        self._calibrated: dict[tuple[int, int, tuple[int, ...]], Any] = {}

    @property
    def config(self) -> DecisionConfig:
        """The decision parameters (direction set per study at prune time)."""
        return self._config

    # ------------------------------------------------------------------ optuna entry point
    def prune(self, study: optuna.study.Study, trial: FrozenTrial) -> bool:
        """Whether to prune ``trial`` now (see the class docstring). Never raises on bad data."""
        step = trial.last_step
        if step is None:
            return False
        stored = trial.user_attrs.get(CONTROLS_ATTR)
        if stored is None:
            self._warn(
                MISSING_CONTROLS,
                f"trial {trial.number} has no controls; call hpo.describe_trial(trial, ...) "
                "before reporting. Trials without controls are never pruned.",
            )
            return False
        try:
            total = int(stored["total_steps"])
        except (KeyError, TypeError, ValueError):
            self._warn(MISSING_CONTROLS, f"trial {trial.number}: malformed {CONTROLS_ATTR}")
            return False
        cp = latest_checkpoint(step / total, self._config.checkpoints)
        if cp is None:
            return False
        slot = self._config.rejudge_slot(step / total)
        cache_key = (id(study._storage), study._study_id, trial._trial_id, cp, slot)
        if cache_key in self._decided:
            return self._decided[cache_key]
        record = trial.system_attrs.get(_checkpoint_key(cp))
        if record is None:
            record = self._judge(study, trial, cp, step, stored)
        elif (
            not record.get("stop", False)
            and trial.state == TrialState.RUNNING
            and slot > int(record.get("slot", slot))
        ):
            record = self._rejudge(study, trial, cp, step, record)
        stop = bool(record.get("stop", False))
        self._decided[cache_key] = stop
        return stop

    # ------------------------------------------------------------------ internals
    def _study_config(self, study: optuna.study.Study) -> DecisionConfig:
        maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
        return dataclasses.replace(
            self._config, direction="maximize" if maximize else "minimize"
        )

    @staticmethod
    def _others(study: optuna.study.Study, trial: FrozenTrial) -> list[FrozenTrial]:
        return [t for t in study.get_trials(deepcopy=False) if t._trial_id != trial._trial_id]

    def _verdict(
        self,
        trial: FrozenTrial,
        others: list[FrozenTrial],
        cp: float,
        raw: Estimate,
        config: DecisionConfig,
        diverged: bool = False,
    ) -> tuple[Verdict, Estimate, int | None]:
        """The verdict on ``trial`` from its raw estimate at ``cp``, the estimate as judged,
        and the number of the trial that set the bar (``None`` when none did)."""
        snapshots = [s for s in (self._snapshot(t, cp) for t in others) if s is not None]
        latest, last_report = self._latest(trial)
        verdict, est = judge_estimate(
            raw, trial._trial_id, cp, snapshots, self._debias_pairs(others, cp), config,
            diverged, latest=latest, last_report=last_report,
        )
        best_number = next((t.number for t in others if t._trial_id == verdict.best), None)
        return verdict, est, best_number

    @staticmethod
    def _latest(trial: FrozenTrial) -> tuple[float | None, bool]:
        """The trial's latest reported value (``None`` if none) and whether it was reported at
        the last step (``step >= total_steps - 1``)."""
        if not trial.intermediate_values:
            return None, False
        step = max(trial.intermediate_values)
        value = float(trial.intermediate_values[step])
        try:
            total = float(trial.user_attrs[CONTROLS_ATTR]["total_steps"])
        except (KeyError, TypeError, ValueError):
            return value, False
        return value, at_last_report(step, total)

    def _judge(
        self,
        study: optuna.study.Study,
        trial: FrozenTrial,
        cp: float,
        step: int,
        stored: dict[str, Any],
    ) -> dict[str, Any]:
        config = self._study_config(study)
        others = self._others(study, trial)
        items = sorted(trial.intermediate_values.items())
        steps = np.array([s for s, _ in items], dtype=float)
        values = np.array([v for _, v in items], dtype=float)
        t_hat = float(step) / float(stored["total_steps"])
        try:
            controls = controls_from_json(stored)
        except (ValueError, TypeError) as exc:
            self._warn(MISSING_CONTROLS, f"trial {trial.number}: unreadable controls ({exc})")
            controls = None
        predictor = self._predictor
        if predictor is None and controls is not None:
            predictor = self._calibrated_predictor(study, others, config.sign)
        if predictor is None and controls is not None and self._self_calibrating:
            raw = Estimate.failed("uncalibrated", t_hat)
        else:
            raw = estimate_at_checkpoint(steps, values, controls, predictor, config, t_hat)
        if raw.status not in (OK, "uncalibrated", DIVERGED):
            detail = f" ({raw.detail})" if raw.detail else ""
            self._warn(
                raw.status,
                f"trial {trial.number} at t^={t_hat:.3g}: no prediction, {raw.status}{detail}; "
                "not pruned (fail open)",
            )
        verdict, est, best_number = self._verdict(trial, others, cp, raw, config)
        record = {
            "estimate": est.to_dict(),
            "raw": raw.to_dict(),
            "step": int(step),
            "checkpoint": cp,
            "slot": config.rejudge_slot(t_hat),
            "stop": bool(verdict.stop),
            "reason": verdict.reason,
            "threshold": verdict.threshold,
            "best_trial": best_number,
        }
        record["explanation"] = explain(record)
        storage = study._storage
        storage.set_trial_system_attr(trial._trial_id, _checkpoint_key(cp), record)
        storage.set_trial_user_attr(trial._trial_id, REASON_ATTR, record["explanation"])
        if est.usable:
            storage.set_trial_user_attr(trial._trial_id, PREDICTION_ATTR, est.value)
            storage.set_trial_user_attr(trial._trial_id, INTERVAL_ATTR, [est.lower, est.upper])
            storage.set_trial_user_attr(trial._trial_id, T_HAT_ATTR, est.t_hat)
        return record

    def _rejudge(
        self,
        study: optuna.study.Study,
        trial: FrozenTrial,
        cp: float,
        step: int,
        record: dict[str, Any],
    ) -> dict[str, Any]:
        """Judge the trial again from its stored estimate at ``cp`` against the other trials'
        current state (no new prediction); a stop is written back to the trial's record."""
        others = self._others(study, trial)
        raw = Estimate.from_dict(record.get("raw", {}))
        latest = trial.intermediate_values.get(step)
        diverged = latest is not None and not np.isfinite(latest)
        verdict, est, best_number = self._verdict(
            trial, others, cp, raw, self._study_config(study), diverged
        )
        if not verdict.stop:
            return record
        record = {
            **record,
            "estimate": est.to_dict(),
            "stop": True,
            "reason": f"{verdict.reason} (re-judged at step {int(step)})",
            "threshold": verdict.threshold,
            "best_trial": best_number,
            "rejudged_step": int(step),
        }
        record["explanation"] = explain(record)
        study._storage.set_trial_system_attr(trial._trial_id, _checkpoint_key(cp), record)
        study._storage.set_trial_user_attr(trial._trial_id, REASON_ATTR, record["explanation"])
        if est.usable:
            study._storage.set_trial_user_attr(trial._trial_id, PREDICTION_ATTR, est.value)
        return record

    @staticmethod
    def _debias_pairs(others: list[FrozenTrial], cp: float) -> list[tuple[float, float]]:
        """(uncorrected prediction at ``cp``, final value) of the completed trials."""
        pairs = []
        key = _checkpoint_key(cp)
        for t in others:
            if t.state != TrialState.COMPLETE or t.value is None or key not in t.system_attrs:
                continue
            raw = Estimate.from_dict(t.system_attrs[key].get("raw", {}))
            if raw.usable and not raw.out_of_range:
                pairs.append((raw.value, float(t.value)))
        return pairs

    @staticmethod
    def _snapshot(t: FrozenTrial, cp: float) -> TrialSnapshot | None:
        """The trial as a competitor of one judged at checkpoint ``cp`` (its paired
        prediction: its raw one from ``cp``; a running trial that has not reached ``cp``, its
        latest, which the paired rule leaves out)."""
        if t.state == TrialState.COMPLETE:
            value = t.value if t.value is not None else float("nan")
            record = t.system_attrs.get(_checkpoint_key(cp))
            raw = Estimate.from_dict(record.get("raw", {})) if record else None
            usable = raw is not None and raw.pairable
            return TrialSnapshot(
                t._trial_id, running=False, estimate=Estimate.exact_value(value),
                paired=raw.value if usable else None, paired_cp=cp if usable else None,
                paired_extrapolated=bool(usable and raw.out_of_range),
                paired_counterparts=raw.counterparts if usable else (),
            )
        if t.state == TrialState.RUNNING:
            record = _latest_record(t.system_attrs)
            if record is None:
                return TrialSnapshot(t._trial_id, running=True)
            est = Estimate.from_dict(record.get("estimate", {}))
            # the paired prediction from the judged checkpoint when the trial has reached it
            # (the latest one, from an earlier checkpoint, is left out by the paired rule)
            at_cp = t.system_attrs.get(_checkpoint_key(cp), record)
            raw = Estimate.from_dict(at_cp.get("raw", {}))
            return TrialSnapshot(
                t._trial_id, running=True, estimate=est, alive=not record.get("stop", False),
                paired=raw.value if raw.pairable else None,
                paired_cp=float(at_cp.get("checkpoint", cp)) if raw.pairable else None,
                paired_extrapolated=bool(raw.out_of_range),
                paired_counterparts=raw.counterparts if raw.pairable else (),
            )
        if t.state in (TrialState.PRUNED, TrialState.FAIL):
            return TrialSnapshot(t._trial_id, running=False, alive=False)
        return None  # WAITING

    def _calibrated_predictor(
        self, study: optuna.study.Study, others: list[FrozenTrial], sign: float
    ) -> Any | None:
        """Self-calibrating mode: a predictor from a curve fitted on the completed trials."""
        done = [
            t
            for t in others
            if t.state == TrialState.COMPLETE
            and CONTROLS_ATTR in t.user_attrs
            and len(t.intermediate_values) >= self._config.min_points
        ]
        if len(done) < self._n_calibration:
            return None
        numbers = tuple(sorted(t.number for t in done))
        key = (id(study._storage), study._study_id, numbers)
        if key in self._calibrated:
            return self._calibrated[key]
        predictor = None
        try:
            stored = study._storage.get_study_system_attrs(study._study_id).get(_REFERENCE_KEY)
            if stored is not None and tuple(stored.get("trials", ())) == numbers:
                curve = load_reference(stored["curve"])
            else:
                runs = []
                for t in sorted(done, key=lambda t: t.number):
                    items = sorted(t.intermediate_values.items())
                    runs.append(
                        (
                            f"trial-{t.number}",
                            np.array([s for s, _ in items], dtype=float),
                            np.array([v for _, v in items], dtype=float),
                            controls_from_json(t.user_attrs[CONTROLS_ATTR]),
                        )
                    )
                curve = fit_reference(runs, sign)
                study._storage.set_study_system_attr(
                    study._study_id,
                    _REFERENCE_KEY,
                    {"trials": list(numbers), "curve": curve.to_dict()},
                )
            predictor = make_predictor(curve, self._level)
        except Exception as exc:  # fail open: no curve, no pruning
            self._warn(
                FIT_FAILED,
                f"self-calibration on {len(done)} completed trials failed "
                f"({type(exc).__name__}: {exc}); not pruning until a fit succeeds",
            )
        self._calibrated[key] = predictor
        return predictor
