"""Stage 3 of a study: the Optuna sweep with the collapse pruner, run in this process.

Each trial trains the target model with the trial's recipe, reports the loss the study optimizes
(its train loss, or with ``objective: val`` its val loss, then evaluated at each report)
``pruner.report_points`` times and stops when pruned; curves go to ``trials/<number>.csv.gz``.
Which process runs which trial is :mod:`hpo.study.claims`'s (a trial left ``RUNNING`` by a
killed process is marked failed and its parameters enqueued again); the new trial continues
from the interrupted one's last checkpoint (``trials/<number>.ckpt``), with the points reported
before it copied over, so the pruner sees the whole curve.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.pruners import BasePruner
from optuna.samplers import BaseSampler
from optuna.storages import BaseStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import event

from hpo.diagnose import alert_sentence
from hpo.models.status import RunStatus
from hpo.predictors import UniversalCurve, load_universal_curve
from hpo.pruning import (
    INTERVAL_ATTR,
    PREDICTION_ATTR,
    CollapsePruner,
    Record,
    describe_trial,
    latest_record,
    read_trial,
    set_trial_system_attr,
    stop_with_prediction,
    trial_records,
    trial_state,
)
from hpo.pruning import TrialState as HpoState
from hpo.study.claims import Claims
from hpo.study.plan import flops, recipe_of, train_config, trial_overrides
from hpo.study.pruner import pruner_kwargs, residual_callback
from hpo.study.samplers import AskTellGridSampler
from hpo.study.schema import JOURNAL_PREFIX, grid_values
from hpo.study.stage import RunContext, Stage
from hpo.study.trials import (
    FAIL_REASON_ATTR,
    INTERRUPTED_ATTR,
    RESIDUAL_ALERT_ATTR,
    RESIDUAL_MAX_ATTR,
    distribution,
    fmt_number,
    objective_value,
    params_text,
    run_id_of,
)

if TYPE_CHECKING:
    from hpo.diagnose import ResidualCallback
    from hpo.models.recipe import Recipe
    from hpo.models.training import TrainConfig, TrainPoint, TrainResult

log = logging.getLogger(__name__)


class _NoFallbackNotice(logging.Filter):
    """Drops Optuna's notice that a storage query failed and a slower one is tried: the retry
    either succeeds, or its error reaches the user as one line (a lost storage)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Caught an error from sqlalchemy")


def _quiet_rdb_fallback() -> None:
    """Install :class:`_NoFallbackNotice` on Optuna's RDB storage logger (once)."""
    logger = logging.getLogger("optuna.storages._rdb.storage")
    if not any(isinstance(f, _NoFallbackNotice) for f in logger.filters):
        logger.addFilter(_NoFallbackNotice())


#: how long a worker waits for another's SQLite transaction (seconds)
SQLITE_TIMEOUT = 30.0


def serialized_sqlite(url: str) -> Any:
    """An Optuna storage on the SQLite file of ``url`` whose transactions each take the write
    lock when they begin (``BEGIN IMMEDIATE``).

    Python's sqlite3 driver opens a transaction only at the first write, so a read-then-write
    (a worker's claim of a waiting trial, or of a dead worker's running one) runs its read
    outside it: two workers can both read "waiting" and both claim the trial, which then runs
    twice while a grid point is never run. Taken at the start, the lock makes each claim
    atomic, as a PostgreSQL row lock does."""
    storage = optuna.storages.RDBStorage(url, engine_kwargs={
        "connect_args": {"isolation_level": None, "timeout": SQLITE_TIMEOUT}})

    @event.listens_for(storage.engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return storage


class SweepStage(Stage):
    """The local Optuna sweep of a study run (its :class:`RunContext`), and what the Ray
    backend shares of it: the storage, the sampler, a trial's config."""

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.claims = Claims(self.study, self.progress)  # who runs which trial
        self._curve_path: Path | None = None  # the sweep's universal curve (run_sweep)
        self._reference: UniversalCurve | None = None  # ... loaded (reference_curve)

    # ------------------------------------------------------------------ the sweep
    def storage(self) -> BaseStorage:
        url = self.study.storage
        if url.startswith(("sqlite:///", JOURNAL_PREFIX)):
            path = Path(url.split(":///", 1)[1])
            path.parent.mkdir(parents=True, exist_ok=True)
            if url.startswith(JOURNAL_PREFIX):
                return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
        _quiet_rdb_fallback()
        if url.startswith("sqlite:"):
            return serialized_sqlite(url)
        return optuna.storages.RDBStorage(url)

    def make_sampler(self, n_existing: int) -> BaseSampler:
        s = self.study.sampler
        seed = s["seed"]
        kind = s["type"]
        if kind == "grid":
            grid = {n: grid_values(d) for n, d in self.study.search.items()}
            return AskTellGridSampler(grid, seed=seed)
        if kind == "qmc":
            return optuna.samplers.QMCSampler(seed=seed, warn_independent_sampling=False)
        # a resumed study must not replay the proposals of its first run
        seed = None if seed is None else seed + n_existing
        if kind == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        kwargs = {}
        if s["n_startup_trials"] is not None:
            kwargs["n_startup_trials"] = s["n_startup_trials"]
        return optuna.samplers.TPESampler(seed=seed, **kwargs)

    def make_pruner(self, curve_path: Path | None) -> BasePruner:
        if not self.prune or curve_path is None:
            return optuna.pruners.NopPruner()
        return CollapsePruner(reference=str(curve_path), **pruner_kwargs(self.study))

    def optuna_study(self, curve_path: Path | None = None,
                     n_existing: int | None = None) -> optuna.Study:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = self.storage()
        if n_existing is None:
            try:
                existing = optuna.load_study(study_name=self.study.name, storage=storage)
                n_existing = len(existing.trials)
            except KeyError:
                n_existing = 0
        return optuna.create_study(
            study_name=self.study.name, storage=storage, direction="minimize",
            sampler=self.make_sampler(n_existing), pruner=self.make_pruner(curve_path),
            load_if_exists=True,
        )

    def run_sweep(self, curve_path: Path | None, coordinator: bool = True) -> None:
        """Run trials in this process until the study has ``budget.trials`` finished ones.

        Any number of processes may run this on one storage (``hpo run --workers N``,
        ``hpo run --worker``): each asks the storage for the next trial, so a grid point or a
        re-run is claimed once; the budget counts completed, stopped and failed trials, so a
        trial that fails (a NaN loss, an exception) is not run again. With a sampler other
        than the grid, workers that ask at the same moment may start up to one trial each
        beyond the budget. A worker with nothing left to start waits for the running trials
        (and runs the ones of a worker that dies).
        """
        self._curve_path, self._reference = curve_path, None
        ostudy = self.optuna_study(curve_path)
        if coordinator:
            self.claims.requeue_interrupted(ostudy)
        budget = self.study.budget["trials"]
        wall = self.study.wall_time_s
        (self.out / "trials").mkdir(exist_ok=True)
        used, _, _ = self.claims.counts(ostudy.get_trials(deepcopy=False))
        if used and coordinator:
            self.progress(f"sweep: {used} finished trial(s) kept from earlier runs")
        self.progress(f"sweep: {budget} trials, sampler {self.study.sampler['type']}, "
                      f"{'collapse pruning at t^ ' + ', '.join(map(str, self.study.pruner['checkpoints'])) if self.prune else 'no pruning (full sweep)'}")  # noqa: E501
        grid_size = self.grid_size()
        if grid_size is not None and budget > grid_size:
            self.progress(f"sweep: the grid has {grid_size} points; running those")
            budget = grid_size
        if coordinator:
            self.claims.enqueue_grid(ostudy, budget)
        grid = self.study.sampler["type"] == "grid"
        dists = {n: distribution(d) for n, d in self.study.search.items()}
        waiting_said = False
        while True:
            trials = ostudy.get_trials(deepcopy=False)
            if self.claims.requeue_stale(ostudy, trials):
                continue  # their states changed: read the study again
            used, running, waiting = self.claims.counts(trials)
            if wall is not None and time.monotonic() - self.ctx.t0 > wall:
                self.progress(f"sweep: wall time {wall:.0f} s reached after {used} trials")
                break
            trial = None
            if waiting and grid:
                trial = self.claims.claim_waiting(ostudy, dists)  # None: another worker was faster
            elif waiting or (used + running < budget and not grid):
                trial = ostudy.ask(dists)
            elif running:
                if not waiting_said:
                    self.progress(f"sweep: waiting for {running} running trial(s)")
                    waiting_said = True
                time.sleep(min(self.study.heartbeat, 5.0))
                continue
            else:
                break
            if trial is None:
                continue
            waiting_said = False
            alive = self.claims.beat(ostudy, trial)
            try:
                self.run_trial(ostudy, trial)
            finally:
                alive.set()

    def grid_size(self) -> int | None:
        if self.study.sampler["type"] != "grid":
            return None
        return math.prod(len(set(map(repr, grid_values(d)))) for d in self.study.search.values())

    def trial_setup(self, params: dict[str, Any], number: int,
                    run_id: str | None = None) -> tuple[TrainConfig, Recipe]:
        """(TrainConfig, Recipe) of a trial; ``run_id`` (default ``trial-<number>``) is the
        identity its checkpoint is written and resumed under. Trial ``diagnose.inject_trial``
        gets the study's ``diagnose.inject`` fault."""
        recipe = trial_overrides(self.study, params)
        diagnose = self.study.diagnose
        inject = diagnose.get("inject") if number == diagnose.get("inject_trial", 0) else None
        cfg = train_config(self.study, width=self.study.model["width"],
                           depth=self.study.model["depth"], recipe=recipe,
                           run_id=run_id or f"trial-{number}", group=f"sweep-{self.study.name}",
                           checkpoint=self.out / "trials" / f"{number}.ckpt", inject=inject)
        return cfg, recipe_of(cfg, self.vocab_size())

    def run_trial(self, ostudy: optuna.Study, trial: optuna.Trial) -> None:
        """Train one claimed trial to its end or its stop, reporting to the pruner and the
        residual monitor, and record its state, attrs and curve; a fault of the trial fails it
        (with its reason) and the study goes on."""
        prepared = self._prepare_trial(ostudy, trial)
        if prepared is None:
            return
        cfg, rec, resumed_from = prepared
        decision: dict[str, str] = {}  # "why": the latest verdict's sentence
        monitor, watch = self._trial_watchers(ostudy, trial, rec, decision)
        if self.study.objective == "val":
            # the pruner sees the loss the study optimizes: evaluated at each report
            cfg = dataclasses.replace(cfg, eval_every=self._report_every(rec))
        if monitor is not None and resumed_from:
            self._replay_into(monitor, Path(cfg.checkpoint), resumed_from)
        t0 = time.monotonic()
        result = self._train_trial(ostudy, trial, cfg, watch)
        if result is None:
            return
        seconds = time.monotonic() - t0
        self._record_trial(ostudy, trial, result, rec, monitor, seconds)
        total = rec.total_steps
        if result.status == RunStatus.COMPLETED:
            self._complete_trial(ostudy, trial, result, Path(cfg.checkpoint), seconds)
        elif result.status == RunStatus.STOPPED:
            self._stop(ostudy, trial)
            why = decision.get("why", "")
            self.progress(f"trial {trial.number} {why}; saved "
                          f"{100 * (1 - result.steps / total):.0f}% of its compute, "
                          f"{seconds:.0f} s")
        else:
            trial.set_user_attr(FAIL_REASON_ATTR, f"{result.status} after {result.steps} steps")
            ostudy.tell(trial, state=TrialState.FAIL)
            self.progress(f"trial {trial.number} {result.status} after {result.steps} steps")

    def _report_every(self, rec: Recipe) -> int:
        """Steps between two reports of a trial: ``pruner.report_points`` per run."""
        return max(1, rec.total_steps // self.study.pruner["report_points"])

    def _prepare_trial(self, ostudy: optuna.Study, trial: optuna.Trial
                       ) -> tuple[TrainConfig, Recipe, int] | None:
        """``(TrainConfig, Recipe, step resumed from)`` of a claimed trial, its checkpoint taken
        over from the trial it re-runs and its controls described; ``None`` (the trial told
        failed) when its settings are invalid."""
        params = dict(trial.params)
        frozen = read_trial(ostudy, trial)
        try:
            cfg, rec = self.trial_setup(params, trial.number, run_id_of(frozen))
        except ValueError as exc:
            self.progress(f"trial {trial.number} {params_text(params)}: invalid ({exc})")
            ostudy.tell(trial, state=TrialState.FAIL)
            return None
        with contextlib.suppress(OSError):
            Path(cfg.checkpoint).unlink()  # a new trial never resumes someone else's state
        resumed_from = self.take_over_checkpoint(ostudy, trial, frozen, Path(cfg.checkpoint))
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

    def _trial_watchers(self, ostudy: optuna.Study, trial: optuna.Trial, rec: Recipe,
                        decision: dict[str, str]
                        ) -> tuple[ResidualCallback | None, Callable[[TrainPoint], bool]]:
        """``(residual monitor or None, the training callback)``: the callback reports the
        study's loss ``pruner.report_points`` times, asks the pruner, prints the verdict at each
        checkpoint and keeps the latest verdict's sentence in ``decision["why"]``; the monitor
        (when the sweep has a reference curve) wraps it and alerts."""
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
                    decision["why"] = record.explanation or record.reason
                self.progress(self._progress_line(trial.number, point, record, stop, val))
            return bool(stop)

        stop_on_alert = bool(self.study.diagnose["stop_on_alert"])

        def on_alert(alert: dict[str, Any]) -> None:
            line = alert_sentence(f"trial {trial.number}", alert["t_hat"], alert["residual"],
                                  alert["threshold"], alert["kind"])
            trial.set_user_attr(RESIDUAL_ALERT_ATTR, alert)
            if stop_on_alert:
                decision["why"] = f"stopped by the residual monitor ({line})"
            self.progress(f"  {line}" + ("; stopping it (diagnose.stop_on_alert)"
                                         if stop_on_alert else ""))

        monitor = residual_callback(self.reference_curve(), rec, f"trial {trial.number}",
                                    stop_on_alert, on_alert, then=callback)
        return monitor, monitor or callback

    def _train_trial(self, ostudy: optuna.Study, trial: optuna.Trial, cfg: TrainConfig,
                     watch: Callable[[TrainPoint], bool]) -> TrainResult | None:
        """Train the trial's config with ``watch``; ``None`` when training raised (the trial
        told failed with its reason). Ctrl-C marks it interrupted and goes on up."""
        from hpo.models.training import train

        try:
            return train(cfg, watch)
        except KeyboardInterrupt:
            set_trial_system_attr(ostudy, trial, INTERRUPTED_ATTR, True)
            ostudy.tell(trial, state=TrialState.FAIL)
            raise
        except Exception as exc:  # a fault of this trial (CUDA out of memory, a bug in a
            # custom model, ...): the trial fails with its reason, the study goes on
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            log.debug("trial %d failed", trial.number, exc_info=True)
            trial.set_user_attr(FAIL_REASON_ATTR, reason)
            ostudy.tell(trial, state=TrialState.FAIL)
            self.progress(f"trial {trial.number} failed: {reason}")
            return None

    def _record_trial(self, ostudy: optuna.Study, trial: optuna.Trial, result: TrainResult,
                      rec: Recipe, monitor: ResidualCallback | None,
                      seconds: float) -> None:
        """The trial's curve file and its compute, status and residual attrs."""
        from hpo.models.training import write_curve

        rows = [{**r, "run_id": f"trial-{trial.number}", "role": "trial", "trial": trial.number}
                for r in result.rows]
        write_curve(rows, self.out / "trials" / f"{trial.number}.csv.gz")
        tokens = result.steps * rec.batch_tokens
        attrs = {"n_params": rec.n_params, "total_steps": rec.total_steps,
                 "steps_done": result.steps, "tokens": tokens, "full_tokens": rec.tokens,
                 "flops": flops(rec.n_params, tokens),
                 "full_flops": flops(rec.n_params, rec.tokens), "status": result.status,
                 "seconds": seconds, "tau": rec.tau, "weight_decay": rec.weight_decay,
                 "final_val_loss": result.final_val_loss}
        if monitor is not None and monitor.max_abs_residual is not None:
            attrs[RESIDUAL_MAX_ATTR] = monitor.max_abs_residual
        for k, v in attrs.items():
            trial.set_user_attr(k, v)

    def _complete_trial(self, ostudy: optuna.Study, trial: optuna.Trial, result: TrainResult,
                        ckpt: Path, seconds: float) -> None:
        """Tell a trial that trained to its end with its objective; drop its checkpoint."""
        value = objective_value(result.rows, self.study.objective)
        ostudy.tell(trial, value)
        with contextlib.suppress(OSError):
            ckpt.unlink()
        best = ostudy.best_trial
        mark = " (best so far)" if best.number == trial.number else \
            f" (best: trial {best.number}, {best.value:.4f})"
        self.progress(f"trial {trial.number} completed: final loss {value:.4f}{mark}, "
                      f"{seconds:.0f} s")

    def reference_curve(self) -> UniversalCurve | None:
        """The universal curve of this sweep (``None`` without one), loaded once."""
        path = self._curve_path
        if path is None:
            return None
        if self._reference is None:
            self._reference = load_universal_curve(path)
        return self._reference

    @staticmethod
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

    def take_over_checkpoint(self, ostudy: optuna.Study, trial: optuna.Trial,
                             frozen: FrozenTrial, ckpt: Path) -> int:
        """For a re-run of an interrupted trial: move the interrupted trial's checkpoint to
        ``ckpt`` and copy the values it reported up to the checkpoint's step into ``trial``.
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
            self.progress(f"trial {trial.number}: checkpoint {src} unreadable ({exc}); "
                          "starting from step 0")
            return 0
        src.replace(ckpt)
        before = next((t for t in ostudy.get_trials(deepcopy=False) if t.number == old), None)
        if before is not None:
            for s, v in sorted(before.intermediate_values.items()):
                if s <= step:
                    trial.report(v, s)
        trial.set_user_attr("resumed_from_step", step)
        return step

    @staticmethod
    def _progress_line(number: int, point: TrainPoint, record: Record | None, stop: bool,
                       val: bool = False) -> str:
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

    # ------------------------------------------------------------------ verification
    def _stop(self, ostudy: optuna.Study, trial: optuna.Trial) -> None:
        """End a trial the pruner stopped: where the sampler learns from finals (TPE), with its
        predicted final (:func:`hpo.stop_with_prediction`, marked as predicted), else PRUNED."""
        if self.study.sampler["type"] == "tpe":
            try:
                ostudy.tell(trial, stop_with_prediction(trial))
                return
            except optuna.TrialPruned:
                pass
        ostudy.tell(trial, state=TrialState.PRUNED)

    def verify_stopped(self) -> None:
        """Train each stopped trial to its end from its checkpoint; record the actual final."""
        from hpo.models.training import train, write_curve

        path = self.out / "verify.json"
        done = json.loads(path.read_text()) if path.exists() else {}
        ostudy = self.optuna_study()
        stopped = [t for t in ostudy.get_trials(deepcopy=False)
                   if trial_state(t) == HpoState.STOPPED]
        todo = [t for t in stopped if str(t.number) not in done]
        if todo:
            self.progress(f"verify: training {len(todo)} stopped trial(s) to the end")
        for t in todo:
            cfg, rec = self.trial_setup(dict(t.params), t.number, run_id_of(t))
            t0 = time.monotonic()
            result = train(cfg)
            rows = [{**r, "run_id": f"trial-{t.number}-verify", "role": "verify",
                     "trial": t.number} for r in result.rows]
            write_curve(rows, self.out / "trials" / f"{t.number}-verify.csv.gz")
            actual = objective_value(result.rows, self.study.objective)
            pred = t.user_attrs.get(PREDICTION_ATTR)
            interval = t.user_attrs.get(INTERVAL_ATTR)
            done[str(t.number)] = {
                "trial": t.number, "params": dict(t.params), "actual": actual,
                "predicted": pred, "interval": interval,
                "stopped_at": t.user_attrs.get("steps_done", 0) / rec.total_steps,
                "inside_interval": None if interval is None else bool(
                    interval[0] <= actual <= interval[1]),
                "extra_flops": flops(rec.n_params, rec.tokens - t.user_attrs.get("tokens", 0)),
            }
            path.write_text(json.dumps(done, indent=1))
            with contextlib.suppress(OSError):
                Path(cfg.checkpoint).unlink()
            self.progress(f"  verify trial {t.number}: actual {actual:.4f}, predicted "
                          f"{fmt_number(pred)} {interval and [round(x, 4) for x in interval]}, "
                          f"{time.monotonic() - t0:.0f} s")
