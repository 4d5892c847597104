"""``backend: ray``: the study's proxies as Ray tasks and its sweep as Ray Tune trials, and
``hpo submit`` (the study as a Ray job).

The sweep: ``tune.Tuner`` with Ray's ``OptunaSearch`` (the study's sampler) and
:class:`hpo.CollapseScheduler` (the same decision as the Optuna pruner, on the universal curve),
both on the loss the study optimizes (:data:`METRIC`: ``loss``, or ``val_loss`` for ``objective:
val``), each verdict's sentence in the trial's results, ``num_samples = budget.trials``, each trial
with ``ray.cpus_per_trial`` CPUs and ``ray.gpus_per_trial`` GPUs. The experiment lives in
``<output>/ray/<name>``; running the study again restores it (finished trials kept; unfinished and
errored ones continue from their last training checkpoint, which each trial writes about ten times
per run to ``<output>/ray/<name>/checkpoints/<trial id>.pt``; the scheduler's state read back).
Each finished trial is then recorded in the study's Optuna storage (``study.db``) with its reported
curve, so the summary and report read the same place as with ``backend: local``.

Imports ray; loaded only for ``backend: ray`` and ``hpo submit``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpo._extras import require

require("ray", "ray")
import optuna  # noqa: E402 - after the one-line message for a missing extra
import ray  # noqa: E402
from optuna.trial import TrialState, create_trial  # noqa: E402
from ray import tune  # noqa: E402
from ray.job_submission import JobStatus, JobSubmissionClient  # noqa: E402
from ray.tune import Callback  # noqa: E402
from ray.tune.schedulers import FIFOScheduler  # noqa: E402
from ray.tune.search.optuna import OptunaSearch  # noqa: E402

from hpo._errors import UsageError  # noqa: E402
from hpo._net import check_address  # noqa: E402
from hpo.diagnose import alert_sentence  # noqa: E402
from hpo.models.status import RunStatus  # noqa: E402
from hpo.predictors import load_universal_curve  # noqa: E402
from hpo.pruning import REASON_KEY, STATE_FILE, CollapseScheduler, record_attrs  # noqa: E402
from hpo.study.plan import controls_of, cost_attrs, recipe_of, trial_setup, with_params  # noqa: E402
from hpo.study.pruner import pruner_kwargs, residual_callback  # noqa: E402
from hpo.study.stage import set_threads  # noqa: E402
from hpo.study.trials import (  # noqa: E402
    RESIDUAL_ALERT_ATTR,
    RESIDUAL_MAX_ATTR,
    distribution,
    objective_value,
)

if TYPE_CHECKING:
    from hpo.study.schema import Study
    from hpo.study.sweep import SweepStage

__all__ = ["RayBackend", "init", "train_many", "run_sweep_ray", "submit_study"]

_RAY_TRIAL_ATTR = "ray_trial_id"
#: the result key of the loss each objective optimizes: what the scheduler and the searcher see
METRIC = {"train": "loss", "val": "val_loss"}


def init(address: str | None, where: str = "--address") -> None:
    """Connect to the cluster at ``address`` (``ray://HOST:10001``, ``HOST:6379``, ``auto``), or
    inside a Ray job to its cluster, or start a local Ray.

    A network address is tried first with one TCP connection (``ray.init`` would retry one where
    nothing listens for minutes): :class:`~hpo._errors.UsageError` naming ``where`` and the
    value when nothing answers."""
    # the result loggers write the per-trial history that record_results reads back (Tune
    # reads this when a sweep starts, so also where Ray was started before)
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "0"
    if ray.is_initialized():
        return
    check_address(address, where)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    kwargs: dict[str, Any] = {"logging_level": "WARNING", "log_to_driver": True}
    if address:
        ray.init(address=address, **kwargs)
    else:
        ray.init(**kwargs)


def _train_rows(cfg_kwargs: dict[str, Any], threads: int | None) -> dict[str, Any]:
    """Run on a worker: train one config, return its rows and a few numbers."""
    from hpo.models.training import TrainConfig, train

    if threads:
        import torch

        torch.set_num_threads(threads)
    result = train(TrainConfig(**cfg_kwargs))
    return {"rows": result.rows, "status": result.status, "steps": result.steps,
            "n_params": result.n_params, "final_train_loss": result.final_train_loss}


def train_many(cfgs: list[Any], study: Study) -> list[dict[str, Any]]:
    """Train configs as Ray tasks (``ray.cpus_per_trial`` CPUs, ``ray.gpus_per_trial`` GPUs
    each); results in order."""
    remote = ray.remote(num_cpus=study.ray["cpus_per_trial"],
                        num_gpus=study.ray["gpus_per_trial"])(_train_rows)
    refs = []
    for cfg in cfgs:
        kwargs = dataclasses.asdict(cfg)
        kwargs.update(checkpoint=None, resume=False, out=None)  # worker-local: no files
        refs.append(remote.remote(kwargs, study.threads))
    return ray.get(refs)


def train_proxies(study: Study, jobs: list[tuple[Any, Path, Path]], workers: int
                  ) -> Iterator[dict[str, Any]]:
    """The Ray backend's proxy trainer (:data:`hpo.study.proxies.ProxyTrainer`): every job as a
    Ray task (:func:`train_many`), each curve written here as its rows come back; ``workers``
    is not used (the cluster's resources decide)."""
    from hpo.models.training import write_curve

    t0 = time.monotonic()
    outs = train_many([cfg for cfg, _, _ in jobs], study)
    for (_, path, _), res in zip(jobs, outs, strict=True):
        write_curve([{**r, "role": "proxy", "trial": ""} for r in res["rows"]], path)
        yield {**res, "seconds": time.monotonic() - t0}


class RayBackend:
    """``backend: ray`` (:class:`hpo.study.local.Backend`): ``start`` joins the cluster at
    ``address`` (or starts a local Ray; :func:`init`), the proxies train as Ray tasks
    (:func:`train_proxies`), the trials as Ray Tune trials (:func:`run_sweep_ray`)."""

    def __init__(self, study: Study, progress: Callable[[str], None], *, workers: int = 1,
                 address: str | None = None, address_from: str = "ray.address") -> None:
        self.study = study
        self.progress = progress
        self.workers = workers
        self.address = address
        self.address_from = address_from

    def start(self) -> None:
        if self.workers > 1:
            self.progress(f"workers: {self.workers}: the proxies train {self.workers} at a "
                          "time on this machine; the Ray cluster runs the trials "
                          "(ray.max_concurrent caps them)")
        set_threads(self.study)
        init(self.address, self.address_from)

    def train_proxies(self, study: Study, jobs: list[tuple[Any, Path, Path]],
                      workers: int) -> Iterator[dict[str, Any]]:
        return train_proxies(study, jobs, workers)

    def run_sweep(self, sweep: SweepStage, curve_path: Path | None) -> None:
        run_sweep_ray(sweep, curve_path)


def _checkpoint_step(path: Any) -> int:
    """The step a training checkpoint file was written at (0 when there is none); the file is
    memory-mapped, so its tensors are not read (``train`` reads them when it resumes)."""
    if not path.exists():
        return 0
    import torch

    return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["step"])


def _trainable(config: dict[str, Any], base: dict[str, Any], report_points: int,
               objective: str, threads: int | None, checkpoint_dir: str,
               reference: dict[str, Any] | None = None, vocab_size: int = 256,
               stop_on_alert: bool = False) -> None:
    """A Ray Tune function trainable: train the trial's config, report ``report_points`` times
    its train loss (``loss``) and its latest val loss (``val_loss``); with ``objective`` val the
    val loss is evaluated at each report, so that the scheduler, reading ``val_loss``, sees the
    loss the study optimizes at every report.

    With a ``reference`` curve (its dict) every point goes through the collapse residual
    monitor; the reports carry the smoothed ``residual`` and, once it alerted,
    ``residual_alert_t``, and with ``stop_on_alert`` the alert ends the trial.

    The training checkpoint (``hpo.models.training``, about ten per run, each written whole
    before it replaces the last) is ``checkpoint_dir/<trial id>.pt``, in the experiment's folder,
    which every node reaches as it reaches Tune's storage; a trial that Ray starts again (a
    restored experiment, a retried failure) continues from it. Its reports after the checkpoint's
    step come again, and :class:`hpo.CollapseScheduler` keeps the points before them. The file
    is not a Tune checkpoint: Tune deletes a trial's older checkpoints as it registers a new one,
    so an experiment state saved before a driver died can name one that is gone.
    """
    from hpo.models.training import train

    if threads:
        import torch

        torch.set_num_threads(threads)
    trial_id = tune.get_context().get_trial_id()
    ckpt = Path(checkpoint_dir) / f"{trial_id}.pt"
    cfg = _trial_config(config, base, ckpt, objective, report_points, vocab_size)
    reports = _Reports(report_points, start=_checkpoint_step(ckpt))
    if reference is not None:
        reports.monitor = _residual_monitor(reference, recipe_of(cfg, vocab_size),
                                            f"trial {trial_id}", stop_on_alert, reports)
    result = train(cfg, reports.monitor or reports)
    last = reports.final(result)
    if last is not None:
        last["objective"] = objective_value(result.rows, objective)
        tune.report(last)


def _trial_config(config: dict[str, Any], base: dict[str, Any], ckpt: Path, objective: str,
                  report_points: int, vocab_size: int) -> Any:
    """The trial's :class:`~hpo.models.training.TrainConfig`: ``base`` with the trial's sampled
    values (a sampled ``tau`` frees ``weight_decay`` and the other way round), resuming from
    ``ckpt``, and with ``objective`` val a val loss at every report."""
    from hpo.models.training import TrainConfig

    kwargs = with_params(base, {k: v for k, v in config.items() if k in base})
    cfg = TrainConfig(**{**kwargs, "checkpoint": str(ckpt), "resume": True})
    if objective == "val":
        every = max(1, recipe_of(cfg, vocab_size).total_steps // report_points)
        cfg = dataclasses.replace(cfg, eval_every=every)
    return cfg


def _residual_monitor(reference: dict[str, Any], recipe: Any, name: str, stop_on_alert: bool,
                      reports: _Reports) -> Any:
    """The collapse residual monitor on the ``reference`` curve, printing its alert and passing
    every point on to ``reports``."""
    def on_alert(alert: dict[str, Any]) -> None:
        print("  " + alert_sentence(name, alert["t_hat"], alert["residual"],
                                    alert["threshold"], alert["kind"])
              + ("; stopping it (diagnose.stop_on_alert)" if stop_on_alert else ""),
              flush=True)

    return residual_callback(load_universal_curve(reference), recipe, name, stop_on_alert,
                             on_alert, then=reports)


class _Reports:
    """The training callback of a Ray trial: ``report_points`` reports to Tune over the run
    (the loss, the latest val loss and, with a :attr:`monitor`, its residual and alert); the
    run's last point is kept for :meth:`final` rather than reported."""
    def __init__(self, report_points: int, start: int) -> None:
        self.report_points = report_points
        self.start = start  # the training checkpoint's step the run resumed from (0: none)
        self.monitor: Any = None
        self.val = math.nan
        self.last: dict[str, Any] | None = None

    def __call__(self, point: Any) -> bool:
        total = round(point.step / point.t_hat)
        every = max(1, total // self.report_points)
        if point.val_loss is not None:
            self.val = point.val_loss
        # the point where the monitor stops the trial is reported too
        m = self.monitor
        stop = m is not None and m.stop_on_alert and m.alert is not None
        if point.step % every == 0 or point.step == total or stop:
            metrics = {"loss": point.train_loss, "step": point.step, "t_hat": point.t_hat,
                       "lr": point.lr, "val_loss": self.val}
            if m is not None:
                metrics.update(self._residual_metrics())
            if point.step != total:
                tune.report(metrics)
            else:
                self.last = metrics
        return False  # the monitor, which calls this, stops the trial on its alert

    def _residual_metrics(self) -> dict[str, float]:
        """The monitor's smoothed residual and, once it alerted, the alert's t^, its own
        statistic (the level or the jump), its band and which."""
        residual = self.monitor.monitor.state.residual
        alert = self.monitor.alert or {}
        return {"residual": math.nan if residual is None else residual,
                "residual_alert_t": alert.get("t_hat", math.nan),
                "residual_alert_value": alert.get("residual", math.nan),
                "residual_alert_band": alert.get("threshold", math.nan),
                "residual_alert_jump": math.nan if not alert else float(alert["kind"] == "jump"),
                "residual_threshold": self.monitor.monitor.threshold}

    def final(self, result: Any) -> dict[str, Any] | None:
        """The last report of the finished ``result`` (without its objective), or None for a
        run that did not reach its end."""
        last = self.last
        if last is None and result.status == RunStatus.COMPLETED and \
                result.steps >= result.recipe.total_steps:
            # resumed from a checkpoint of its last step (the run had ended when its driver was
            # killed, before Tune kept its final result): that point is reported now
            tail = [r for r in result.rows if r["split"] == "train"]
            last = {"loss": result.final_train_loss, "step": result.steps, "t_hat": 1.0,
                    "lr": tail[-1]["lr"] if tail else 0.0,
                    "val_loss": math.nan if result.final_val_loss is None
                    else result.final_val_loss}
        if last is not None:
            last["final_val_loss"] = result.final_val_loss
            last["resumed_from_step"] = self.start
        return last


class _Progress(Callback):
    """A Tune callback printing one line per trial at its checkpoints and at its end."""
    def __init__(self, checkpoints: list[float]) -> None:
        self.checkpoints = list(checkpoints)
        self.shown: dict[str, set[float]] = {}

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        t = float(result.get("t_hat", 0.0))
        seen = self.shown.setdefault(trial.trial_id, set())
        due = [c for c in self.checkpoints if t >= c and c not in seen]
        if due:
            seen.update(due)
            print(f"  trial {trial.trial_id}  t^ {t:.2f}  loss {result['loss']:.4f}  "
                  f"{_short(trial.config)}", flush=True)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        print(f"trial {trial.trial_id}: its run was lost (a dead node or worker, or an error; "
              f"failure {trial.num_failures}); Ray Tune runs it again from its last training "
              "checkpoint", flush=True)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        r = trial.last_result or {}
        state = "completed" if "objective" in r else f"stopped at t^ {r.get('t_hat', 0):.2f}"
        value = r.get("objective", r.get("loss", math.nan))
        why = f"; {r[REASON_KEY]}" if state != "completed" and r.get(REASON_KEY) else ""
        print(f"trial {trial.trial_id} {state}: loss {value:.4f}  {_short(trial.config)}{why}",
              flush=True)


def _short(config: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in sorted(config.items())) + "}"


def run_sweep_ray(sweep: SweepStage, curve_path: Path | None) -> None:
    """The sweep of a study run (``sweep``, its :class:`~hpo.study.sweep.SweepStage`; Ray
    initialized) as Ray Tune trials; every finished trial recorded in the Optuna storage."""
    study = sweep.study
    storage_path = (sweep.out / "ray").resolve()
    exp_dir = storage_path / study.name
    scheduler, callbacks = _scheduler(sweep, curve_path)
    trainable = _make_trainable(sweep, curve_path, exp_dir)
    t0 = time.monotonic()
    if tune.Tuner.can_restore(str(exp_dir)):
        sweep.progress(f"sweep (ray): restoring the experiment in {exp_dir}")
        tuner = tune.Tuner.restore(str(exp_dir), trainable=trainable, resume_unfinished=True,
                                   restart_errored=True)
    else:
        tuner = _new_tuner(sweep, trainable, scheduler, callbacks, storage_path)
    with warnings.catch_warnings():
        # a trial Ray runs again reports its steps before the checkpoint again; the searcher's
        # Optuna study keeps the first report of each (the same values), and says so per step
        warnings.filterwarnings("ignore", message="The reported value is ignored because")
        results = tuner.fit()
    sweep.progress(f"sweep (ray): {len(results)} trials in {time.monotonic() - t0:.0f} s")
    # the scheduler that ran (a restored experiment's own), else (Ray Client) its saved state
    live = CollapseScheduler.of(tuner)
    if live is None and (exp_dir / STATE_FILE).exists():
        live = CollapseScheduler()
        live.restore(str(exp_dir / STATE_FILE))
    record_results(sweep, results, exp_dir, live)


def _scheduler(sweep: SweepStage, curve_path: Path | None) -> tuple[Any, list[Callback]]:
    """The sweep's Tune scheduler and the callbacks it needs: :class:`hpo.CollapseScheduler`
    on ``curve_path`` with the study's pruner settings, or FIFO (no pruning, or no curve)."""
    study = sweep.study
    if not (sweep.prune and curve_path is not None):
        return FIFOScheduler(), []

    def controls(config: dict[str, Any]) -> dict[str, Any]:
        params = {k: v for k, v in config.items() if k in study.search}
        _, rec = trial_setup(sweep.ctx, params, 0)
        return controls_of(rec)

    scheduler = CollapseScheduler(reference=str(curve_path), time_attr="step",
                                  controls=controls, **pruner_kwargs(study))
    return scheduler, [scheduler.callback()]  # before _Progress, which prints the sentence


def _make_trainable(sweep: SweepStage, curve_path: Path | None, exp_dir: Path) -> Any:
    """:func:`_trainable` bound to the study's base config, reports, objective and curve, with
    the study's resources per trial."""
    study = sweep.study
    base_cfg, _ = trial_setup(sweep.ctx, {}, 0)
    base = dataclasses.asdict(base_cfg)
    base.update(checkpoint=None, resume=False, out=None, run_id=None, inject=None)
    reference = None
    if curve_path is not None:
        reference = load_universal_curve(curve_path).to_dict()
    return tune.with_resources(
        tune.with_parameters(_trainable, base=base, report_points=study.pruner["report_points"],
                             objective=study.objective, threads=study.threads,
                             checkpoint_dir=str(exp_dir / "checkpoints"), reference=reference,
                             vocab_size=sweep.vocab_size(),
                             stop_on_alert=bool(study.diagnose["stop_on_alert"])),
        {"cpu": study.ray["cpus_per_trial"], "gpu": study.ray["gpus_per_trial"]})


def _new_tuner(sweep: SweepStage, trainable: Any, scheduler: Any, callbacks: list[Callback],
               storage_path: Path) -> Any:
    """A new ``tune.Tuner`` of the study's sweep: Optuna's sampler as the searcher,
    ``budget.trials`` samples (at most the grid's size), the study's concurrency, wall time and
    failure limits, the progress lines after ``callbacks``."""
    study = sweep.study
    budget = study.budget["trials"]
    grid = sweep.grid_size()
    if grid is not None:
        budget = min(budget, grid)
    sweep.progress(f"sweep (ray): {budget} trials, sampler {study.sampler['type']}, "
                   f"{'collapse pruning' if sweep.prune else 'no pruning'}, "
                   f"{study.ray['cpus_per_trial']:g} CPU / "
                   f"{study.ray['gpus_per_trial']:g} GPU per trial")
    metric = METRIC[study.objective]
    space = {n: distribution(d) for n, d in study.search.items()}
    search = OptunaSearch(space=space, metric=metric, mode="min", sampler=sweep.make_sampler(0))
    if hasattr(scheduler, "searcher") and study.sampler["type"] == "tpe":
        # a CollapseScheduler: TPE learns a stopped trial's predicted final, not its early loss
        search = scheduler.searcher(search)
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            metric=metric, mode="min", search_alg=search, scheduler=scheduler,
            num_samples=budget, max_concurrent_trials=study.ray["max_concurrent"],
            time_budget_s=study.wall_time_s),
        run_config=tune.RunConfig(
            storage_path=str(storage_path), name=study.name, verbose=0,
            callbacks=[*callbacks, _Progress(list(study.pruner["checkpoints"]))],
            failure_config=tune.FailureConfig(max_failures=study.ray["max_failures"])),
    )


def record_results(sweep: SweepStage, results: Any, exp_dir: Path, scheduler: Any = None) -> None:
    """Add every finished Tune trial (not yet recorded) to the study's Optuna storage, with the
    loss it reported to the scheduler (the study's objective, :data:`METRIC`) as intermediate
    values, its latest verdict (``record_attrs`` of ``scheduler.latest_record``, none without
    a ``scheduler``) and its curve file in ``trials/``."""
    from hpo.models.training import write_curve

    study = sweep.study
    metric = METRIC[study.objective]
    ostudy = sweep.optuna_study(None, n_existing=0)
    done = {t.user_attrs.get(_RAY_TRIAL_ATTR) for t in ostudy.get_trials(deepcopy=False)}
    dists = {n: distribution(d) for n, d in study.search.items()}
    (sweep.out / "trials").mkdir(exist_ok=True)
    for result in results:
        df = result.metrics_dataframe
        trial_id = (result.metrics or {}).get("trial_id")
        if trial_id is None or trial_id in done or df is None or df.empty:
            continue
        params = {k: v for k, v in result.config.items() if k in study.search}
        _, rec = trial_setup(sweep.ctx, params, 0)
        last = result.metrics
        complete = result.error is None and "objective" in last
        state = (TrialState.COMPLETE if complete else TrialState.FAIL if result.error is not None
                 else TrialState.PRUNED)
        attrs = _trial_attrs(trial_id, rec, last, df, state)
        system: dict[str, Any] = {}
        verdict = scheduler.latest_record(trial_id) if scheduler is not None else None
        if verdict is not None:
            system, user = record_attrs(verdict)
            attrs.update(user)
        seen = [float(v) for v in df[metric]]  # what the scheduler judged
        inter = {int(s): v for s, v in zip(df["step"], seen, strict=True) if math.isfinite(v)}
        frozen = create_trial(
            params=params, distributions={k: dists[k] for k in params},
            value=float(last["objective"]) if complete else None, state=state,
            intermediate_values=inter, user_attrs=attrs, system_attrs=system)
        with _quiet_optuna(optuna):
            ostudy.add_trial(frozen)
        number = len(ostudy.get_trials(deepcopy=False)) - 1
        write_curve(_curve_rows(df, rec, number, study.name),
                    sweep.out / "trials" / f"{number}.csv.gz")
        done.add(trial_id)


def _trial_attrs(trial_id: str, rec: Any, last: dict[str, Any], df: Any,
                 state: Any) -> dict[str, Any]:
    """A recorded Tune trial's user attrs: its id, size, progress and cost (``rec``, its recipe;
    ``df``, its reports), its status, final val loss, resumed step and residual alert."""
    status = {TrialState.COMPLETE: str(RunStatus.COMPLETED),
              TrialState.PRUNED: str(RunStatus.STOPPED)}.get(state, "failed")
    attrs = {_RAY_TRIAL_ATTR: trial_id,
             **cost_attrs(rec, int(df["step"].iloc[-1]), status, last.get("final_val_loss"))}
    if last.get("resumed_from_step"):  # Ray ran it again from a training checkpoint
        attrs["resumed_from_step"] = int(last["resumed_from_step"])
    if "residual_alert_t" in df.columns:
        alerted = df[df["residual_alert_t"].notna()]
        if not alerted.empty:
            first = alerted.iloc[0]
            attrs[RESIDUAL_ALERT_ATTR] = {
                "t_hat": float(first["residual_alert_t"]),
                "residual": float(first["residual_alert_value"]),
                "threshold": float(first["residual_alert_band"]),
                "kind": "jump" if first["residual_alert_jump"] == 1.0 else "level"}
        residuals = df["residual"].abs().dropna()
        if not residuals.empty:
            attrs[RESIDUAL_MAX_ATTR] = float(residuals.max())
    return attrs


def _curve_rows(df: Any, rec: Any, number: int, study_name: str) -> list[dict[str, Any]]:
    """The curve file rows of sweep trial ``number`` from its Tune reports ``df``: the train
    loss at every report, the val loss where one was evaluated."""
    const = {"run_id": f"trial-{number}", "group": f"sweep-{study_name}",
             "n_params": rec.n_params, "tokens": rec.tokens,
             "total_steps": rec.total_steps, "batch_tokens": rec.batch_tokens,
             "peak_lr": rec.hidden_lr, "weight_decay": rec.hidden_weight_decay,
             "schedule": rec.schedule, "warmup_steps": rec.warmup_steps,
             "role": "trial", "trial": number}
    rows = [{**const, "step": int(s), "lr": float(lr), "loss": float(v), "split": "train"}
            for s, v, lr in zip(df["step"], df["loss"], df["lr"], strict=True)]
    rows += [{**const, "step": int(s), "lr": float(lr), "loss": float(v), "split": "val"}
             for s, v, lr in zip(df["step"], df["val_loss"], df["lr"], strict=True)
             if math.isfinite(float(v))]
    rows.sort(key=lambda r: (r["step"], r["split"] == "val"))
    return rows


class _quiet_optuna:  # noqa: N801 - a context manager
    def __init__(self, optuna: Any) -> None:
        self.optuna = optuna

    def __enter__(self) -> None:
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc: object) -> None:
        self._w.__exit__(*exc)


def submit_study(study: Study, study_path: str, address: str, *, working_dir: str = ".",
                 wait: bool = True, timeout: float | None = None,
                 output: str | None = None, python: str = "python",
                 where: str = "--address") -> int:
    """Submit ``hpo run STUDY`` as a Ray job with ``working_dir`` uploaded; follow its logs.

    The job runs ``PYTHON -m hpo run STUDY --address auto`` on the cluster (so its trials
    are Ray Tune trials there). Returns 0 when the job succeeds (or when not waiting), 1 when it
    fails. A :class:`~hpo._errors.UsageError` about ``address`` names it by ``where``, the flag
    or field that gave it (``hpo submit``: ``--dashboard``).
    """
    wd = Path(working_dir).resolve()
    spath = Path(study_path).resolve()
    if not wd.is_dir():
        raise UsageError(f"--working-dir must be a folder, but got "
                         f"--working-dir={working_dir!r}.")
    try:
        rel = spath.relative_to(wd)
    except ValueError:
        raise UsageError(f"the study file must lie inside --working-dir ({wd}), but got "
                         f"{study_path!r}.") from None
    check_address(address, where, what="the Ray job server")
    try:
        client = JobSubmissionClient(address)
    except Exception as exc:  # connection refused, bad scheme, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot reach the Ray job server at {where}={address!r}: "
                         f"{first}") from None

    entry = f"{shlex.quote(python)} -m hpo run {shlex.quote(rel.as_posix())} --address auto"
    if output:
        entry += f" --output {shlex.quote(output)}"
    excludes = [".venv", ".git", "runs", "**/__pycache__", "*.egg-info", ".pytest_cache",
                ".ruff_cache"]
    deadline = time.monotonic() + 90
    while True:  # a cluster that just started answers 500 until its job agent is up
        try:
            job_id = client.submit_job(entrypoint=entry, runtime_env={
                "working_dir": str(wd), "excludes": excludes})
            break
        except RuntimeError as exc:
            if "No available agent" not in str(exc) or time.monotonic() > deadline:
                raise UsageError(f"the Ray job server at {where}={address!r} refused the "
                                 f"job: {str(exc).strip().splitlines()[0]}") from None
            time.sleep(2.0)
    print(f"submitted {study.name!r} as Ray job {job_id} to {address}: {entry}", flush=True)
    if not wait:
        return 0
    t0 = time.monotonic()
    shown = 0
    terminal = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    while True:
        status = client.get_job_status(job_id)
        logs = client.get_job_logs(job_id)
        if len(logs) > shown:
            sys.stdout.write(logs[shown:])
            sys.stdout.flush()
            shown = len(logs)
        if status in terminal:
            break
        if timeout is not None and time.monotonic() - t0 > timeout:
            print(f"job {job_id} still {status} after {timeout:.0f} s; it keeps running "
                  f"(ray job logs {job_id} --address {address})", flush=True)
            return 1
        time.sleep(2.0)
    print(f"job {job_id}: {status}", flush=True)
    return 0 if status == JobStatus.SUCCEEDED else 1
