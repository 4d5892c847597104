"""``CollapseScheduler``: the collapse decision (:mod:`hpo.pruning._judge`) as a Ray Tune
scheduler.

Drop-in for ``ASHAScheduler`` in an existing ``Tuner``::

    from hpo import CollapseScheduler

    scheduler = CollapseScheduler(
        reference="curve.json",
        time_attr="step",  # the result key that counts optimizer steps
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
        run_config=tune.RunConfig(callbacks=[scheduler.callback()]),  # the sentences in results
    )

The decision is the one :class:`hpo.CollapsePruner` makes: progress is ``result[time_attr] /
total_steps``; a trial that ends without a stop or an error is finished with its last reported
value, however far it got (:mod:`hpo.pruning._judge` says how one that ended early competes);
one that errors does not compete. Ray runs the scheduler in the driver, so its state (every
trial's curve and the judge's records) lives on this object; it is written as JSON to
``collapse_scheduler_state.json`` in the experiment directory (at each decision, each trial end,
and at most every ``SAVE_PERIOD_S`` seconds otherwise), uploaded with the experiment state, and
read back when ``Tuner.restore`` re-adds the trials (ray#30838: Ray itself does not save
scheduler state). ``save(path)`` / ``restore(path)`` do the same explicitly. The driver asks the
scheduler, not the file: :meth:`CollapseScheduler.latest_record` is a trial's latest record, and
:meth:`CollapseScheduler.of` finds the scheduler a ``Tuner`` runs (after ``Tuner.restore``, the
one restored with the experiment).

Each trial's latest verdict is one sentence with its numbers (``collapse_reason``; for a
stopped trial, why it stopped):

* it is in the trial's last result once the trial ends (``Result.metrics``, the experiment
  state);
* with ``RunConfig(callbacks=[scheduler.callback()])`` it is in each of the trial's results from
  its first verdict on, so in its result files and in ``ResultGrid.get_dataframe()``. Tune hands
  a scheduler a flattened copy of each result; a callback is where Tune lets a result change
  before its loggers write it (its default loggers come after the callbacks given);
* each stop is one line in the driver's log (logger ``hpo.pruning._ray``, level INFO), and the
  latest stops are in :meth:`debug_string`, which Ray prints with its progress.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hpo._extras import require

require("ray", "ray")
from ray.tune import Callback
from ray.tune.result import DEFAULT_METRIC
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from hpo.pruning._judge import (
    Judge,
    TrialState,
    TrialView,
    checkpoint_key,
    latest_record,
)
from hpo.pruning._predict import CONTROL_FIELDS, build_controls, controls_to_json
from hpo.pruning._record import Record
from hpo.pruning._rule import MISSING_CONTROLS
from hpo.pruning._settings import PrunerSettings

if TYPE_CHECKING:
    from ray.tune.experiment import Trial

__all__ = ["CollapseScheduler", "STATE_FILE", "REASON_KEY", "PREDICTED_FINAL_KEY"]

log = logging.getLogger(__name__)

STATE_FILE = "collapse_scheduler_state.json"
#: the result key that holds the trial's latest verdict in one sentence
REASON_KEY = "collapse_reason"
#: result key: a stopped trial's predicted final, in its last result (its metric keeps the
#: measured value); what :meth:`CollapseScheduler.searcher` hands the searcher
PREDICTED_FINAL_KEY = "collapse_predicted_final"
#: at most this many seconds between state writes while trials only report
SAVE_PERIOD_S = 10.0
_STATE_VERSION = 2

#: a trial's status as the state file spells it (its format: ``"completed"`` for
#: ``TrialState.COMPLETE``, the other statuses by their value), and back
_FILE_STATUS = {TrialState.RUNNING: "running", TrialState.COMPLETE: "completed",
                TrialState.STOPPED: "stopped", TrialState.ENDED: "ended"}
_STATUS_OF_FILE = {spelled: state for state, spelled in _FILE_STATUS.items()}


@dataclasses.dataclass
class _TrialRecord:
    """What the scheduler knows of one trial (JSON round trip via ``to_dict``/``from_dict``).

    ``status`` is ``RUNNING`` (reporting), ``COMPLETE`` (ended without a stop or an error:
    finished), ``STOPPED`` (stopped by this scheduler) or ``ENDED`` (failed or removed: not a
    competitor)."""

    trial_id: str
    controls: dict[str, Any] | None = None
    times: list[float] = dataclasses.field(default_factory=list)
    values: list[float] = dataclasses.field(default_factory=list)
    status: TrialState = TrialState.RUNNING
    final: float | None = None
    checkpoints: dict[str, Record] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["values"] = [v if math.isfinite(v) else None for v in self.values]
        out["status"] = _FILE_STATUS[self.status]
        out["checkpoints"] = {k: r.to_dict() for k, r in self.checkpoints.items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> _TrialRecord:
        rec = cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})
        rec.values = [float("nan") if v is None else float(v) for v in rec.values]
        rec.times = [float(t) for t in rec.times]
        rec.checkpoints = {k: Record.from_dict(r) for k, r in rec.checkpoints.items()}
        if "status" in data:
            rec.status = _STATUS_OF_FILE[data["status"]]
        return rec

    def view(self, live: bool) -> TrialView:
        """The trial as the judge sees it (a running trial not re-added by this process
        does not compete); a finished trial's view is built once while it stays the same."""
        state = (self.status if live or self.status != TrialState.RUNNING
                 else TrialState.UNKNOWN)
        key = (state, len(self.times), len(self.checkpoints), self.final)
        cached = self.__dict__.get("_finished_view")
        if cached is not None and cached[0] == key:
            return cached[1]
        view = TrialView(self.trial_id, self.trial_id, state, self.checkpoints, self.final,
                         self.controls, lambda: (np.asarray(self.times), np.asarray(self.values)))
        if state == TrialState.COMPLETE:
            self.__dict__["_finished_view"] = (key, view)
        return view


class CollapseScheduler(FIFOScheduler):
    """Stop Ray Tune trials unlikely to end better than the best other trial.

    Args:
        reference: the universal curve (a JSON path, its dict or a fitted
            ``hpo.predictors.UniversalCurve``). ``None``: self-calibrating, a curve is fitted on
            the experiment's completed trials once there are ``n_calibration_trials``;
            nothing is stopped before that.
        metric: the result key to optimize (or from ``TuneConfig(metric=...)``).
        mode: ``"min"`` or ``"max"`` (or from ``TuneConfig(mode=...)``). For ``"max"`` the metric
            is taken to be a negated loss.
        time_attr: the result key that counts optimizer steps (progress = its value /
            ``total_steps``); ``"training_iteration"`` by default, as in ``ASHAScheduler``,
            which is right only when each result is one step. A trial whose ``time_attr``
            passes its ``total_steps``, or that finishes before reaching it, is warned about
            once.
        controls: where each trial's controls come from: a function of the trial's config
            returning a ``hpo.predictors.Controls`` or a dict of its fields; a fixed dict or
            ``Controls``; or ``None``: the config's own keys named like the fields
            (``total_steps``, ``tau``, ``tpp``, ``schedule``, ``warmup_steps``, ``lr_schedule``,
            ...). A dict's ``warmup_steps`` in (0, 1) is a fraction of ``total_steps``, as in
            :func:`hpo.describe_trial`. A trial without usable controls is judged on the
            same-step evidence alone (warned once; :mod:`hpo.pruning._evidence`).
        predictor, on_verdict, **settings: as in :class:`hpo.CollapsePruner`
            (``on_verdict`` gets the Ray trial id; the settings are :class:`hpo.PrunerSettings`).

    Each trial's latest verdict is in its last result as ``collapse_reason``; pass
    :meth:`callback` to ``RunConfig(callbacks=...)`` to have it in every result Tune stores
    (the result files, ``ResultGrid.get_dataframe()``).
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
        on_verdict: Callable[[Any, Record], None] | None = None,
        **settings: Any,
    ) -> None:
        super().__init__()
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', but got {mode=}")
        self._metric = metric
        self._mode = mode
        self._time_attr = time_attr
        self._controls_source = controls
        self._judge = Judge(
            reference, predictor=predictor,
            settings=PrunerSettings.of("CollapseScheduler", settings),
            on_verdict=on_verdict, owner="CollapseScheduler",
            hints={"controls": "see controls= (a function of the trial's config, or the "
                               "config's own keys); ",
                   "progress": f"progress is read from result[{time_attr!r}]; set "
                               "time_attr= to the result key that counts optimizer steps (and "
                               "total_steps in controls= to their planned number)"},
        )
        self._reference: dict[str, Any] | None = None  # the self-calibrated curve
        self._trials: dict[str, _TrialRecord] = {}
        self._live: set[str] = set()  # trials added by this process
        self._stops: list[str] = []  # the latest stop explanations, for debug_string
        self._state_dir: str | None = None
        self._restore_checked = False
        self._last_save = 0.0

    @property
    def judge(self) -> Judge:
        """The decision this scheduler translates (its parameters and constants)."""
        return self._judge

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
        if self._metric is None and self._mode:
            self._metric = DEFAULT_METRIC
        return True

    # ------------------------------------------------------------------ Ray callbacks
    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        if not self._metric or self._mode not in ("min", "max"):
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
        if rec.status == TrialState.STOPPED:  # a result buffered after our STOP
            return TrialScheduler.STOP
        if self._time_attr not in result or self._metric not in result:
            self._judge.warn(
                "missing_result_keys",
                f"results lack {self._time_attr!r} or {self._metric!r}; such results are "
                "ignored (set time_attr= and metric= to keys your trainable reports)",
            )
            return TrialScheduler.CONTINUE
        t = float(result[self._time_attr])
        if rec.times and t <= rec.times[-1]:  # a restarted trial reports from the start again
            keep = [i for i, x in enumerate(rec.times) if x < t]
            rec.times = [rec.times[i] for i in keep]
            rec.values = [rec.values[i] for i in keep]
        rec.times.append(t)
        rec.values.append(float(result[self._metric]))
        rec.status = TrialState.RUNNING
        direction = "maximize" if self._mode == "max" else "minimize"
        judgment = self._judge.maybe_judge(rec.view(True), t, rec.values[-1],
                                           lambda: self._others(rec.trial_id), direction, self)
        stop, record = judgment
        if record is not None:
            # a repeated verdict too: its advanced slot tells the judge the slot reached
            rec.checkpoints[checkpoint_key(record.checkpoint)] = record
            if judgment.new and stop:
                log.info("CollapseScheduler: stopping trial %s: %s", trial.trial_id,
                         record.explanation)
                self._stops = [*self._stops[-4:], f"{trial.trial_id} {record.explanation}"]
        reason = self.reason(rec.trial_id)
        if reason is not None:  # into Tune's flattened copy: seen by the caller only
            result[REASON_KEY] = reason
        if stop:
            rec.status = TrialState.STOPPED
        self._save_state(force=record is not None)
        return TrialScheduler.STOP if stop else TrialScheduler.CONTINUE

    def on_trial_complete(
        self, tune_controller: Any, trial: Trial, result: dict[str, Any] | None
    ) -> None:
        rec = self._trials.get(trial.trial_id)
        if rec is None:
            return
        if rec.status != TrialState.STOPPED:
            if result and self._metric in result and self._time_attr in result:
                t = float(result[self._time_attr])
                if not rec.times or t > rec.times[-1]:
                    rec.times.append(t)
                    rec.values.append(float(result[self._metric]))
            # finished with its last value, however far it got: the judge decides how it
            # competes (hpo.pruning._judge)
            rec.status = TrialState.COMPLETE
            rec.final = rec.values[-1] if rec.values else None
        self._stamp(trial)
        self._save_state(force=True)

    def on_trial_error(self, tune_controller: Any, trial: Trial) -> None:
        rec = self._trials.get(trial.trial_id)
        if rec is not None and rec.status == TrialState.RUNNING:
            rec.status = TrialState.ENDED
        self._stamp(trial)
        self._save_state(force=True)

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        rec = self._trials.get(trial.trial_id)
        if rec is not None and rec.status == TrialState.RUNNING:
            rec.status = TrialState.ENDED
        self._save_state(force=True)

    def _others(self, trial_id: str) -> list[TrialView]:
        """The views of the trials but ``trial_id`` that the judge reads, for a judgment that
        is due: the running and completed ones (stopped and ended trials neither compete nor
        count)."""
        return [r.view(r.trial_id in self._live) for r in self._trials.values()
                if r.trial_id != trial_id
                and r.status in (TrialState.RUNNING, TrialState.COMPLETE)]

    def latest_record(self, trial_id: str) -> Record | None:
        """The judge's record at the latest checkpoint judged of trial ``trial_id``
        (:func:`hpo.pruning.latest_record` of its records): its prediction, its latest verdict
        and that verdict's sentence (``explanation``); ``None`` before its first, or for a
        trial this scheduler does not know (neither seen nor restored)."""
        rec = self._trials.get(trial_id)
        return None if rec is None else latest_record(rec.checkpoints)

    def reason(self, trial_id: str) -> str | None:
        """The trial's latest verdict in one sentence (``None`` before its first)."""
        last = self.latest_record(trial_id)
        return None if last is None else last.explanation

    @staticmethod
    def of(tuner: Any) -> CollapseScheduler | None:
        """The ``CollapseScheduler`` that ``tuner`` (a ``ray.tune.Tuner``) runs, in this
        process: for a Tuner from ``Tuner.restore``, the scheduler restored with the experiment
        (it, not one built for the new call, holds the trials' records once ``fit`` has
        re-added them). ``None`` when the Tuner runs another scheduler or runs remotely (Ray
        Client), where this process cannot reach it. Ray has no public accessor: this reads
        the Tuner's private ``_local_tuner._tune_config``."""
        config = getattr(getattr(tuner, "_local_tuner", None), "_tune_config", None)
        scheduler = getattr(config, "scheduler", None)
        return scheduler if isinstance(scheduler, CollapseScheduler) else None

    def predicted_final(self, trial_id: str) -> float | None:
        """The predicted final value (objective units) of a trial this scheduler stopped, from
        its latest prediction; ``None`` for a trial it did not stop or that has none."""
        rec = self._trials.get(trial_id)
        if rec is None or rec.status != TrialState.STOPPED:
            return None
        last = self.latest_record(trial_id)
        value = math.nan if last is None else last.estimate.value
        return float(value) if math.isfinite(value) else None

    def searcher(self, searcher: Searcher) -> Searcher:
        """``searcher`` (``OptunaSearch``, ``HyperOptSearch``, ...) learning a stopped trial's
        predicted final: ``TuneConfig(search_alg=scheduler.searcher(OptunaSearch(...)))``.

        Tune hands a searcher the last result of a stopped trial, a loss from early in
        training that the LR decay reorders. Wrapped, the searcher gets the trial's predicted
        final under its own metric instead (and under ``collapse_predicted_final``). Only the
        searcher's copy changes: the trial's stored results keep the measured metric, so
        ``ResultGrid.get_best_result`` never picks a prediction; the prediction is beside it,
        under ``collapse_predicted_final``, in a stopped trial's last result."""
        return _PredictedFinals(searcher, self)

    def callback(self) -> Callback:
        """A Tune callback that writes each trial's latest verdict (``collapse_reason``) into
        its results as Tune stores them: ``RunConfig(callbacks=[scheduler.callback()])`` puts
        the sentence in the result files and ``ResultGrid.get_dataframe()``. Give it before any
        logger callback of your own (Tune adds its default loggers after the callbacks given)."""
        return _ReasonCallback(self)

    def _stamp(self, trial: Trial) -> None:
        """Put the trial's latest verdict (and a stopped trial's predicted final) into its last
        result (``Result.metrics``)."""
        last = getattr(trial, "last_result", None)
        if isinstance(last, dict):
            self._annotate(trial.trial_id, last)

    def _annotate(self, trial_id: str, result: dict[str, Any]) -> None:
        """Write the trial's latest verdict and, once stopped, its predicted final into
        ``result``."""
        reason = self.reason(trial_id)
        if reason is not None:
            result[REASON_KEY] = reason
        predicted = self.predicted_final(trial_id)
        if predicted is not None:
            result[PREDICTED_FINAL_KEY] = predicted

    def debug_string(self) -> str:
        n_stopped = sum(r.status == TrialState.STOPPED for r in self._trials.values())
        lines = [f"Using CollapseScheduler: {n_stopped} of {len(self._trials)} trials stopped "
                 f"early (checkpoints {list(self._judge.checkpoints)}, threshold "
                 f"{self._judge.threshold:g})."]
        lines += [f"  {s}" for s in self._stops]
        return "\n".join(lines)

    # ------------------------------------------------------------------ the self-calibrated curve
    def get(self) -> Mapping[str, Any] | None:
        """The stored self-calibrated curve (the judge's ``ReferenceStore``)."""
        return self._reference

    def set(self, data: Mapping[str, Any]) -> None:
        """Store the self-calibrated curve (saved with the state)."""
        self._reference = dict(data)

    # ------------------------------------------------------------------ save / restore
    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state as JSON-friendly data."""
        return {
            "version": _STATE_VERSION,
            "metric": self._metric,
            "mode": self._mode,
            "trials": {k: r.to_dict() for k, r in self._trials.items()},
            "reference": self._reference,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Inverse of :meth:`state_dict` (trials already known keep their newer records)."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported scheduler state version {state.get('version')!r}")
        if self._reference is None and state.get("reference"):
            self._reference = dict(state["reference"])
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
                self._judge.warn("restore", f"could not restore state from {path}: {exc}")

    def _save_state(self, force: bool = False) -> None:
        if self._state_dir is None:
            return
        now = time.monotonic()
        if not force and now - self._last_save < SAVE_PERIOD_S:
            return
        self._last_save = now
        try:
            os.makedirs(self._state_dir, exist_ok=True)
            self.save(os.path.join(self._state_dir, STATE_FILE))
        except OSError as exc:
            self._judge.warn("save", f"could not save state to {self._state_dir}: {exc}")

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
            self._judge.warn(
                MISSING_CONTROLS,
                f"trial {trial.trial_id}: no usable controls ({type(exc).__name__}: {exc}); "
                "it is judged on the same-step evidence alone",
            )
            return None


class _ReasonCallback(Callback):
    """Writes each trial's latest verdict into its results before Tune's loggers store them
    (:meth:`CollapseScheduler.callback`)."""

    def __init__(self, scheduler: CollapseScheduler) -> None:
        self._scheduler = scheduler

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial,
                        result: dict[str, Any], **info: Any) -> None:
        self._scheduler._annotate(trial.trial_id, result)


class _PredictedFinals(Searcher):
    """A searcher that learns a stopped trial's predicted final
    (:meth:`CollapseScheduler.searcher`); everything else is the wrapped searcher's."""

    def __init__(self, searcher: Searcher, scheduler: CollapseScheduler) -> None:
        self.searcher = searcher
        self._scheduler = scheduler
        super().__init__(metric=searcher.metric, mode=searcher.mode)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return ok

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        return self.searcher.set_max_concurrency(max_concurrent)

    def suggest(self, trial_id: str) -> dict | None:
        return self.searcher.suggest(trial_id)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        metric = self.searcher.metric
        predicted = self._scheduler.predicted_final(trial_id)
        if result is not None and not error and predicted is not None and metric in result:
            result = {**result, metric: predicted, PREDICTED_FINAL_KEY: predicted}
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def get_state(self) -> dict:
        return {}  # nothing of its own: Tune saves the wrapped searcher itself

    def set_state(self, state: dict) -> None:
        pass

    def save(self, checkpoint_path: str) -> None:
        self.searcher.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.searcher.restore(checkpoint_path)
