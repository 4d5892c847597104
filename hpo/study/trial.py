"""One trial of a study's local sweep, from its claim to its state: :class:`TrialRun`.

The sweep (:mod:`hpo.study.sweep`) claims a trial and hands it here. A trial's life, in order:
its ``TrainConfig`` and recipe (:func:`hpo.study.plan.trial_setup`), the checkpoint of the
interrupted trial it re-runs taken over (with the values that trial reported), its controls
described for the pruner, training with the study's loss reported ``pruner.report_points``
times and the residual monitor watching, its curve (``trials/<number>.csv.gz``) and attrs
recorded, and its end told to Optuna: completed with its objective, stopped (pruned, or with
its predicted final where the sampler is TPE) or failed with its reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo.diagnose import alert_sentence
from hpo.models.status import RunStatus
from hpo.predictors import UniversalCurve
from hpo.pruning import (
    Record,
    describe_trial,
    latest_record,
    read_trial,
    set_trial_system_attr,
    stop_with_prediction,
    trial_records,
)
from hpo.study.plan import cost_attrs, trial_setup
from hpo.study.pruner import residual_callback
from hpo.study.stage import RunContext, Stage
from hpo.study.trials import (
    FAIL_REASON_ATTR,
    INTERRUPTED_ATTR,
    RESIDUAL_ALERT_ATTR,
    RESIDUAL_MAX_ATTR,
    objective_value,
    params_text,
    run_id_of,
)

if TYPE_CHECKING:
    from hpo.diagnose import ResidualCallback
    from hpo.models.recipe import Recipe
    from hpo.models.training import TrainConfig, TrainPoint, TrainResult

__all__ = ["TrialRun", "end_stopped"]

log = logging.getLogger(__name__)


class TrialRun(Stage):
    """One claimed trial (``trial`` of ``ostudy``) of the sweep of ``ctx``; ``reference`` is the
    sweep's universal curve (``None``: no residual monitor). :meth:`run` lives its life."""

    def __init__(self, ctx: RunContext, ostudy: optuna.Study, trial: optuna.Trial,
                 reference: UniversalCurve | None) -> None:
        super().__init__(ctx)
        self.ostudy = ostudy
        self.trial = trial
        self.reference = reference
        self.why = ""  # the latest verdict's sentence (the stop line says it)

    def run(self) -> None:
        """Train the trial to its end or its stop, reporting to the pruner and the residual
        monitor, and record its state, attrs and curve; a fault of the trial fails it (with its
        reason) and the study goes on. Ctrl-C marks it interrupted and goes on up."""
        prepared = self._prepare()
        if prepared is None:
            return
        cfg, rec, resumed_from = prepared
        monitor, watch = self._watchers(rec)
        if self.study.objective == "val":
            # the pruner sees the loss the study optimizes: evaluated at each report
            cfg = dataclasses.replace(cfg, eval_every=self._report_every(rec))
        if monitor is not None and resumed_from:
            _replay_into(monitor, Path(cfg.checkpoint), resumed_from)
        t0 = time.monotonic()
        result = self._train(cfg, watch)
        if result is None:
            return
        seconds = time.monotonic() - t0
        self._record(result, rec, monitor, seconds)
        self._end(result, rec, Path(cfg.checkpoint), seconds)

    def _report_every(self, rec: Recipe) -> int:
        """Steps between two reports of a trial: ``pruner.report_points`` per run."""
        return max(1, rec.total_steps // self.study.pruner["report_points"])

    def _prepare(self) -> tuple[TrainConfig, Recipe, int] | None:
        """``(TrainConfig, Recipe, step resumed from)`` of the trial, its checkpoint taken over
        from the trial it re-runs and its controls described; ``None`` (the trial told failed)
        when its settings are invalid."""
        trial = self.trial
        params = dict(trial.params)
        frozen = read_trial(self.ostudy, trial)
        try:
            cfg, rec = trial_setup(self.ctx, params, trial.number, run_id_of(frozen))
        except ValueError as exc:
            self.progress(f"trial {trial.number} {params_text(params)}: invalid ({exc})")
            self.ostudy.tell(trial, state=TrialState.FAIL)
            return None
        with contextlib.suppress(OSError):
            Path(cfg.checkpoint).unlink()  # a new trial never resumes someone else's state
        resumed_from = self._take_over_checkpoint(frozen, Path(cfg.checkpoint))
        describe_trial(trial, total_steps=rec.total_steps, tau=rec.tau, tpp=rec.tpp,
                       schedule=rec.schedule, warmup_steps=rec.warmup_steps,
                       n_params=rec.n_params, batch_tokens=rec.batch_tokens,
                       peak_lr=rec.hidden_lr, weight_decay=rec.hidden_weight_decay,
                       base_lr=rec.lr)
        self.progress(f"trial {trial.number} {params_text(params)}: {rec.total_steps} steps, "
                      f"tau {rec.tau:.3g}"
                      + (f", broken on purpose from t^ {cfg.fault.at:g} ({cfg.inject}, "
                         "diagnose.inject)" if cfg.inject else "")
                      + (f", continuing trial {frozen.user_attrs.get('rerun_of')} from step "
                         f"{resumed_from}" if resumed_from else ""))
        return cfg, rec, resumed_from

    def _take_over_checkpoint(self, frozen: FrozenTrial, ckpt: Path) -> int:
        """For a re-run of an interrupted trial: move the interrupted trial's checkpoint to
        ``ckpt`` and copy the values it reported up to the checkpoint's step into the trial.
        Returns that step (0: nothing to continue, the trial starts from scratch)."""
        import torch

        old = frozen.user_attrs.get("rerun_of")
        if not isinstance(old, int):
            return 0
        src = self.out / "trials" / f"{old}.ckpt"
        if not src.exists():
            return 0
        try:
            state = torch.load(src, map_location="cpu", weights_only=True)
            step = int(state["step"])
        except Exception as exc:  # an unreadable checkpoint: start over, say why
            self.progress(f"trial {self.trial.number}: checkpoint {src} unreadable ({exc}); "
                          "starting from step 0")
            return 0
        src.replace(ckpt)
        before = next((t for t in self.ostudy.get_trials(deepcopy=False) if t.number == old),
                      None)
        if before is not None:
            for s, v in sorted(before.intermediate_values.items()):
                if s <= step:
                    self.trial.report(v, s)
        self.trial.set_user_attr("resumed_from_step", step)
        return step

    def _watchers(self, rec: Recipe
                  ) -> tuple[ResidualCallback | None, Callable[[TrainPoint], bool]]:
        """``(residual monitor or None, the training callback)``: the callback reports the
        study's loss ``pruner.report_points`` times, asks the pruner, prints the verdict at each
        checkpoint and keeps the latest verdict's sentence in ``self.why``; the monitor (when
        the sweep has a reference curve) wraps it and alerts."""
        trial, ostudy = self.trial, self.ostudy
        total, every = rec.total_steps, self._report_every(rec)
        val = self.study.objective == "val"
        checkpoints = list(self.study.pruner["checkpoints"]) if self.prune else [0.25, 0.5, 0.75]
        shown: set[float] = set()

        def callback(point: TrainPoint) -> bool:
            if point.step % every and point.step != total:
                return False
            value = point.val_loss if val else point.train_loss
            if value is None:  # not an evaluation step (none when eval_every is every)
                return False
            trial.report(value, point.step)
            stop = self.prune and trial.should_prune()
            due = [c for c in checkpoints if point.t_hat >= c and c not in shown]
            if due or stop:
                shown.update(due)
                record = (latest_record(trial_records(read_trial(ostudy, trial)))
                          if self.prune else None)
                if record is not None:
                    self.why = record.explanation or record.reason
                self.progress(_progress_line(trial.number, point, record, stop, val))
            return bool(stop)

        stop_on_alert = bool(self.study.diagnose["stop_on_alert"])

        def on_alert(alert: dict[str, Any]) -> None:
            line = alert_sentence(f"trial {trial.number}", alert["t_hat"], alert["residual"],
                                  alert["threshold"], alert["kind"])
            trial.set_user_attr(RESIDUAL_ALERT_ATTR, alert)
            if stop_on_alert:
                self.why = f"stopped by the residual monitor ({line})"
            self.progress(f"  {line}" + ("; stopping it (diagnose.stop_on_alert)"
                                         if stop_on_alert else ""))

        monitor = residual_callback(self.reference, rec, f"trial {trial.number}",
                                    stop_on_alert, on_alert, then=callback)
        return monitor, monitor or callback

    def _train(self, cfg: TrainConfig, watch: Callable[[TrainPoint], bool]
               ) -> TrainResult | None:
        """Train ``cfg`` with ``watch``; ``None`` when training raised (the trial told failed
        with its reason). Ctrl-C marks it interrupted and goes on up."""
        from hpo.models.training import train  # the train extra

        trial = self.trial
        try:
            return train(cfg, watch)
        except KeyboardInterrupt:
            set_trial_system_attr(self.ostudy, trial, INTERRUPTED_ATTR, True)
            self.ostudy.tell(trial, state=TrialState.FAIL)
            raise
        except Exception as exc:  # a fault of this trial (CUDA out of memory, a bug in a
            # custom model, ...): the trial fails with its reason, the study goes on
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            log.debug("trial %d failed", trial.number, exc_info=True)
            trial.set_user_attr(FAIL_REASON_ATTR, reason)
            self.ostudy.tell(trial, state=TrialState.FAIL)
            self.progress(f"trial {trial.number} failed: {reason}")
            return None

    def _record(self, result: TrainResult, rec: Recipe, monitor: ResidualCallback | None,
                seconds: float) -> None:
        """The trial's curve file and its compute, status and residual attrs."""
        from hpo.models.training import write_curve  # the train extra

        number = self.trial.number
        rows = [{**r, "run_id": f"trial-{number}", "role": "trial", "trial": number}
                for r in result.rows]
        write_curve(rows, self.out / "trials" / f"{number}.csv.gz")
        attrs = {**cost_attrs(rec, result.steps, str(result.status), result.final_val_loss),
                 "seconds": seconds}
        if monitor is not None and monitor.max_abs_residual is not None:
            attrs[RESIDUAL_MAX_ATTR] = monitor.max_abs_residual
        for k, v in attrs.items():
            self.trial.set_user_attr(k, v)

    def _end(self, result: TrainResult, rec: Recipe, ckpt: Path, seconds: float) -> None:
        """Tell Optuna how the trial ended and say it: completed (with its objective; its
        checkpoint dropped), stopped, or failed."""
        ostudy, trial = self.ostudy, self.trial
        if result.status == RunStatus.COMPLETED:
            value = objective_value(result.rows, self.study.objective)
            ostudy.tell(trial, value)
            with contextlib.suppress(OSError):
                ckpt.unlink()
            best = ostudy.best_trial
            mark = " (best so far)" if best.number == trial.number else \
                f" (best: trial {best.number}, {best.value:.4f})"
            self.progress(f"trial {trial.number} completed: final loss {value:.4f}{mark}, "
                          f"{seconds:.0f} s")
        elif result.status == RunStatus.STOPPED:
            end_stopped(ostudy, trial, self.study.sampler["type"])
            self.progress(f"trial {trial.number} {self.why}; saved "
                          f"{100 * (1 - result.steps / rec.total_steps):.0f}% of its compute, "
                          f"{seconds:.0f} s")
        else:
            trial.set_user_attr(FAIL_REASON_ATTR, f"{result.status} after {result.steps} steps")
            ostudy.tell(trial, state=TrialState.FAIL)
            self.progress(f"trial {trial.number} {result.status} after {result.steps} steps")


def end_stopped(ostudy: optuna.Study, trial: optuna.Trial, sampler: str) -> None:
    """End a trial the pruner stopped: where the sampler learns from finals (``tpe``), with its
    predicted final (:func:`hpo.stop_with_prediction`, marked as predicted), else PRUNED."""
    if sampler == "tpe":
        try:
            ostudy.tell(trial, stop_with_prediction(trial))
            return
        except optuna.TrialPruned:
            pass
    ostudy.tell(trial, state=TrialState.PRUNED)


def _progress_line(number: int, point: TrainPoint, record: Record | None, stop: bool,
                  val: bool = False) -> str:
    """The line a trial prints at a checkpoint: its loss, and the verdict when it has one."""
    line = (f"  trial {number}  t^ {point.t_hat:.2f}  "
            + (f"val loss {point.val_loss:.4f}" if val else f"loss {point.train_loss:.4f}"))
    if record is None:
        return line
    est = record.estimate
    if math.isfinite(est.value):
        line += (f"  predicted final {est.value:.4f}, {100 * est.level:.0f}% "
                 f"interval [{est.lower:.4f}, {est.upper:.4f}]")
    line += "  -> STOP" if stop else "  -> keep"
    if record.explanation:
        line += f" ({record.explanation})"
    return line


def _replay_into(monitor: ResidualCallback, ckpt: Path, step: int) -> None:
    """Feed ``monitor`` the train points a resumed trial logged up to ``step`` (from its
    checkpoint), so that its residual is aligned as in an uninterrupted run."""
    import torch

    from hpo.models.training import TrainPoint

    rows = torch.load(ckpt, map_location="cpu", weights_only=True).get("rows", [])
    for r in rows:
        if r["split"] == "train" and r["step"] <= step:
            monitor.observe(TrainPoint(step=int(r["step"]), tokens=0, t_hat=0.0,
                                       lr=float(r["lr"]), train_loss=float(r["loss"])))
