"""Stage 3 of a study: the Optuna sweep with the collapse pruner, run in this process.

:class:`SweepStage` opens the study's storage with its sampler and pruner and runs trials until
the budget is used: it claims the next trial (which process runs which trial is
:mod:`hpo.study.claims`'s: a trial left ``RUNNING`` by a killed process is marked failed and its
parameters enqueued again) and hands it to :class:`hpo.study.trial.TrialRun`, which trains it,
reports the loss the study optimizes ``pruner.report_points`` times and records how it ended (a
re-run continues from the interrupted trial's checkpoint, so the pruner sees the whole curve).
With ``--verify`` it trains each stopped trial to its end afterwards.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.pruners import BasePruner
from optuna.samplers import BaseSampler
from optuna.storages import BaseStorage
from optuna.storages.journal import JournalFileBackend
from sqlalchemy import event

from hpo.predictors import load_universal_curve
from hpo.pruning import INTERVAL_ATTR, PREDICTION_ATTR, CollapsePruner, trial_state
from hpo.pruning import TrialState as HpoState
from hpo.study.claims import Claims
from hpo.study.plan import flops, trial_setup
from hpo.study.pruner import pruner_kwargs
from hpo.study.samplers import AskTellGridSampler
from hpo.study.schema import JOURNAL_PREFIX, grid_values
from hpo.study.stage import RunContext, Stage
from hpo.study.trial import TrialRun
from hpo.study.trials import distribution, fmt_number, objective_value, run_id_of

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
    backend shares of it: the storage and the sampler."""

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.claims = Claims(self.study, self.progress)  # who runs which trial

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
        reference = None if curve_path is None else load_universal_curve(curve_path)
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
                TrialRun(self.ctx, ostudy, trial, reference).run()
            finally:
                alive.set()

    def grid_size(self) -> int | None:
        if self.study.sampler["type"] != "grid":
            return None
        return math.prod(len(set(map(repr, grid_values(d)))) for d in self.study.search.values())

    # ------------------------------------------------------------------ verification
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
            cfg, rec = trial_setup(self.ctx, dict(t.params), t.number, run_id_of(t))
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
