"""The claim, heartbeat and re-queue protocol of a study's trials on its storage.

Any number of processes run one sweep on one Optuna storage (``hpo run --workers N``,
``hpo run --worker``): a grid point or a re-run is enqueued once and claimed by one worker (an
atomic WAITING -> RUNNING update); a running trial's worker writes a heartbeat every
``heartbeat`` seconds, and a trial whose heartbeat stops for three periods is failed, marked
interrupted and enqueued again with the same parameters (the new trial continues from the
interrupted one's checkpoint). :class:`Claims` holds this protocol; the sweep stage
(:mod:`hpo.study.sweep`) decides what to run and trains it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from hpo.pruning import live_trial, set_trial_state, set_trial_system_attr
from hpo.study.schema import Study, grid_values
from hpo.study.trials import (
    HEARTBEAT_ATTR,
    INTERRUPTED_ATTR,
    RESUME_RUN_ID_ATTR,
    params_text,
    run_id_of,
    same_params,
)

__all__ = ["Claims"]


class Claims:
    """The claim, heartbeat and re-queue protocol (module docstring) of ``study``'s trials;
    ``progress`` is told of every re-run."""

    def __init__(self, study: Study, progress: Callable[[str], None]) -> None:
        self.study = study
        self.progress = progress

    def requeue_interrupted(self, ostudy: optuna.Study) -> int:
        """Enqueue again the trials a Ctrl-C interrupted (failed, marked interrupted, not yet
        re-run). Run by the coordinating process only, before any worker starts."""
        trials = ostudy.get_trials(deepcopy=False)
        rerun = {t.user_attrs.get("rerun_of") for t in trials}
        n = 0
        for t in trials:
            if (t.state == TrialState.FAIL and t.system_attrs.get(INTERRUPTED_ATTR)
                    and t.number not in rerun):
                self.rerun(ostudy, t)
                n += 1
        return n

    def requeue_stale(self, ostudy: optuna.Study, trials: Sequence[FrozenTrial]) -> int:
        """Fail and enqueue again the running ones of ``trials`` (the study's, as just read)
        whose worker died: no heartbeat for three ``heartbeat`` periods (a trial's worker writes
        one every period). Safe with many workers: only the worker whose RUNNING -> FAIL update
        succeeds enqueues the re-run. Returns how many it re-enqueued."""
        grace = 3 * self.study.heartbeat
        now = time.time()
        n = 0
        for t in trials:
            if t.state != TrialState.RUNNING:
                continue
            start = t.datetime_start.timestamp() if t.datetime_start else now
            if now - float(t.system_attrs.get(HEARTBEAT_ATTR, start)) <= grace:
                continue
            try:  # attrs first: a finished trial cannot be updated
                set_trial_system_attr(ostudy, t, INTERRUPTED_ATTR, True)
                if not set_trial_state(ostudy, t, TrialState.FAIL):
                    continue
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # another worker got there first, or it just finished
            self.rerun(ostudy, t)
            n += 1
        return n

    def rerun(self, ostudy: optuna.Study, t: FrozenTrial) -> None:
        # its checkpoint stays: the re-run continues from it (run_trial). A trial interrupted
        # between its claim and its suggestions holds its enqueued values only
        params = {**t.system_attrs.get("fixed_params", {}), **t.params}
        ostudy.enqueue_trial(params, user_attrs={
            "rerun_of": t.number, RESUME_RUN_ID_ATTR: run_id_of(t)}, skip_if_exists=False)
        self.progress(f"trial {t.number} was interrupted: re-running it as a new trial "
                      f"with the same params {params_text(params)}")

    def enqueue_grid(self, ostudy: optuna.Study, budget: int) -> int:
        """With the grid sampler, enqueue the grid points that no trial holds yet, in grid
        order, until ``budget`` points are held, so that workers take them one each from the
        storage (an atomic claim) and none runs twice."""
        if self.study.sampler["type"] != "grid":
            return 0
        names = list(self.study.search)
        grid = [list(dict.fromkeys(grid_values(self.study.search[n]))) for n in names]
        held = [dict(t.params) or dict(t.system_attrs.get("fixed_params", {}))
                for t in ostudy.get_trials(deepcopy=False)
                if not (t.state == TrialState.FAIL and t.system_attrs.get(INTERRUPTED_ATTR))]
        n = 0
        for combo in itertools.product(*grid):
            params = dict(zip(names, combo, strict=True))
            if len(held) + n >= budget:
                break
            if not any(same_params(params, h) for h in held):
                ostudy.enqueue_trial(params, skip_if_exists=False)
                n += 1
        return n

    def beat(self, ostudy: optuna.Study, trial: optuna.Trial) -> threading.Event:
        """Mark ``trial`` alive every ``heartbeat`` seconds until the returned event is set."""
        stop = threading.Event()
        period = self.study.heartbeat

        def beat() -> None:
            while True:
                try:
                    set_trial_system_attr(ostudy, trial, HEARTBEAT_ATTR, time.time())
                except Exception:  # finished (or the storage is gone): nothing to keep alive
                    return
                if stop.wait(period):
                    return

        threading.Thread(target=beat, name=f"hpo-heartbeat-{trial.number}", daemon=True).start()
        return stop

    @staticmethod
    def claim_waiting(ostudy: optuna.Study, dists: dict[str, BaseDistribution]
                      ) -> optuna.Trial | None:
        """Claim one enqueued trial (WAITING -> RUNNING succeeds for one worker only) and set
        its fixed parameters; ``None`` when every waiting trial was claimed by others."""
        for t in ostudy.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            try:
                if not set_trial_state(ostudy, t, TrialState.RUNNING):
                    continue
            except optuna.exceptions.UpdateFinishedTrialError:
                continue
            trial = live_trial(ostudy, t)
            for name, d in dists.items():  # the enqueued values (Optuna's fixed params)
                if isinstance(d, optuna.distributions.CategoricalDistribution):
                    trial.suggest_categorical(name, d.choices)
                elif isinstance(d, optuna.distributions.IntDistribution):
                    trial.suggest_int(name, d.low, d.high, step=d.step, log=d.log)
                else:
                    trial.suggest_float(name, d.low, d.high, step=d.step, log=d.log)
            return trial
        return None

    @staticmethod
    def counts(trials: Sequence[FrozenTrial]) -> tuple[int, int, int]:
        """(used, running, waiting) of ``trials``: used are the completed, stopped and failed
        trials, not the interrupted ones (those run again)."""
        used = running = waiting = 0
        for t in trials:
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
                used += 1
            elif t.state == TrialState.FAIL and not t.system_attrs.get(INTERRUPTED_ATTR):
                used += 1
            elif t.state == TrialState.RUNNING:
                running += 1
            elif t.state == TrialState.WAITING:
                waiting += 1
        return used, running, waiting

