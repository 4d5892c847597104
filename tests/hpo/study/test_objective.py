"""The pruner sees the loss the study optimizes, in every backend: with ``objective: val`` each
trial reports its val loss (evaluated at each report) to the Optuna pruner and to the Ray
scheduler, and its value is its final val loss."""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pandas as pd
import pytest

from hpo.study.runner import StudyRunner
from hpo.study.schema import load_study
from tests.hpo._studies import write_study


def _check_val_reports(out: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    """Assert that every trial's intermediate values are its val losses, one at each report,
    and that a completed trial's value is its last val loss; returns the trials."""
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{out / 'study.db'}")
    trials = study.get_trials(deepcopy=False)
    assert trials
    for t in trials:
        curve = pd.read_csv(out / "trials" / f"{t.number}.csv.gz")
        val = dict(zip(curve.loc[curve.split == "val", "step"],
                       curve.loc[curve.split == "val", "loss"], strict=True))
        train = dict(zip(curve.loc[curve.split == "train", "step"],
                         curve.loc[curve.split == "train", "loss"], strict=True))
        reported = t.intermediate_values
        # what the pruner saw is the val curve at each report, not the train loss
        assert len(reported) >= 10
        assert set(reported) <= set(val)
        assert all(math.isclose(v, val[s]) for s, v in reported.items())
        assert any(not math.isclose(v, train[s]) for s, v in reported.items())
        if t.state == optuna.trial.TrialState.COMPLETE:
            assert t.value == pytest.approx(val[max(val)])
    return trials


@pytest.mark.slow
def test_local_sweep_reports_the_val_loss_to_the_pruner(tmp_path: Path) -> None:
    path = write_study(tmp_path, objective="val", budget={"trials": 2})
    StudyRunner(load_study(path), report=False).run()
    trials = _check_val_reports(tmp_path / "out", "tiny")
    # the pruner judged them on it: its predictions are of val finals
    records = [r for t in trials for k, r in t.system_attrs.items()
               if k.startswith("collapse:cp:")]
    assert records


@pytest.mark.slow
def test_ray_sweep_reports_the_val_loss_to_the_scheduler(ray_session, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from hpo.pruning import STATE_FILE

    # the backend turns Tune's result loggers on; restored for the session's other tests
    monkeypatch.setenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    path = write_study(tmp_path, objective="val", backend="ray", budget={"trials": 2},
                       ray={"max_concurrent": 1})
    StudyRunner(load_study(path), report=False).run()
    out = tmp_path / "out"
    trials = _check_val_reports(out, "tiny")
    # the scheduler judged each trial on the same values: its state holds the val losses
    state = json.loads((out / "ray" / "tiny" / STATE_FILE).read_text())["trials"]
    by_ray_id = {t.user_attrs["ray_trial_id"]: t for t in trials}
    assert set(state) == set(by_ray_id)
    for trial_id, rec in state.items():
        reported = by_ray_id[trial_id].intermediate_values
        assert dict(zip(rec["times"], rec["values"], strict=True)) == pytest.approx(
            {float(s): v for s, v in reported.items()})
