"""The judge: when trials are judged, against whom, and what is stored; shared by the Optuna
pruner and the Ray Tune scheduler, which only translate their framework's trials into
:class:`TrialView` and store the records the judge returns.

* **When.** A trial is judged when its progress t^ = step / total_steps crosses a checkpoint
  (``DEFAULT_CHECKPOINTS``): its final value is predicted there, once, from every point it has
  reported. The prediction is then re-used for ``stale_after`` of progress (default
  ``STALE_AFTER``): every ``rejudge_every`` (default ``REJUDGE_EVERY``) the trial is judged
  again from it against the others' current state, so a competitor that catches up or
  finishes counts as soon as it does. :meth:`Judge.maybe_judge`, the one entry point of both
  adapters, decides from the judged trial alone whether a judgment is due, and only then asks
  for the other trials.
* **Against whom.** Finished trials, and running trials whose latest prediction was made at
  the judged trial's checkpoint or a later one: a trial that lags behind, with a less informed
  prediction, never stops one that is ahead. Stopped and failed trials do not compete.
* **Finished** means completed with a finite value, however far the trial got: an Optuna
  trial ``COMPLETE`` with its value (the one its objective returned), a Ray trial that ended
  without a stop or an error with its last reported value. A finished trial whose reports
  reach its ``total_steps`` (:func:`hpo.predictors.io.reaches_end`) competes with its value
  and its prediction from the judged checkpoint, whose error the judged trial's shares in
  part; its error there also rescales the rule (``study_rescale``) and it can self-calibrate. A
  trial that ended early (its last report short of the end) competes with its value alone,
  through the judged trial's whole interval: its prediction was of a final it never reached,
  so it is neither paired nor used for the scale or the curve (warned once).
* **The rule** is :func:`hpo.pruning._rule.judge`: stop when the probability to end more than
  ``tolerance`` below the strongest competitor is below ``threshold``, from the pair law,
  rescaled by the finished trials' own pair errors at the judged checkpoint
  (:func:`hpo.pruning._rule.study_rescale`). ``threshold=0`` stops nothing and still records
  every verdict (a shadow run: what the rule would have said).
* **Never stopped:** before ``n_startup_trials`` trials (the judged one included) have a
  prediction or a final value; at its last report (``step >= total_steps - 1``: nothing to
  save). **Always stopped:** a trial whose latest value is NaN or infinite (diverged).
* **Fails open.** A predictor that declines or raises, a non-finite or non-positive
  prediction: no estimate, the trial is kept and does not compete on that checkpoint; each
  cause is warned about once.
* **Without controls** (no ``describe_trial``, no usable ``total_steps``, tau or schedule) a
  trial has no curve prediction and the same-step evidence decides (warned once): its chance
  to end below the finished trial it is least likely to beat, by the study's crossing law
  (:mod:`hpo.pruning._evidence`). A trial without ``total_steps`` is read against the study's
  length, the last step its finished trials reported; it is not judged before one finished.
* **The study's shared error.** A new prediction at a checkpoint is moved, with its interval,
  by the error the finished trials' predictions there shared (:mod:`hpo.predictors.shift`:
  the posterior mean of their signed log errors, shrunk toward 0 while they are few): what
  the study is told (the stored prediction, its sentence, the value handed to the sampler).
  The rule reads the predictor's own value (``Estimate.predicted``): two predictions of one
  study share that error, and its laws were measured on unshifted predictions.
* **Self-calibration.** Without a reference curve or predictor, a curve is fitted on the
  study's own finished trials once there are ``n_calibration_trials`` of them; nothing is
  stopped before. The fitted curve is handed to the adapter to store (``ReferenceStore``).

Each judgment returns a *record* (a frozen :class:`~hpo.pruning._record.Record`: checkpoint,
estimate, verdict, the competitor, the same-step evidence against it, ``same_step``
(:mod:`hpo.pruning._evidence`: how far the trial trails it at the same t^ and how often the
study's finished pairs closed such a gap), which evidence decided (``decided_by``: the curve's
probability wherever the trial has a prediction, the same step's where it has no controls),
and one sentence, ``explanation``) that the adapter stores on the trial as a dict
(:meth:`~hpo.pruning._record.Record.to_dict`), in a :class:`Judgment` that
says whether the record is a new verdict or repeats the stored one. A trial's state, in the
judge and both adapters, is a :class:`TrialState`.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hpo.predictors import CollapsePredictor
from hpo.predictors.crossings import (
    CrossingLaw,
    crossing_pairs,
    default_crossing_prior,
    fit_crossing_law,
    level_at,
)
from hpo.predictors.io import reaches_end
from hpo.predictors.predict import LEVEL, Prediction
from hpo.predictors.shift import study_shift
from hpo.pruning._evidence import CURVE, SAME_STEP, same_step
from hpo.pruning._predict import (
    WarnOnce,
    controls_from_json,
    fit_reference,
    load_reference,
)
from hpo.pruning._record import Record, checkpoint_key, latest_record
from hpo.pruning._rule import (
    DIVERGED,
    FIT_FAILED,
    KEEP,
    LAST_REPORT,
    MISSING_CONTROLS,
    NO_COMPETITOR,
    NO_ESTIMATE,
    STARTUP,
    STOP,
    UNCALIBRATED,
    Competitor,
    Estimate,
    StudyRescale,
    evenly_spaced,
    judge,
    study_rescale,
)
from hpo.pruning._sentence import explain
from hpo.pruning._settings import PrunerSettings

__all__ = [
    "Judge",
    "Judgment",
    "TrialView",
    "TrialState",
    "ReferenceStore",
    "LEVEL",
    "checkpoint_key",
    "latest_record",
    "Record",
]


class TrialState(str, enum.Enum):
    """A trial's state, one vocabulary for the judge and both adapters (each member is its
    string value, so a state compares equal to, and serializes as, that string).

    The judge reads two: a ``RUNNING`` trial competes with its latest prediction, a
    ``COMPLETE`` one with its value; a trial in any other state neither competes nor counts
    toward ``n_startup_trials``. The others are the adapters' own distinctions."""

    #: reporting (Optuna ``RUNNING``; a Ray trial between results)
    RUNNING = "running"
    #: completed with a value, however far it got (Optuna ``COMPLETE`` with a measured value;
    #: a Ray trial that ended without a stop or an error, with its last reported value)
    COMPLETE = "complete"
    #: stopped by the rule (Optuna ``PRUNED``, or ``COMPLETE`` with the predicted value that
    #: :func:`hpo.stop_with_prediction` handed the sampler; a Ray trial the scheduler stopped)
    STOPPED = "stopped"
    #: failed or removed (Optuna ``FAIL``; a Ray trial that errored or was removed)
    ENDED = "ended"
    #: not started (an enqueued Optuna trial, ``WAITING``)
    WAITING = "waiting"
    #: unknown to this process: a Ray trial restored as running from the scheduler's saved
    #: state and not re-added by this process
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TrialView:
    """One trial as the judge needs it, built by an adapter from its framework's trial.

    ``key`` identifies it, ``label`` names it to users (an Optuna trial number, a Ray trial
    id); ``state`` its :class:`TrialState` (only ``RUNNING`` and ``COMPLETE`` trials
    compete); ``records`` its stored
    records by :func:`checkpoint_key`; ``final`` a complete trial's value; ``controls`` its
    controls as JSON; ``curve`` returns its reported ``(steps, values)`` (read for the judged
    trial's prediction, for self-calibration and, once per view, for :attr:`reached_end`).

    A view is a snapshot: what the judge derives from its records (the latest record, the
    estimates) is computed once per view, so an adapter builds a new view when a trial's
    records change."""

    key: Hashable
    label: Any
    state: TrialState
    records: Mapping[str, Record]
    final: float | None = None
    controls: Mapping[str, Any] | None = None
    curve: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None

    @functools.cached_property
    def latest(self) -> Record | None:
        """Its record at the latest checkpoint judged (:func:`latest_record` of its
        ``records``; ``None`` before the first)."""
        return latest_record(self.records)

    @functools.cached_property
    def latest_estimate(self) -> Estimate | None:
        """The estimate of :attr:`latest` (``None`` before the first)."""
        rec = self.latest
        return None if rec is None else rec.estimate

    def estimate_at(self, cp: float) -> Estimate | None:
        """The estimate of its record at checkpoint ``cp`` (``None`` without one)."""
        memo = self.__dict__.setdefault("_estimates", {})
        if cp not in memo:
            rec = self.records.get(checkpoint_key(cp))
            memo[cp] = rec.estimate if rec else None
        return memo[cp]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Its reported ``(steps, values)`` as float arrays (empty without a ``curve``)."""
        if self.curve is None:
            return np.empty(0), np.empty(0)
        steps, values = self.curve()
        return np.asarray(steps, dtype=float), np.asarray(values, dtype=float)

    @functools.cached_property
    def reached_end(self) -> bool | None:
        """Whether its reports reach its ``total_steps`` (:func:`hpo.predictors.io.reaches_end`);
        ``None`` without a ``total_steps`` or a curve."""
        try:
            total = float((self.controls or {})["total_steps"])
        except (KeyError, TypeError, ValueError):
            return None
        if self.curve is None:
            return None
        steps = np.asarray(self.curve()[0], dtype=float)
        return reaches_end(np.sort(steps[np.isfinite(steps)]), total)


@dataclass(frozen=True)
class Judgment:
    """What :meth:`Judge.maybe_judge` decided on a report; unpacks as ``stop, record``.

    ``stop``: whether to stop the trial now. ``record``: the :class:`Record` to keep under
    ``checkpoint_key(record.checkpoint)``; ``None`` when no judgment was due (``stop`` is
    then the stored decision at the checkpoint). ``new``: whether ``record`` is a new verdict,
    to store: the first at its checkpoint, or a decision or a reason that differs from the
    record there (:meth:`Record.repeats`). It is ``False`` for a re-judgment that repeats the
    verdict of the record at the checkpoint, whose ``record`` is that record with only its
    ``slot`` advanced (the adapter keeps it so the judge knows which re-judging slot the trial
    reached; it writes nothing), and when ``record`` is ``None``."""

    stop: bool
    record: Record | None = None
    new: bool = False

    def __iter__(self) -> Iterator[Any]:
        return iter((self.stop, self.record))


class ReferenceStore(Protocol):
    """Where an adapter keeps the self-calibrated curve: ``get()`` the stored
    ``{"trials": [...], "curve": {...}}`` or ``None``; ``set(data)`` stores it."""

    def get(self) -> Mapping[str, Any] | None: ...

    def set(self, data: Mapping[str, Any]) -> None: ...


class Judge:
    """The decision of both adapters (see the module docstring).

    Args:
        reference: the universal curve (a JSON path, its dict or a fitted
            ``hpo.predictors.UniversalCurve``); ``None`` with no ``predictor``: self-calibrating.
        predictor: any ``predict(steps, losses, controls) -> Prediction``; overrides
            ``reference``.
        settings: the :class:`hpo.pruning.PrunerSettings` (checkpoints, threshold,
            tolerance, margin, trial counts, prior, re-judging cadence); ``None``: the
            defaults.
        on_verdict: called as ``on_verdict(label, record)`` with every judgment's
            :class:`Record` (the trial's label and the record, its sentence in
            ``record.explanation``), in the
            process that judged it; an exception it raises is warned about once and ignored.
        owner: names the adapter in warnings; ``hints`` the fix its users need, in the
            warning for missing controls (``"controls"``) and for a step beyond
            ``total_steps`` (``"progress"``).

    The settings are kept as :attr:`settings` (and each as an attribute of its name).
    Raises ``TypeError`` for bad ``settings``, ``predictor`` or ``on_verdict``.
    """

    def __init__(
        self,
        reference: str | Path | Mapping[str, Any] | Any | None = None,
        *,
        predictor: Any | None = None,
        settings: PrunerSettings | None = None,
        on_verdict: Callable[[Any, Record], None] | None = None,
        owner: str = "CollapsePruner",
        hints: Mapping[str, str] | None = None,
    ) -> None:
        settings = PrunerSettings() if settings is None else settings
        if not isinstance(settings, PrunerSettings):
            raise TypeError("settings must be a hpo.PrunerSettings, but got "
                            f"{type(settings).__name__}")
        if on_verdict is not None and not callable(on_verdict):
            raise TypeError(f"on_verdict must be callable, but got {type(on_verdict).__name__}")
        if predictor is not None and not callable(getattr(predictor, "predict", None)):
            raise TypeError("predictor must have predict(steps, losses, controls), "
                            f"but got {type(predictor).__name__}")
        self.settings = settings
        for name in PrunerSettings.names():  # judge.threshold, judge.checkpoints, ...
            setattr(self, name, getattr(settings, name))
        self.prior = settings.pair_prior  # the loaded prior (None: the shipped one)
        self.on_verdict = on_verdict
        if predictor is None and reference is not None:
            predictor = CollapsePredictor(load_reference(reference), level=LEVEL,
                                          prior=self.prior)
        self.predictor = predictor
        self.warn = WarnOnce(owner)
        self._hints = dict(hints or {})
        self._calibrated: dict[tuple[Any, ...], Any] = {}
        self._rescales: dict[tuple[Any, ...], StudyRescale] = {}
        self._levels: dict[tuple[Any, ...], float | None] = {}
        self._laws: dict[tuple[Any, ...], CrossingLaw] = {}
        self.crossing_prior = settings.crossing_prior or default_crossing_prior()

    # ------------------------------------------------------------------ when
    def moment(self, step: float, total_steps: float) -> tuple[float, int] | None:
        """``(checkpoint, slot)`` of a report at ``step``: the latest checkpoint crossed and
        the re-judging slot (``floor(t^ / rejudge_every)``); ``None`` before the first
        checkpoint. A judgment can only be due when this changes."""
        t_hat = float(step) / float(total_steps)
        if not math.isfinite(t_hat):
            return None
        crossed = [c for c in self.checkpoints if c <= t_hat + 1e-12]
        if not crossed:
            return None
        return crossed[-1], int(math.floor(t_hat / self.rejudge_every + 1e-9))

    def total_steps(self, view: TrialView) -> int | None:
        """The trial's ``total_steps`` from its controls; ``None`` without a usable one, said
        once: such a trial is judged on the same-step evidence alone."""
        total = _own_total(view)
        if total is None:
            self.warn(MISSING_CONTROLS, f"trial {view.label} has no usable controls "
                      f"(total_steps); {self._hints.get('controls', '')}without them a trial "
                      "is judged on the same-step evidence alone (how far it trails the best "
                      "finished trial at the same progress, and how often such gaps closed), "
                      "its progress read against the last step the finished trials reported")
        return total

    @staticmethod
    def study_length(views: Sequence[TrialView]) -> int | None:
        """The study's length for trials without ``total_steps``: the largest last step the
        finished trials reported (their own ``total_steps`` where they have one); ``None``
        before a trial has finished."""
        ends = []
        for v in views:
            if v.state != TrialState.COMPLETE:
                continue
            own = _own_total(v)
            if own is not None:
                ends.append(own)
                continue
            steps = v.arrays()[0]
            steps = steps[np.isfinite(steps)]
            if steps.size:
                ends.append(int(steps.max()))
        return max(ends) if ends and max(ends) >= 1 else None

    # ------------------------------------------------------------------ the judgment
    def maybe_judge(
        self,
        me: TrialView,
        step: float,
        value: float,
        others: Callable[[], Sequence[TrialView]],
        direction: str = "minimize",
        store: ReferenceStore | None = None,
    ) -> Judgment:
        """Judge the running trial ``me`` after its latest report (``value`` at ``step``), if
        a judgment is due: the one entry point of both adapters.

        Due when the report is past a checkpoint that ``me.records`` has no record at (the
        trial is predicted there), or starts a re-judging slot of that record (:meth:`moment`)
        within ``stale_after`` of its prediction's progress, while the prediction is usable or
        ``value`` is not finite. That is decided from ``me`` alone; ``others`` is called, once,
        only when a judgment is due, and returns the other trials' views.

        Returns a :class:`Judgment` (``stop, record``): ``record`` is ``None`` when nothing is
        due, ``stop`` then the stored decision at the checkpoint. A re-judgment that repeats
        the verdict of the record at the checkpoint (:meth:`Record.repeats`) returns that record
        with only its ``slot`` advanced, so a record says when its verdict was reached, and
        ``new=False``, so the adapter writes nothing; ``on_verdict`` sees every judgment.
        Never raises on bad data.

        A trial without ``total_steps`` in its controls (no ``describe_trial``) is judged on the
        same-step evidence alone (:meth:`_judge_same_step`), its progress read against the
        study's length: the last step the finished trials reported (``others`` is then called
        at each of its reports until a trial has finished)."""
        if me.curve is None or not math.isfinite(step):
            return Judgment(False)
        listed: Sequence[TrialView] | None = None
        total = self.total_steps(me)
        if total is None:
            listed = others()
            total = self.study_length(listed)
            if total is None:
                return Judgment(False)
            me = _with_total(me, total)
            listed = [_with_total(o, total) for o in listed]
        if step > total:
            self.warn("past_total_steps", f"trial {me.label} reports step {step:g} beyond "
                      f"total_steps={total}: {self._hints.get('progress', '')}")
        moment = self.moment(step, total)
        if moment is None:
            return Judgment(False)
        cp, slot = moment
        record = me.records.get(checkpoint_key(cp))
        if record is not None and record.stop:
            return Judgment(True)
        if record is not None and not self._rejudge_due(record, slot, step / total, value):
            return Judgment(False)
        return self._judge_now(me, record, step, value, total, moment,
                               others() if listed is None else listed, direction, store,
                               predict=listed is None)

    def _rejudge_due(self, record: Record, slot: int, t_hat: float,
                     value: float) -> bool:
        """Whether a report at progress ``t_hat`` in re-judging ``slot`` judges the trial again
        from ``record``, its record at the checkpoint."""
        if not slot > record.slot:
            return False
        est = record.estimate
        fresh = t_hat <= est.t_hat + self.stale_after + 1e-9
        return fresh and (est.usable or record.decided_by == SAME_STEP
                          or not math.isfinite(value))

    def _judge_now(self, me: TrialView, record: Record | None, step: float,
                   value: float, total: int, moment: tuple[float, int],
                   others: Sequence[TrialView], direction: str,
                   store: ReferenceStore | None, predict: bool = True) -> Judgment:
        """The judgment :meth:`maybe_judge` found due: from ``record``'s estimate, or from a new
        prediction when there is no record at the checkpoint (``predict=False``: the trial has
        no controls, no prediction is tried); tells ``on_verdict``, then decides whether the
        verdict is new or repeats ``record``'s."""
        cp, slot = moment
        sign = 1.0 if direction == "minimize" else -1.0
        if record is None and not predict:
            est = Estimate.failed(MISSING_CONTROLS, step / total, "no controls")
        elif record is None:
            steps, values = me.arrays()
            est = self._estimate(me, steps, values, others, sign, step / total, store)
            est = self._shifted(est, others, cp, sign)
        else:
            est = record.estimate
        new = self._judge(me, est, value, step >= total - 1, others, cp, sign)
        new = new.replace(checkpoint=cp, slot=slot, step=step, t_hat=step / total)
        new = new.replace(explanation=explain(new))
        if self.on_verdict is not None:
            try:
                self.on_verdict(me.label, new)
            except Exception as exc:  # an observer never changes a decision
                self.warn("on_verdict", f"on_verdict raised {type(exc).__name__}: {exc}; "
                          "ignored")
        if new.repeats(record):
            assert record is not None
            return Judgment(new.stop, record.replace(slot=slot))
        return Judgment(new.stop, new, new=True)

    def _judge(self, me: TrialView, est: Estimate, value: float, last_report: bool,
               others: Sequence[TrialView], cp: float, sign: float) -> Record:
        """The verdict on ``me`` from its estimate ``est`` at checkpoint ``cp`` and its latest
        ``value``, as a record (without checkpoint, slot, step and explanation)."""
        record = Record(est, False, KEEP, self.threshold)
        if not math.isfinite(value):
            return record.replace(stop=True, reason=DIVERGED)
        if not est.usable and est.status == MISSING_CONTROLS:
            return self._judge_same_step(me, record, last_report, others, cp, sign)
        if not est.usable:
            return record.replace(reason=NO_ESTIMATE)
        competitors = [c for c in (self._competitor(o, cp) for o in others) if c is not None
                       and sign * (c.final if c.final is not None else c.estimate.value) > 0]
        have = 1 + sum(1 for o in others if self._has_estimate(o))
        if have < self.n_startup_trials:
            return record.replace(reason=STARTUP, have=have, needed=self.n_startup_trials)
        if last_report:
            return record.replace(reason=LAST_REPORT)
        finished = [(c.estimate, c.final) for c in competitors
                    if c.final is not None and c.estimate is not None]
        rescale = self._rescale(finished, cp, sign)
        verdict = judge(est, competitors, self.threshold, sign, self.margin, rescale,
                        self.tolerance)
        out = Record.of(est, verdict, self.threshold, tolerance=self.tolerance,
                        study_scale=math.exp(rescale.log_scale),
                        study_distance_slope=rescale.distance_slope,
                        study_trials=rescale.trials)
        if verdict.against is not None:
            out = out.replace(decided_by=CURVE)
            mine = self._level(me, cp, sign)
            by_key = {o.key: o for o in others}
            theirs = self._level(by_key[verdict.against.key], cp, sign)
            if mine is not None and theirs is not None:
                law, gaps, closed = self._crossing_law(cp, sign, others)
                out = out.replace(same_step=same_step(law, math.log(mine / theirs), gaps,
                                                      closed))
        return out

    def _judge_same_step(self, me: TrialView, record: Record, last_report: bool,
                         others: Sequence[TrialView], cp: float, sign: float) -> Record:
        """The verdict on ``me``, which has no curve prediction for want of controls, from the
        same-step evidence alone: the strongest competitor is the finished trial (run to its
        end) it is least likely to end below by the crossing law
        (:func:`hpo.pruning._evidence.same_step`); the trial stops when that chance is below
        ``threshold``. Never before ``n_startup_trials`` (the judged one included) have
        finished, nor at the last report; kept when it has no level at ``cp``."""
        done = self._finished_levels(others, cp, sign)
        have = 1 + sum(1 for o in others if self._finished(o))
        if have < self.n_startup_trials:
            return record.replace(reason=STARTUP, have=have, needed=self.n_startup_trials)
        if last_report:
            return record.replace(reason=LAST_REPORT)
        mine = self._level(me, cp, sign)
        if mine is None or not done:
            return record.replace(reason=NO_COMPETITOR)
        law, gaps, closed = self._crossing_law(cp, sign, others)
        step, who = min(((same_step(law, math.log(mine / lv), gaps, closed), view)
                         for view, lv in done), key=lambda x: x[0].probability)
        stop = step.probability < self.threshold
        return record.replace(stop=stop, reason=STOP if stop else KEEP,
                              probability=step.probability, decided_by=SAME_STEP,
                              against=Competitor(who.key, who.label, None, float(who.final)),
                              tolerance=self.tolerance, same_step=step)

    def _finished_levels(self, others: Sequence[TrialView], cp: float, sign: float
                         ) -> list[tuple[TrialView, float]]:
        """The finished trials that ran to their end, each with its level at ``cp`` (those
        without one left out)."""
        return [(o, lv) for o in others
                if self._finished(o) and sign * o.final > 0 and self._ran_to_end(o)
                for lv in [self._level(o, cp, sign)] if lv is not None]

    def _crossing_law(self, cp: float, sign: float, others: Sequence[TrialView]
                      ) -> tuple[CrossingLaw, np.ndarray, np.ndarray]:
        """The study's crossing law at checkpoint ``cp`` and the finished pairs it was updated
        with (gaps, closed): the shipped prior updated by the pairs of the finished trials that
        ran to their end (evenly thinned to at most ``MAX_STUDY_PAIRS``), fitted once per set
        of finished trials."""
        done = self._finished_levels(others, cp, sign)
        gaps, closed = crossing_pairs([lv for _, lv in done], [sign * o.final for o, _ in done],
                                      self.tolerance)
        pick = evenly_spaced(gaps.size)
        gaps, closed = gaps[pick], closed[pick]
        key = (cp, sign, tuple((o.key, o.final) for o, _ in done))
        law = self._laws.get(key)
        if law is None:
            law = (fit_crossing_law(self.crossing_prior, cp, gaps, closed, len(done) - 1)
                   if len(done) >= 2 else self.crossing_prior.law(cp))
            if len(self._laws) > 256:
                self._laws.clear()
            self._laws[key] = law
        return law, gaps, closed

    def _level(self, view: TrialView, cp: float, sign: float) -> float | None:
        """``view``'s smoothed loss at progress ``cp`` (:func:`level_at`), kept for finished
        trials (their curves no longer change)."""
        finished = view.state == TrialState.COMPLETE
        key = (view.key, cp, sign)
        if finished and key in self._levels:
            return self._levels[key]
        try:
            total = float((view.controls or {})["total_steps"])
        except (KeyError, TypeError, ValueError):
            return None
        steps, values = view.arrays()
        level = level_at(steps / total, sign * values, cp) if total > 0 else None
        if finished:
            if len(self._levels) > 100_000:
                self._levels.clear()
            self._levels[key] = level
        return level

    def _rescale(self, finished: Sequence[tuple[Estimate, float]], cp: float, sign: float
                 ) -> StudyRescale:
        """:func:`study_rescale` of the finished trials at checkpoint ``cp``, fitted once per
        set of finished trials (their estimates and finals identify it)."""
        key = (cp, sign, tuple((e.value, e.pair_scale, e.lr, e.tau, f) for e, f in finished))
        memo = self._rescales
        if key not in memo:
            if len(memo) > 256:
                memo.clear()
            memo[key] = study_rescale(finished, sign)
        return memo[key]

    # ------------------------------------------------------------------ against whom
    def _competitor(self, view: TrialView, cp: float) -> Competitor | None:
        """``view`` as a competitor of a trial judged at checkpoint ``cp``, or ``None``."""
        if view.state == TrialState.COMPLETE:
            if not self._finished(view):
                return None
            est = view.estimate_at(cp) if self._ran_to_end(view) else None
            return Competitor(view.key, view.label, est if est and est.usable else None,
                              float(view.final))
        if view.state != TrialState.RUNNING:
            return None
        rec = view.latest
        if rec is None or rec.stop or not rec.checkpoint >= cp - 1e-12:
            return None
        est = view.latest_estimate
        return Competitor(view.key, view.label, est) if est is not None and est.usable else None

    @staticmethod
    def _finished(view: TrialView) -> bool:
        """Whether ``view`` is a finished trial: completed with a finite value."""
        return (view.state == TrialState.COMPLETE and view.final is not None
                and math.isfinite(view.final))

    def _ran_to_end(self, view: TrialView) -> bool:
        """Whether finished ``view``'s prediction and curve are evidence (its reports reach
        its ``total_steps``); warns once about a trial that ended early."""
        if view.reached_end is not False:
            return bool(view.reached_end)
        self.warn("ended_early", f"trial {view.label} finished before its total_steps: it "
                  "competes with its value alone (its prediction, of a final it did not reach, "
                  "is neither paired nor used for the rule's scale or a self-calibrated curve); "
                  f"{self._hints.get('progress', '')}")
        return False

    @staticmethod
    def _has_estimate(view: TrialView) -> bool:
        """Whether ``view`` counts toward ``n_startup_trials``: finished with a finite
        value, or running with a usable latest prediction."""
        if view.state == TrialState.COMPLETE:
            return Judge._finished(view)
        rec = view.latest
        return (view.state == TrialState.RUNNING and rec is not None and not rec.stop
                and view.latest_estimate is not None and view.latest_estimate.usable)

    # ------------------------------------------------------------------ the prediction
    def _estimate(self, me: TrialView, steps: np.ndarray, values: np.ndarray,
                  others: Sequence[TrialView], sign: float, t_hat: float,
                  store: ReferenceStore | None) -> Estimate:
        """The trial's predicted final value from its curve so far; never raises."""
        if values.size and not math.isfinite(values[-1]):
            return Estimate.failed(DIVERGED, t_hat)
        try:
            controls = controls_from_json(me.controls or {})
        except (ValueError, TypeError, KeyError) as exc:
            self.warn(MISSING_CONTROLS, f"trial {me.label}: unreadable controls ({exc}); "
                      "judged on the same-step evidence alone")
            return Estimate.failed(MISSING_CONTROLS, t_hat, str(exc))
        predictor = self.predictor
        if predictor is None:
            predictor = self._calibrated_predictor(others, sign, store)
            if predictor is None:
                return Estimate.failed(UNCALIBRATED, t_hat, (
                    f"self-calibrating: waiting for {self.n_calibration_trials} finished "
                    "trials"))
        ok = np.isfinite(steps) & np.isfinite(values)
        s, v = steps[ok], values[ok]
        order = np.argsort(s, kind="stable")
        try:
            pred = predictor.predict(s[order], sign * v[order], controls)
            if not isinstance(pred, Prediction):
                raise TypeError("predict must return a hpo.predictors.Prediction, but got "
                                f"{type(pred).__name__}")
            est = Estimate.of(pred, t_hat, sign)
        except Exception as exc:  # fail open: a predictor that cannot predict stops nothing
            est = Estimate.failed(FIT_FAILED, t_hat, f"{type(exc).__name__}: {exc}")
        if est.usable:
            return est
        self.warn(est.status, f"trial {me.label} at t^={t_hat:.3g}: no prediction, "
                  f"{est.status} ({est.detail}); not stopped (fail open)")
        return est

    def _shifted(self, est: Estimate, others: Sequence[TrialView], cp: float, sign: float
                 ) -> Estimate:
        """``est`` and its interval divided by ``exp(shift)``, the study's shared error
        (:func:`study_shift` of the signed log errors of the finished trials' predictions at
        checkpoint ``cp``, those that ran to their end); ``est`` as it is without such a
        trial."""
        if not est.usable:
            return est
        errors = []
        for o in others:
            if not (self._finished(o) and sign * o.final > 0 and o.reached_end):
                continue
            theirs = o.estimate_at(cp)
            if theirs is not None and theirs.usable and sign * theirs.predicted > 0:
                errors.append(math.log(sign * theirs.predicted / (sign * o.final)))
        shift = study_shift(errors)
        if not shift.trials:
            return est
        f = math.exp(-shift.shift)
        return dataclasses.replace(est, value=est.value * f, lower=est.lower * f,
                                   upper=est.upper * f, shift=shift.shift,
                                   shift_trials=shift.trials)

    def _calibrated_predictor(self, others: Sequence[TrialView], sign: float,
                              store: ReferenceStore | None) -> Any | None:
        """Self-calibrating mode: a predictor from a curve fitted on the finished trials
        (stored through ``store``, read back from it when it covers the same trials)."""
        done = [o for o in others if self._finished(o) and o.controls and o.curve
                and self._ran_to_end(o)]
        if len(done) < self.n_calibration_trials:
            return None
        done.sort(key=lambda o: str(o.label))
        labels = [o.label for o in done]
        key = tuple(str(x) for x in labels)
        if key in self._calibrated:
            return self._calibrated[key]
        predictor = None
        try:
            stored = store.get() if store is not None else None
            if stored is not None and [str(x) for x in stored.get("trials", ())] == list(key):
                curve = load_reference(stored["curve"])
            else:
                runs = [(f"trial-{o.label}", *o.curve(), controls_from_json(o.controls))
                        for o in done]
                curve = fit_reference(runs, sign)
                if store is not None:
                    store.set({"trials": labels, "curve": curve.to_dict()})
            predictor = CollapsePredictor(curve, level=LEVEL, prior=self.prior)
        except Exception as exc:  # fail open: no curve, no stopping
            self.warn(FIT_FAILED, f"self-calibration on {len(done)} finished trials failed "
                      f"({type(exc).__name__}: {exc}); not stopping until a fit succeeds")
        self._calibrated[key] = predictor
        return predictor


def _own_total(view: TrialView) -> int | None:
    """``view``'s ``total_steps`` from its controls, or ``None`` without a usable one."""
    try:
        total = int((view.controls or {})["total_steps"])
    except (KeyError, TypeError, ValueError):
        return None
    return total if total >= 1 else None


def _with_total(view: TrialView, total: int) -> TrialView:
    """``view`` read against the study's length ``total`` where its controls have no
    ``total_steps`` of their own (:meth:`Judge.study_length`)."""
    if _own_total(view) is not None:
        return view
    return dataclasses.replace(view, controls={**(view.controls or {}), "total_steps": total})
