"""optuna-dashboard over a study that ``hpo run`` made, in a real headless Chromium: a pruned
trial's prediction, interval and explanation are on its page.

``HPO_DASHBOARD_SCREENSHOT=PATH`` also writes the screenshot there (the README's picture, of the
quickstart, comes from ``benchmarks/dashboard_picture.py``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from benchmarks.dashboard_picture import CHROMIUM, DRIVER, screenshot
from hpo.cli import main
from tests.hpo._studies import TINY, write_study

pytestmark = pytest.mark.slow


def test_dashboard_shows_a_pruned_trials_prediction(tmp_path: Path) -> None:
    if not (CHROMIUM.exists() and DRIVER.exists()):
        pytest.skip("headless browser missing: apt-get install chromium chromium-driver")
    pytest.importorskip("selenium.webdriver", reason="pip install selenium")
    pytest.importorskip("optuna_dashboard", reason="pip install optuna-dashboard")
    # the best settings first, so that the worse ones are stopped against it
    search = {"lr": {**TINY["search"]["lr"], "values": [0.02, 0.005]},
              "tau": {**TINY["search"]["tau"], "values": [0.4, 0.1]}}
    path = write_study(tmp_path, "tiny", search=search)
    assert main(["run", str(path), "--quiet", "--no-report"]) == 0
    url = f"sqlite:///{tmp_path / 'out' / 'study.db'}"
    pruned = [t for t in optuna.load_study(study_name="tiny", storage=url).trials
              if t.state == TrialState.PRUNED]
    assert pruned, "the study stopped no trial"
    trial = pruned[0]

    shot = tmp_path / "dashboard.png"
    text = screenshot(url, trial.number, shot)
    # the pruned trial's page: its state, the sentence, the prediction and its interval
    assert f"Trial {trial.number}" in text and "Pruned" in text
    assert f"collapse_reason {trial.user_attrs['collapse_reason']}" in text
    low, high = trial.user_attrs["predicted_final_loss_interval"]
    assert f"predicted_final_loss {trial.user_attrs['predicted_final_loss']}" in text
    assert f"predicted_final_loss_interval [{low}, {high}]" in text
    assert shot.stat().st_size > 20_000
    if os.environ.get("HPO_DASHBOARD_SCREENSHOT"):
        shutil.copy(shot, os.environ["HPO_DASHBOARD_SCREENSHOT"])
