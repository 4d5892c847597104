"""``CollapseScheduler``: the collapse early-stopping decision as a Ray Tune scheduler.

Drop-in for ``ASHAScheduler`` in an existing ``Tuner``::

    from hpo import CollapseScheduler

    scheduler = CollapseScheduler(
        reference="curve.json",
        time_attr="step",
        controls=lambda config: dict(
            total_steps=T, tpp=20.0, schedule="linear", warmup_steps=W,
            tau=1.0 / (config["lr"] * config["weight_decay"] * T),
        ),
    )
    tuner = tune.Tuner(
        train_fn,  # calls tune.report({"loss": loss, "step": step})
        param_space=space,
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=scheduler,
                                    search_alg=OptunaSearch()),
    )

The decision is :mod:`hpo._decision`'s, identical to :class:`hpo.CollapsePruner`: at each
checkpoint t^ = ``result[time_attr] / total_steps`` the trial's final metric is predicted once,
and the trial is stopped when the optimistic end of its interval is worse than the pessimistic
end of the best other trial by more than ``margin``. Ray runs the scheduler in the driver, so its
state (every trial's curve, estimates and decisions) lives on this object; it is written as JSON
to ``collapse_scheduler_state.json`` in the experiment directory (at each decision, each trial
end, and at most every ``save_period_s`` seconds otherwise), uploaded with the experiment state,
and read back when ``Tuner.restore`` re-adds the trials (ray#30838: Ray itself does not save
scheduler state). ``save(path)`` / ``restore(path)`` do the same explicitly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from ray.tune.result import DEFAULT_METRIC
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

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
    CONTROL_FIELDS,
    WarnOnce,
    build_controls,
    controls_from_json,
    controls_to_json,
    fit_reference,
    make_predictor,
    setup_decision,
)

if TYPE_CHECKING:
    from ray.tune.experiment import Trial

__all__ = ["CollapseScheduler", "STATE_FILE"]

STATE_FILE = "collapse_scheduler_state.json"
_STATE_VERSION = 1

RUNNING, COMPLETED, STOPPED, ENDED = "running", "completed", "stopped", "ended"


@dataclasses.dataclass
class _TrialRecord:
    """What the scheduler knows of one trial (JSON round trip via ``to_dict``/``from_dict``)."""

    trial_id: str
    controls: dict[str, Any] | None = None
    times: list[float] = dataclasses.field(default_factory=list)
    values: list[float] = dataclasses.field(default_factory=list)
    status: str = RUNNING
    final: float | None = None
    checkpoints: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    latest: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["values"] = [v if math.isfinite(v) else None for v in self.values]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> _TrialRecord:
        rec = cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})
        rec.values = [float("nan") if v is None else float(v) for v in rec.values]
        rec.times = [float(t) for t in rec.times]
        return rec


class CollapseScheduler(FIFOScheduler):
    """Stop Ray Tune trials whose predicted final metric is dominated.

    Args:
        reference: the universal curve (a JSON path, its dict or a fitted
            ``predictors.UniversalCurve``). ``None``: self-calibrating mode, a curve is fitted on
            the experiment's completed trials once there are ``n_calibration_trials``; nothing
            is stopped before that.
        metric: the result key to optimize (or from ``TuneConfig(metric=...)``).
        mode: ``"min"`` or ``"max"`` (or from ``TuneConfig(mode=...)``). For ``"max"`` the metric
            is taken to be a negated loss.
        time_attr: the result key holding the optimizer step (progress = value / total_steps);
            ``"training_iteration"`` by default, as in ``ASHAScheduler``.
        controls: where each trial's controls come from: a function of the trial's config
            returning a ``predictors.Controls`` or a dict of its fields; a fixed dict or
            ``Controls``; or ``None``: the config's own keys named like the fields
            (``total_steps``, ``tau``, ``tpp``, ``schedule``, ``warmup_steps``, ``lr_schedule``,
            ...). A dict's ``warmup_steps`` in (0, 1) is a fraction of ``total_steps``, as in
            :func:`hpo.describe_trial`. Trials without usable controls are never stopped
            (warned once).
        predictor: any ``predict(steps, losses, controls) -> Prediction`` object; overrides
            ``reference``.
        checkpoints, margin, n_startup_trials, n_min_trials, level, min_points,
        n_calibration_trials, stop_diverged, debias, extrapolation_inflation,
        paired_tolerance, paired_pairs, paired_min_pairs, paired_finished_inflation,
        rejudge_every: as in
            :class:`hpo.CollapsePruner`.
        save_period_s: at most this long between state writes while trials only report.
    """

    def __init__(
        self,
        reference: str | Path | dict[str, Any] | Any | None = None,
        *,
        metric: str | None = None,
        mode: str | None = None,
        time_attr: str = "training_iteration",
        controls: Callable[[dict[str, Any]], Any] | Mapping[str, Any] | Any | None = None,
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
        save_period_s: float = 10.0,
    ) -> None:
        super().__init__()
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', but got {mode=}")
        self._metric = metric
        self._mode = mode
        self._metric_op: float | None = None if mode is None else (1.0 if mode == "max" else -1.0)
        self._time_attr = time_attr
        self._controls_source = controls
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
        self._calibrated: tuple[tuple[str, ...], Any] | None = None
        self._save_period_s = float(save_period_s)
        self._trials: dict[str, _TrialRecord] = {}
        self._live: set[str] = set()  # trials added in this session
        self._state_dir: str | None = None
        self._restore_checked = False
        self._last_save = 0.0
        self._warn = WarnOnce("CollapseScheduler")

    # ------------------------------------------------------------------ metric / mode
    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        """Take ``metric`` and ``mode`` from ``TuneConfig`` unless given at construction."""
        if self._metric and metric:
            return False
        if self._mode and mode:
            return False
        if metric:
            self._metric = metric
        if mode:
            self._mode = mode
        if self._mode == "max":
            self._metric_op = 1.0
        elif self._mode == "min":
            self._metric_op = -1.0
        if self._metric is None and self._mode:
            self._metric = DEFAULT_METRIC
        return True

    @property
    def config(self) -> DecisionConfig:
        """The decision parameters, with the direction of ``mode``."""
        direction = "maximize" if self._mode == "max" else "minimize"
        return dataclasses.replace(self._config, direction=direction)

    # ------------------------------------------------------------------ Ray callbacks
    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        if not self._metric or not self._metric_op:
            raise ValueError(
                f"{type(self).__name__} has been instantiated without a valid `metric` "
                f"({self._metric}) or `mode` ({self._mode}) parameter. Either pass these "
                "parameters when instantiating the scheduler, or pass them as parameters to "
                "`tune.TuneConfig()`"
            )
        self._maybe_restore(trial)
        self._live.add(trial.trial_id)
        rec = self._trials.get(trial.trial_id)
        if rec is None:
            rec = self._trials[trial.trial_id] = _TrialRecord(trial.trial_id)
        if rec.controls is None:
            rec.controls = self._controls_json(trial)

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        rec = self._trials.get(trial.trial_id)
        if rec is None:  # added before a restore, or by another path
            self.on_trial_add(tune_controller, trial)
            rec = self._trials[trial.trial_id]
        if rec.status == STOPPED:  # a result buffered after our STOP
            return TrialScheduler.STOP
        if self._time_attr not in result or self._metric not in result:
            self._warn(
                "missing_result_keys",
                f"results lack {self._time_attr!r} or {self._metric!r}; such results are "
                "ignored (set time_attr= and metric= to keys your trainable reports)",
            )
            return TrialScheduler.CONTINUE
        t = float(result[self._time_attr])
        value = float(result[self._metric])
        if rec.times and t <= rec.times[-1]:  # a restarted trial reports from the start again
            keep = [i for i, x in enumerate(rec.times) if x < t]
            rec.times = [rec.times[i] for i in keep]
            rec.values = [rec.values[i] for i in keep]
        rec.times.append(t)
        rec.values.append(value)
        rec.status = RUNNING
        decision = TrialScheduler.CONTINUE
        total = (rec.controls or {}).get("total_steps")
        if rec.controls is None or not total:
            self._warn(
                MISSING_CONTROLS,
                f"trial {trial.trial_id} has no usable controls (see controls=); trials "
                "without controls are never stopped",
            )
        else:
            t_hat = t / float(total)
            cp = latest_checkpoint(t_hat, self._config.checkpoints)
            if cp is not None:
                key = f"{cp:g}"
                slot = self._config.rejudge_slot(t_hat)
                record = rec.checkpoints.get(key)
                if record is None:
                    rec.checkpoints[key] = self._judge(rec, cp, t_hat)
                    rec.latest = rec.checkpoints[key]
                    self._save_state(force=True)
                elif not record.get("stop") and slot > int(record.get("slot", slot)):
                    rec.checkpoints[key] = rec.latest = self._rejudge(rec, cp, record, slot)
                if rec.checkpoints[key].get("stop"):
                    decision = TrialScheduler.STOP
                    rec.status = STOPPED
        self._save_state(force=decision == TrialScheduler.STOP)
        return decision

    def on_trial_complete(
        self, tune_controller: Any, trial: Trial, result: dict[str, Any] | None
    ) -> None:
        rec = self._trials.get(trial.trial_id)
        if rec is None:
            return
        if rec.status != STOPPED:
            if result and self._metric in result and self._time_attr in result:
                t = float(result[self._time_attr])
                if not rec.times or t > rec.times[-1]:
                    rec.times.append(t)
                    rec.values.append(float(result[self._metric]))
            rec.status = COMPLETED if self._reached_end(rec) else ENDED
            if rec.status == COMPLETED:
                rec.final = rec.values[-1]
        self._save_state(force=True)

    def on_trial_error(self, tune_controller: Any, trial: Trial) -> None:
        rec = self._trials.get(trial.trial_id)
        if rec is not None and rec.status == RUNNING:
            rec.status = ENDED
        self._save_state(force=True)

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        rec = self._trials.get(trial.trial_id)
        if rec is not None and rec.status == RUNNING:
            rec.status = ENDED
        self._save_state(force=True)

    def debug_string(self) -> str:
        n_stopped = sum(r.status == STOPPED for r in self._trials.values())
        return (
            f"Using CollapseScheduler: {n_stopped} of {len(self._trials)} trials stopped early "
            f"(checkpoints {list(self._config.checkpoints)})."
        )

    # ------------------------------------------------------------------ save / restore
    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state as JSON-friendly data."""
        return {
            "version": _STATE_VERSION,
            "metric": self._metric,
            "mode": self._mode,
            "trials": {k: r.to_dict() for k, r in self._trials.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Inverse of :meth:`state_dict` (trials already known keep their newer records)."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported scheduler state version {state.get('version')!r}")
        for key, data in state.get("trials", {}).items():
            if key not in self._trials or not self._trials[key].times:
                self._trials[key] = _TrialRecord.from_dict(data)

    def save(self, checkpoint_path: str) -> None:
        """Write the state to ``checkpoint_path`` (JSON)."""
        tmp = f"{checkpoint_path}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.state_dict(), f)
        os.replace(tmp, checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        """Read the state written by :meth:`save`."""
        with open(checkpoint_path) as f:
            self.load_state_dict(json.load(f))

    def _maybe_restore(self, trial: Trial) -> None:
        if self._restore_checked:
            return
        self._restore_checked = True
        try:
            self._state_dir = trial.storage.experiment_driver_staging_path
        except Exception:  # no storage context (unit use): no automatic persistence
            self._state_dir = None
            return
        path = Path(self._state_dir, STATE_FILE)
        if path.exists():
            try:
                self.restore(str(path))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                self._warn("restore", f"could not restore state from {path}: {exc}")

    def _save_state(self, force: bool = False) -> None:
        if self._state_dir is None:
            return
        now = time.monotonic()
        if not force and now - self._last_save < self._save_period_s:
            return
        self._last_save = now
        try:
            os.makedirs(self._state_dir, exist_ok=True)
            self.save(os.path.join(self._state_dir, STATE_FILE))
        except OSError as exc:
            self._warn("save", f"could not save state to {self._state_dir}: {exc}")

    # ------------------------------------------------------------------ internals
    def _controls_json(self, trial: Trial) -> dict[str, Any] | None:
        source = self._controls_source
        config = dict(getattr(trial, "config", {}) or {})
        try:
            if callable(source) and not isinstance(source, Mapping):
                raw = source(config)
            elif source is None:
                raw = {k: config[k] for k in CONTROL_FIELDS if k in config}
            else:
                raw = source
            if raw is None:
                return None
            if not isinstance(raw, Mapping):
                return controls_to_json(raw)
            return controls_to_json(build_controls(**dict(raw)))
        except (TypeError, ValueError, KeyError, ZeroDivisionError) as exc:
            self._warn(
                MISSING_CONTROLS,
                f"trial {trial.trial_id}: no usable controls ({type(exc).__name__}: {exc}); "
                "it is never stopped",
            )
            return None

    def _reached_end(self, rec: _TrialRecord) -> bool:
        total = (rec.controls or {}).get("total_steps")
        if not total or not rec.times:
            return True  # without controls a finished trial counts as complete
        gap = float(np.median(np.diff(rec.times))) if len(rec.times) > 1 else 0.0
        return rec.times[-1] >= total - max(0.01 * total, 1.5 * gap)

    def _judge(self, rec: _TrialRecord, cp: float, t_hat: float) -> dict[str, Any]:
        config = self.config
        try:
            controls = controls_from_json(rec.controls or {})
        except (ValueError, TypeError) as exc:
            self._warn(MISSING_CONTROLS, f"trial {rec.trial_id}: unreadable controls ({exc})")
            controls = None
        predictor = self._predictor
        if predictor is None and controls is not None:
            predictor = self._calibrated_predictor(config.sign)
        steps = np.asarray(rec.times, dtype=float)
        values = np.asarray(rec.values, dtype=float)
        if predictor is None and controls is not None and self._self_calibrating:
            raw = Estimate.failed("uncalibrated", t_hat)
        else:
            raw = estimate_at_checkpoint(steps, values, controls, predictor, config, t_hat)
        if raw.status not in (OK, "uncalibrated", DIVERGED):
            detail = f" ({raw.detail})" if raw.detail else ""
            self._warn(
                raw.status,
                f"trial {rec.trial_id} at t^={t_hat:.3g}: no prediction, {raw.status}{detail}; "
                "not stopped (fail open)",
            )
        verdict, est = self._verdict(rec, cp, raw)
        record = {
            "estimate": est.to_dict(),
            "raw": raw.to_dict(),
            "step": float(steps[-1]),
            "checkpoint": cp,
            "slot": config.rejudge_slot(t_hat),
            "stop": bool(verdict.stop),
            "reason": verdict.reason,
            "threshold": verdict.threshold,
            "best_trial": verdict.best,
        }
        record["explanation"] = explain(record)
        return record

    def _verdict(self, rec: _TrialRecord, cp: float, raw: Estimate) -> tuple[Verdict, Estimate]:
        snapshots = []
        for other in self._trials.values():
            if other.trial_id == rec.trial_id:
                continue
            snap = self._snapshot(other, cp)
            if snap is not None:
                snapshots.append(snap)
        diverged = bool(rec.values) and not math.isfinite(rec.values[-1])
        latest = float(rec.values[-1]) if rec.values else None
        total = (rec.controls or {}).get("total_steps")
        last_report = bool(rec.times) and at_last_report(rec.times[-1], total)
        return judge_estimate(
            raw, rec.trial_id, cp, snapshots, self._debias_pairs(rec.trial_id, cp), self.config,
            diverged, latest=latest, last_report=last_report,
        )

    def _rejudge(
        self, rec: _TrialRecord, cp: float, record: dict[str, Any], slot: int
    ) -> dict[str, Any]:
        """Judge the trial again from its stored estimate at ``cp`` against the other trials'
        current state (no new prediction); the record with the new slot, and a stop."""
        raw = Estimate.from_dict(record.get("raw", {}))
        verdict, est = self._verdict(rec, cp, raw)
        out = {**record, "slot": slot}
        if verdict.stop:
            out.update(
                estimate=est.to_dict(), stop=True, threshold=verdict.threshold,
                reason=f"{verdict.reason} (re-judged at {rec.times[-1]:g})",
                best_trial=verdict.best, rejudged_step=rec.times[-1],
            )
            out["explanation"] = explain(out)
        return out

    def _snapshot(self, rec: _TrialRecord, cp: float) -> TrialSnapshot | None:
        """The trial as a competitor of one judged at checkpoint ``cp`` (its paired
        prediction: its raw one from ``cp``; a running trial that has not reached ``cp``, its
        latest, which the paired rule leaves out)."""
        if rec.status == COMPLETED and rec.final is not None:
            record = rec.checkpoints.get(f"{cp:g}")
            raw = Estimate.from_dict(record.get("raw", {})) if record else None
            usable = raw is not None and raw.pairable
            return TrialSnapshot(
                rec.trial_id, running=False, estimate=Estimate.exact_value(rec.final),
                paired=raw.value if usable else None, paired_cp=cp if usable else None,
                paired_extrapolated=bool(usable and raw.out_of_range),
                paired_counterparts=raw.counterparts if usable else (),
            )
        if rec.status == RUNNING and rec.trial_id in self._live:
            if rec.latest is None:
                return TrialSnapshot(rec.trial_id, running=True)
            est = Estimate.from_dict(rec.latest.get("estimate", {}))
            # the paired prediction from the judged checkpoint when the trial has reached it
            # (the latest one, from an earlier checkpoint, is left out by the paired rule)
            at_cp = rec.checkpoints.get(f"{cp:g}", rec.latest)
            raw = Estimate.from_dict(at_cp.get("raw", {}))
            return TrialSnapshot(
                rec.trial_id, running=True, estimate=est,
                paired=raw.value if raw.pairable else None,
                paired_cp=float(at_cp.get("checkpoint", cp)) if raw.pairable else None,
                paired_extrapolated=bool(raw.out_of_range),
                paired_counterparts=raw.counterparts if raw.pairable else (),
            )
        if rec.status in (STOPPED, ENDED):
            return TrialSnapshot(rec.trial_id, running=False, alive=False)
        return None  # running in an earlier session and not re-added

    def _debias_pairs(self, trial_id: str, cp: float) -> list[tuple[float, float]]:
        pairs = []
        for other in self._trials.values():
            if other.trial_id == trial_id or other.status != COMPLETED or other.final is None:
                continue
            record = other.checkpoints.get(f"{cp:g}")
            if record is None:
                continue
            raw = Estimate.from_dict(record.get("raw", {}))
            if raw.usable and not raw.out_of_range:
                pairs.append((raw.value, float(other.final)))
        return pairs

    def _calibrated_predictor(self, sign: float) -> Any | None:
        done = [
            r
            for r in self._trials.values()
            if r.status == COMPLETED
            and r.controls is not None
            and len(r.times) >= self._config.min_points
        ]
        if len(done) < self._n_calibration:
            return None
        ids = tuple(sorted(r.trial_id for r in done))
        if self._calibrated is not None and self._calibrated[0] == ids:
            return self._calibrated[1]
        predictor = None
        try:
            runs = [
                (
                    r.trial_id,
                    np.asarray(r.times),
                    np.asarray(r.values),
                    controls_from_json(r.controls),
                )
                for r in sorted(done, key=lambda r: r.trial_id)
            ]
            predictor = make_predictor(fit_reference(runs, sign), self._level)
        except Exception as exc:  # fail open
            self._warn(
                FIT_FAILED,
                f"self-calibration on {len(done)} completed trials failed "
                f"({type(exc).__name__}: {exc}); not stopping until a fit succeeds",
            )
        self._calibrated = (ids, predictor)
        return predictor
