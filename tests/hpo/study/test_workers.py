"""Many workers on one storage, SIGKILL at random moments, and training faults: nothing lost."""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from hpo.cli import main
from tests.hpo._studies import TINY, write_study

ROOT = Path(__file__).resolve().parents[3]
GRID = {"lr": [0.005, 0.02], "tau": [0.1, 0.4]}


def _write(tmp_path: Path, storage: str | None, **changes) -> Path:
    return write_study(tmp_path, "tiny", heartbeat=1, storage=storage, **changes)


def _storage(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str | None:
    if kind == "sqlite":
        return None  # the default, sqlite:///<output>/study.db
    if kind == "journal":
        return f"journal:///{tmp_path / 'journal.log'}"
    return request.getfixturevalue("postgres_server")()


def _storage_url(path: Path, storage: str | None) -> optuna.storages.BaseStorage:
    if storage is None:
        return optuna.storages.RDBStorage(f"sqlite:///{path.parent / 'out' / 'study.db'}")
    if storage.startswith("journal:///"):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(storage[len("journal:///"):]))
    return optuna.storages.RDBStorage(storage)


def _check_complete(path: Path, storage: str | None) -> list[optuna.trial.FrozenTrial]:
    """Every grid point finished exactly once, nothing left running or waiting, and every
    finished trial's curve on disk and readable."""
    study = optuna.load_study(study_name="tiny", storage=_storage_url(path, storage))
    trials = study.get_trials(deepcopy=False)
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    points = sorted((t.params["lr"], t.params["tau"]) for t in finished)
    # each exactly once; else every trial, to tell where a point went
    assert points == sorted(itertools.product(GRID["lr"], GRID["tau"])), "\n".join(
        f"{t.number} {t.state.name} {t.params or t.system_attrs.get('fixed_params')} "
        f"{t.user_attrs} {({k: v for k, v in t.system_attrs.items() if k.startswith('hpo')})}"
        for t in trials)
    for t in finished:
        curve = pd.read_csv(path.parent / "out" / "trials" / f"{t.number}.csv.gz")
        assert len(curve) > 0 and curve["loss"].notna().all()
    # every interrupted trial was re-run as a new trial
    interrupted = [t for t in trials if t.state == TrialState.FAIL
                   and t.system_attrs.get("hpo:interrupted")]
    rerun = {t.user_attrs.get("rerun_of") for t in trials}
    assert all(t.number in rerun for t in interrupted)
    return finished


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "journal", "postgres"])
def test_sigkill_at_random_moments_loses_nothing(kind: str, tmp_path: Path, request) -> None:
    """Four workers (more than the grid's concurrency on 2 cores) share one sweep on each
    storage, killed with their coordinator five times; the sixth run finishes it: every grid
    point once, nothing lost, the proxies trained by the coordinator alone."""
    storage = _storage(kind, tmp_path, request)
    path = _write(tmp_path, storage)
    rng = random.Random(kind)
    cmd = [sys.executable, "-m", "hpo", "run", str(path), "--workers", "4", "--quiet",
           "--no-report"]
    kills = 0
    for _ in range(5):  # the whole tiny study takes about 25 s: five kills land inside it
        proc = subprocess.Popen(cmd, cwd=tmp_path, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(2, 5))
        if proc.poll() is not None:
            break  # finished before the kill
        os.killpg(proc.pid, signal.SIGKILL)  # the coordinator and its workers, at once
        proc.wait()
        kills += 1
    assert kills == 5
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    finished = _check_complete(path, storage)
    # no setting trained twice to its end: each finished trial's run is its own
    ids = [t.user_attrs.get("rerun_of", t.number) for t in finished]
    assert len(set(ids)) == len(finished)
    assert len(finished) == 4
    assert len(list((tmp_path / "out" / "proxies").glob("*.csv.gz"))) == 3


@pytest.mark.slow
def test_training_faults_fail_the_trial_and_the_study_goes_on(tmp_path: Path, monkeypatch,
                                                              capsys) -> None:
    import torch

    import hpo.models.training as train_module

    real = train_module.train
    # what a GPU out of memory raises, raised on CPU
    faults = {0.005: torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"),
              0.02: ValueError("a bug in a custom model")}

    def train(cfg, callback=None):
        fault = faults.get(round(cfg.lr, 6)) if cfg.tau == 0.1 else None
        if fault is not None:
            raise fault
        if round(cfg.lr, 6) == 0.005:  # an LR that sends the loss to NaN within steps
            cfg = dataclasses.replace(cfg, lr=1e6)
        return real(cfg, callback)

    monkeypatch.setattr(train_module, "train", train)
    path = write_study(tmp_path, "tiny", search={**TINY["search"]}, pruner={"enabled": False})
    assert main(["run", str(path), "--no-report"]) == 0
    study = optuna.load_study(study_name="tiny",
                              storage=f"sqlite:///{tmp_path / 'out' / 'study.db'}")
    reasons = {(t.params["lr"], t.params["tau"]): t.user_attrs["fail_reason"]
               for t in study.trials if t.state == TrialState.FAIL}
    assert reasons[(0.005, 0.1)] == "OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"
    assert reasons[(0.02, 0.1)] == "ValueError: a bug in a custom model"
    assert reasons[(0.005, 0.4)].startswith("diverged after ")  # a NaN loss
    # the last one ran to the end, and no failed point was run again
    assert [t.params for t in study.trials if t.state == TrialState.COMPLETE] == [
        {"lr": 0.02, "tau": 0.4}]
    assert len(study.trials) == 4
    assert "trial 0 failed: OutOfMemoryError: CUDA out of memory" in capsys.readouterr().out


@pytest.mark.slow
def test_one_and_four_workers_stop_the_same_trials(tmp_path: Path) -> None:
    # the best settings first, so that the worse ones are stopped against them
    search = {"lr": {**TINY["search"]["lr"], "values": [0.02, 0.005]},
              "tau": {**TINY["search"]["tau"], "values": [0.4, 0.1]}}
    path = write_study(tmp_path, "tiny", search=search, heartbeat=1)
    states = {}
    for n in (1, 4):
        out = tmp_path / f"out{n}"
        if n > 1:  # the same proxies (reused, not trained again): only the workers differ
            out.mkdir()
            shutil.copytree(tmp_path / "out1" / "proxies", out / "proxies")
        r = subprocess.run([sys.executable, "-m", "hpo", "run", str(path), "--output", str(out),
                            "--workers", str(n), "--quiet", "--no-report"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{out / 'study.db'}")
        states[n] = sorted(((t.params["lr"], t.params["tau"]), t.state.name)
                           for t in study.trials)
    assert states[1] == states[4]
    # the best setting, run first, ends; the worse ones are stopped against it
    assert ((0.02, 0.4), "COMPLETE") in states[1]
    assert [s for _, s in states[1]].count("PRUNED") >= 2


@pytest.mark.slow
def test_a_budget_below_the_grid_runs_that_many_points(tmp_path: Path) -> None:
    path = write_study(tmp_path, "tiny", budget={"trials": 2}, pruner={"enabled": False},
                       heartbeat=1)
    os.chdir(tmp_path)
    assert main(["run", str(path), "--workers", "2", "--quiet", "--no-report"]) == 0
    study = optuna.load_study(study_name="tiny",
                              storage=f"sqlite:///{tmp_path / 'out' / 'study.db'}")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2  # none left waiting


def _refuse(url: str, allow: bool) -> None:
    """Make the PostgreSQL database of ``url`` refuse (or accept again) every connection, and
    close the ones it has: what a study meets when its database goes away."""
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname="postgres",
                         autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {u.database} ALLOW_CONNECTIONS {str(allow).lower()}")
        if not allow:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                         "datname = %s", (u.database,))


@pytest.mark.slow
def test_a_database_that_refuses_connections_mid_study(tmp_path: Path, postgres_server) -> None:
    """The study's database refuses connections once a trial has finished: ``hpo run`` (a
    coordinator and the worker it started) ends with one line naming the storage (its password
    masked) and exit 2; run again once the database is back, it finishes the study with every
    trial finished before kept."""
    workers = 2
    storage = postgres_server()
    path = _write(tmp_path, storage)
    cmd = [sys.executable, "-m", "hpo", "run", str(path), "--workers", str(workers),
           "--no-report"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    before: list[optuna.trial.FrozenTrial] = []
    while not before:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.5)
        try:
            study = optuna.load_study(study_name="tiny", storage=storage)
        except KeyError:  # not created yet
            continue
        before = [t for t in study.get_trials(deepcopy=False)
                  if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    _refuse(storage, allow=False)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        _refuse(storage, allow=True)
    assert proc.returncode == 2, out[-2000:] + err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert "storage" in lines[0] and storage in lines[0], lines[0]
    # run again: the study finishes, and what finished before the database went away is kept
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    finished = {t.number: t for t in _check_complete(path, storage)}
    for t in before:
        assert finished[t.number].value == t.value and finished[t.number].params == t.params


def test_a_trial_lost_between_its_claim_and_its_params_runs_again_whole(tmp_path: Path) -> None:
    """A worker that dies (or loses its storage) after claiming an enqueued grid point and
    before setting its parameters leaves a RUNNING trial without params: its re-run is
    enqueued with the point's values, so the grid sampler can run it."""
    from hpo.pruning import set_trial_state
    from hpo.study.runner import StudyRunner
    from hpo.study.schema import load_study
    from hpo.study.sweep import SweepStage
    from hpo.study.trials import HEARTBEAT_ATTR

    runner = StudyRunner(load_study(_write(tmp_path, None)), lambda line: None)
    ostudy = optuna.create_study(study_name="tiny")
    ostudy.enqueue_trial({"lr": 0.02, "tau": 0.4})
    claimed = ostudy.get_trials(deepcopy=False)[0]
    assert set_trial_state(ostudy, claimed, TrialState.RUNNING)
    ostudy._storage.set_trial_system_attr(claimed._trial_id, HEARTBEAT_ATTR, 0.0)
    claims = SweepStage(runner.ctx).claims
    assert claims.requeue_stale(ostudy, ostudy.get_trials(deepcopy=False)) == 1
    rerun = ostudy.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert [t.system_attrs["fixed_params"] for t in rerun] == [{"lr": 0.02, "tau": 0.4}]
    assert rerun[0].user_attrs["rerun_of"] == claimed.number
